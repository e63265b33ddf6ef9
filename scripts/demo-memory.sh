#!/usr/bin/env bash
# Resident memory of the demo over time: runs `streamward demo --plain` (the embedded
# sandbox, its listeners and workload, at default settings unless extra arguments say
# otherwise) for MINUTES minutes and prints its VmRSS once a minute, with the demo's
# census of that minute (documents per collection, entries in the sandbox's log). At
# the end it prints the last table the demo drew.
#
#   scripts/demo-memory.sh [MINUTES] [-- extra demo arguments]
#
# Uses the release binary (built first, in CARGO_TARGET_DIR if set). Figures go to
# docs/performance.md.
set -euo pipefail
cd "$(dirname "$0")/.."

minutes="${1:-10}"
shift || true
[ "${1:-}" = "--" ] && shift

cargo build --release --locked --quiet
binary="$(realpath "${CARGO_TARGET_DIR:-target}")/release/streamward"
cd "$(mktemp -d)"
echo "binary $binary, work files in $PWD"
# The census goes to the log file; the tables to a file, for the last one.
STREAMWARD_LOG="$PWD/demo.log" "$binary" demo --plain --duration "$((minutes * 60 + 5))s" "$@" \
  >frames.txt 2>stderr.txt &
pid=$!
trap 'kill "$pid" 2>/dev/null || true' EXIT
census() {
  grep 'demo census' demo.log 2>/dev/null | tail -n 1 |
    grep -o '\(animals\|aggregates\|orders\|outbox\|mails\|log_entries\)=[0-9]*' | tr '\n' ' ' || true
}
sleep 2 # so the census of each minute (logged on the minute) is in the log when sampled
for minute in $(seq 1 "$minutes"); do
  sleep 60
  rss_kb="$(awk '/^VmRSS:/ {print $2}' "/proc/$pid/status" 2>/dev/null || echo 0)"
  echo "minute ${minute}: $((rss_kb / 1024)) MB resident   $(census)"
done
wait "$pid" || true
echo "at the end: $(census)"
echo "last table:"
awk '/^streamward demo/ {frame = ""} {frame = frame $0 "\n"} END {printf "%s", frame}' frames.txt
