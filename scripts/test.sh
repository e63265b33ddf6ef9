#!/usr/bin/env bash
# The whole test suite, real MongoDB included: starts a single-node replica set, one
# with a 1 MB oplog (history loss for real), a three-member set (real elections, a
# majority that can be made unreachable, fail points) and two single-node sets a scripted
# mongos lists as its shards (tests/sharded_live.rs), runs `cargo test` against them with
# STREAMWARD_TEST_URI / STREAMWARD_TEST_URI_SMALL_OPLOG / STREAMWARD_TEST_URI_RS3 /
# STREAMWARD_TEST_URI_SHARD_A / STREAMWARD_TEST_URI_SHARD_B set,
# and stops them however it ends. `--features contract` builds the store contract,
# which tests/contract_sandbox.rs and tests/contract_mongo.rs run (Cargo.toml: their
# required features). Extra arguments go to `cargo test`
# (e.g. `scripts/test.sh --test contract_mongo`).
# mongod is fetched on first use and cached (see scripts/mongo-replset.sh).
set -euo pipefail
cd "$(dirname "$0")/.."

work="$(mktemp -d -t streamward-test.XXXXXX)"
cleanup() {
  scripts/mongo-replset.sh stop --dir "$work/rs" || true
  scripts/mongo-replset.sh stop --dir "$work/small" || true
  scripts/mongo-replset.sh stop --dir "$work/rs3" || true
  scripts/mongo-replset.sh stop --dir "$work/shardA" || true
  scripts/mongo-replset.sh stop --dir "$work/shardB" || true
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
# Two shards for tests/sharded_live.rs (MongoDB's wheel here has no mongos; the test's
# scripted router lists these and forwards everything but the oplog to shardA).
STREAMWARD_TEST_URI_SHARD_A="$(scripts/mongo-replset.sh start --dir "$work/shardA" --name shardA)"
STREAMWARD_TEST_URI_SHARD_B="$(scripts/mongo-replset.sh start --dir "$work/shardB" --name shardB)"
export STREAMWARD_TEST_URI STREAMWARD_TEST_URI_SMALL_OPLOG STREAMWARD_TEST_URI_RS3
export STREAMWARD_TEST_URI_SHARD_A STREAMWARD_TEST_URI_SHARD_B
# A live test that would skip fails instead: this command always means "against a real server".
export STREAMWARD_REQUIRE_LIVE=1
echo "   $STREAMWARD_TEST_URI"
echo "   $STREAMWARD_TEST_URI_SMALL_OPLOG (1 MB oplog)"
echo "   $STREAMWARD_TEST_URI_RS3 (three members)"
echo "   $STREAMWARD_TEST_URI_SHARD_A, $STREAMWARD_TEST_URI_SHARD_B (shards)"

echo "== cargo test --features contract"
# Every test binary runs even after one fails, so one CI run shows every failure.
cargo test --locked --no-fail-fast --features contract "$@"
