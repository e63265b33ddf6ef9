#!/usr/bin/env bash
# The whole test suite, real MongoDB included: starts a single-node replica set and one
# with a 1 MB oplog (history loss for real), runs `cargo test` against them with
# STREAMWARD_TEST_URI / STREAMWARD_TEST_URI_SMALL_OPLOG set, and stops them however it
# ends. Extra arguments go to `cargo test` (e.g. `scripts/test.sh --test contract_mongo`).
# mongod is fetched on first use and cached (see scripts/mongo-replset.sh).
set -euo pipefail
cd "$(dirname "$0")/.."

work="$(mktemp -d -t streamward-test.XXXXXX)"
cleanup() {
  scripts/mongo-replset.sh stop --dir "$work/rs" || true
  scripts/mongo-replset.sh stop --dir "$work/small" || true
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

echo "== starting a real MongoDB replica set"
STREAMWARD_TEST_URI="$(scripts/mongo-replset.sh start --dir "$work/rs")"
STREAMWARD_TEST_URI_SMALL_OPLOG="$(scripts/mongo-replset.sh start --dir "$work/small" --oplog-mb 1 --name rsSmall)"
export STREAMWARD_TEST_URI STREAMWARD_TEST_URI_SMALL_OPLOG
# A live test that would skip fails instead: this command always means "against a real server".
export STREAMWARD_REQUIRE_LIVE=1
echo "   $STREAMWARD_TEST_URI"
echo "   $STREAMWARD_TEST_URI_SMALL_OPLOG (1 MB oplog)"

echo "== cargo test"
cargo test --locked "$@"
