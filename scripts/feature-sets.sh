#!/usr/bin/env bash
# Builds and lints each documented feature set on its own (docs/architecture.md, "What a
# build holds"), so the compiler keeps the layers apart: a module that reached into one
# a set leaves out fails here. Then checks that the engine on MongoDB alone pulls in no
# terminal, command-line or Prometheus crate (what a service that embeds it compiles:
# normal and build dependencies; the tests' own dev-dependencies are not its).
set -euo pipefail
cd "$(dirname "$0")/.."

# The sets a user may build; every feature together is linted by .ci/run itself.
# `contract` alone: the store contract needs no store of its own.
sets=("" "sandbox" "mongo" "metrics" "mongo,metrics" "sandbox,metrics" "console" "contract")
for set in "${sets[@]}"; do
  echo "== cargo clippy --lib --no-default-features --features \"$set\""
  cargo clippy --locked --lib --no-default-features --features "$set" -- -D warnings
done

echo "== dependencies of --no-default-features --features mongo"
forbidden='^(ratatui|crossterm|clap|clap_complete|clap_mangen|hyper|hyper-util|prometheus|indicatif|anyhow) '
# On its own line, so that a failing `cargo tree` stops the script (set -e) instead of
# reading as an empty tree.
tree="$(cargo tree --locked -e normal,build --no-default-features --features mongo --prefix none)"
found="$(printf '%s\n' "$tree" | sort -u | grep -E "$forbidden" || true)"
if [ -n "$found" ]; then
  echo "the engine on MongoDB alone pulls in:" >&2
  echo "$found" >&2
  exit 1
fi
echo "   none of ratatui, crossterm, clap, hyper, prometheus, indicatif, anyhow"
