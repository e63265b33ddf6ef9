#!/usr/bin/env bash
# Resident memory of the demo over time: runs `streamward demo --plain` (the embedded
# sandbox, its listeners and workload, at default settings unless extra arguments say
# otherwise) for MINUTES minutes and prints its VmRSS once a minute.
#
#   scripts/demo-memory.sh [MINUTES] [-- extra demo arguments]
#
# Uses the release binary (built first). Figures go to docs/performance.md.
set -euo pipefail
cd "$(dirname "$0")/.."

minutes="${1:-10}"
shift || true
[ "${1:-}" = "--" ] && shift

cargo build --release --locked --quiet
binary="$PWD/target/release/streamward"
cd "$(mktemp -d)"
"$binary" demo --plain --duration "$((minutes * 60 + 5))s" "$@" >/dev/null 2>&1 &
pid=$!
trap 'kill "$pid" 2>/dev/null || true' EXIT
for minute in $(seq 1 "$minutes"); do
  sleep 60
  rss_kb="$(awk '/^VmRSS:/ {print $2}' "/proc/$pid/status" 2>/dev/null || echo 0)"
  echo "minute ${minute}: $((rss_kb / 1024)) MB resident"
done
wait "$pid" || true
