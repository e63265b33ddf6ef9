#!/usr/bin/env bash
# The whole test suite, real MongoDB included: starts a single-node replica set, one
# with a 1 MB oplog (history loss for real) and a three-member set (real elections, a
# majority that can be made unreachable, fail points), runs `cargo test` against them with
# STREAMWARD_TEST_URI / STREAMWARD_TEST_URI_SMALL_OPLOG / STREAMWARD_TEST_URI_RS3 set,
# and stops them however it ends. Extra arguments go to `cargo test`
# (e.g. `scripts/test.sh --test contract_mongo`).
# mongod is fetched on first use and cached (see scripts/mongo-replset.sh).
set -euo pipefail
cd "$(dirname "$0")/.."

work="$(mktemp -d -t streamward-test.XXXXXX)"
cleanup() {
  scripts/mongo-replset.sh stop --dir "$work/rs" || true
  scripts/mongo-replset.sh stop --dir "$work/small" || true
  scripts/mongo-replset.sh stop --dir "$work/rs3" || true
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

echo "== starting a real MongoDB replica set"
STREAMWARD_TEST_URI="$(scripts/mongo-replset.sh start --dir "$work/rs")"
STREAMWARD_TEST_URI_SMALL_OPLOG="$(scripts/mongo-replset.sh start --dir "$work/small" --oplog-mb 1 --name rsSmall)"
# Three members for tests/failover_live.rs; each has a 0.25 GB WiredTiger cache, as
# every member the script starts. They idle (heartbeats) except while that suite runs.
STREAMWARD_TEST_URI_RS3="$(scripts/mongo-replset.sh start --dir "$work/rs3" --members 3 --name rs3)"
export STREAMWARD_TEST_URI STREAMWARD_TEST_URI_SMALL_OPLOG STREAMWARD_TEST_URI_RS3
# A live test that would skip fails instead: this command always means "against a real server".
export STREAMWARD_REQUIRE_LIVE=1
echo "   $STREAMWARD_TEST_URI"
echo "   $STREAMWARD_TEST_URI_SMALL_OPLOG (1 MB oplog)"
echo "   $STREAMWARD_TEST_URI_RS3 (three members)"

echo "== cargo test"
# Every test binary runs even after one fails, so one CI run shows every failure.
cargo test --locked --no-fail-fast "$@"
