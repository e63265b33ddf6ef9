#!/usr/bin/env bash
# Starts a throwaway single-node replica set for the live tests and prints its URI.
#
#   eval "$(scripts/mongo-replset.sh --export)"   # sets STREAMWARD_TEST_URI
#   cargo test --test mongo_live
#
# Options: --port N (default 27517), --dir D (default a new temp dir), --export.
# Stop it with: mongod --dbpath <dir> --shutdown   (the script prints the command).
set -euo pipefail

port=27517
dir=""
export_form=0
while [ $# -gt 0 ]; do
  case "$1" in
    --port) port="$2"; shift 2 ;;
    --dir) dir="$2"; shift 2 ;;
    --export) export_form=1; shift ;;
    -h|--help) sed -n '2,10p' "$0"; exit 0 ;;
    *) echo "unknown option: $1" >&2; exit 2 ;;
  esac
done

if ! command -v mongod >/dev/null 2>&1; then
  echo "mongod is not on PATH: install MongoDB 5.0 or newer (https://www.mongodb.com/try/download/community)" >&2
  echo "or point STREAMWARD_TEST_URI at an existing replica set." >&2
  exit 1
fi

dir="${dir:-$(mktemp -d -t streamward-rs.XXXXXX)}"
mkdir -p "$dir"
mongod --replSet rs0 --port "$port" --bind_ip 127.0.0.1 --dbpath "$dir" \
  --logpath "$dir/mongod.log" --fork --setParameter enableTestCommands=1 >/dev/null

# Initiate the set with the shell that is available, then wait for a primary.
initiate="rs.initiate({_id: 'rs0', members: [{_id: 0, host: '127.0.0.1:$port'}]})"
status="db.hello().isWritablePrimary"
if command -v mongosh >/dev/null 2>&1; then shell=mongosh
elif command -v mongo >/dev/null 2>&1; then shell=mongo
else
  echo "neither mongosh nor mongo is on PATH: cannot initiate the replica set" >&2
  mongod --dbpath "$dir" --shutdown >/dev/null || true
  exit 1
fi
"$shell" --quiet --port "$port" --eval "$initiate" >/dev/null
for _ in $(seq 1 60); do
  if [ "$("$shell" --quiet --port "$port" --eval "$status" 2>/dev/null | tail -n1)" = "true" ]; then
    uri="mongodb://127.0.0.1:$port/?replicaSet=rs0"
    echo "# stop with: mongod --dbpath '$dir' --shutdown" >&2
    if [ "$export_form" = 1 ]; then echo "export STREAMWARD_TEST_URI='$uri'"; else echo "$uri"; fi
    exit 0
  fi
  sleep 0.5
done
echo "the replica set did not elect a primary within 30 s; see $dir/mongod.log" >&2
exit 1
