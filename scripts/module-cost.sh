#!/usr/bin/env bash
# module-cost.sh: the native commands (redis-module/, SL.*) against the Lua scripts and SET, on
# the fleet-sizing measure: Redis main-thread CPU per operation with its network I/O (INFO cpu
# used_cpu_user_main_thread + used_cpu_sys_main_thread, deltas over one redis-benchmark run,
# divided by the calls of the phase's command), as a ratio to SET in the same run and at the same
# depth. One server with the module loaded runs every phase, so Lua and module meet the same
# keyspace; phases run REPEAT rounds round-robin and the median is reported.
#
#   play-start  acquire from the device that already holds the account's one stream (its record
#               and lease key replaced), and on a new account
#   heartbeat   both paths: the limiter's common renewal, GETEX of the lease key; about one
#               heartbeat in twelve (the account key's life near its end) also renews the account
#               key: Lua with the `touch` script, the module with SL.HEARTBEAT (given a TTL so
#               long that every call takes that branch). SL.HEARTBEAT's early return (lease
#               renewed, account key far from its end) is measured too: what a limiter sending
#               every heartbeat as SL.HEARTBEAT would pay
#   stop        release of a live lease on accounts of one stream, loaded afresh before each run
#               from RELEASE_KEYS accounts (a draw that repeats finds it released: "not held")
#
# Each at 8 clients each waiting for its answer (-P 1) and pipelined (-P PIPE).
#
# APPENDFSYNC=everysec (or always, no) adds a second server with an append-only file
# (`appendonly yes`, `appendfsync APPENDFSYNC`, in the script's temporary directory, as
# spec.redis.persistence: appendOnly runs a shard), filled alike; every phase then runs on both
# servers in turn, and the table gives both costs, each as a ratio to SET on the server without
# the file, and the file's cost as the ratio of the two.
#
# Environment: BENCH_N calls per run [50000], REPEAT rounds [3], BENCH_C clients [8], PIPE [8],
# BENCH_KEYS pre-filled accounts per case [100000], RELEASE_KEYS [4 x BENCH_N], MODULE (path of
# the .so) [target/release/libscreenlimit_redis_module.so: cargo build --release -p
# screenlimit-redis-module]. Starts its own redis-server on a free loopback port, kills it on exit.
#
# Example: REPEAT=3 scripts/module-cost.sh   (about 4 minutes)
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BENCH_N=${BENCH_N:-50000}
REPEAT=${REPEAT:-3}
BENCH_C=${BENCH_C:-8}
PIPE=${PIPE:-8}
BENCH_KEYS=${BENCH_KEYS:-100000}
RELEASE_KEYS=${RELEASE_KEYS:-$((4 * BENCH_N))}
MODULE=${MODULE:-$ROOT/target/release/libscreenlimit_redis_module.so}
TTL_MS=3600000 # longer than the run: no lease expires mid-run
KEEP_MS=$((2 * TTL_MS))

die() { echo "module-cost: $*" >&2; exit 1; }
for tool in redis-server redis-cli redis-benchmark python3; do
  command -v "$tool" >/dev/null || die "$tool not found"
done
[[ -f $MODULE ]] || die "no $MODULE (cargo build --release -p screenlimit-redis-module)"

WORK=$(mktemp -d)
REDIS_PID=
cleanup() {
  # shellcheck disable=SC2086 # one pid per server
  [[ -z $REDIS_PID ]] || { kill $REDIS_PID 2>/dev/null || true; wait $REDIS_PID 2>/dev/null || true; }
  rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
log() { printf '[module-cost %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
declare -A SPORT
SERVERS=(memory)
start_server() { # start_server NAME ARGS...: a server with the module, its port in SPORT[NAME]
  local name=$1 port
  shift
  port=$(free_port)
  mkdir -p "$WORK/$name"
  redis-server --bind 127.0.0.1 --port "$port" --save '' --dir "$WORK/$name" --logfile "$WORK/$name.log" \
    --loadmodule "$MODULE" "$@" &
  REDIS_PID="$REDIS_PID $!"
  for _ in $(seq 50); do
    redis-cli -p "$port" PING 2>/dev/null | grep -q PONG && break
    sleep 0.1
  done
  SPORT[$name]=$port
  [[ $(redis-cli -p "$port" SL.VERSION) == 2 ]] || { cat "$WORK/$name.log" >&2; die "the module did not load or speaks another layout"; }
}
start_server memory --appendonly no
if [[ -n ${APPENDFSYNC:-} ]]; then
  start_server aof --appendonly yes --appendfsync "$APPENDFSYNC"
  SERVERS+=(aof)
fi
PORT=${SPORT[memory]}
rc() { redis-cli -p "$PORT" "$@"; }
rcn() { local db=$1; shift; redis-cli -p "$PORT" -n "$db" "$@"; }

# The scripts as the limiter assembles them (lease_script! in limiter/src/store/redis/scripts.rs).
LUA=$ROOT/limiter/src/store/redis/lua
declare -A SHA
SHA[acquire]=$(cat "$LUA/fast.lua" "$LUA/acquire_fast.lua" "$LUA/common.lua" "$LUA/acquire.lua" | rc -x SCRIPT LOAD)
SHA[release]=$(cat "$LUA/fast.lua" "$LUA/release_fast.lua" "$LUA/common.lua" "$LUA/release.lua" | rc -x SCRIPT LOAD)
SHA[touch]=$(cat "$LUA/fast.lua" "$LUA/touch.lua" | rc -x SCRIPT LOAD)

DEVICE=mobile-7f3a9c2e1b4d
NONCE=bench-nonce-0001
META='Samsung Galaxy S23'
hex() { printf '\\x%02x' "$1"; }
body=$((1 + 1 + ${#META} + 1 + 9 + 1 + 15))
# shellcheck disable=SC2059 # the format is built from \x escapes on purpose
DETAILS=$(printf "$(hex $body)$(hex 1)$(hex ${#META})%s$(hex 9)%s$(hex 15)%s" "$META" profile-1 title:tt0111161)
ACQ=("$TTL_MS" "$KEEP_MS" '' 0 premium 4 "$DEVICE" "$NONCE" "$DETAILS" '' '' '' '')
HB=("$TTL_MS" "$KEEP_MS" premium 4 "$DEVICE" "$NONCE")
# A TTL beyond the account key's life: SL.HEARTBEAT's renewal finds that life within two TTLs
# and renews it, as `touch` does (the lease keys' own life is then long; nothing expires).
HB_TOUCH=("$((100 * TTL_MS))" "$KEEP_MS" premium 4 "$DEVICE" "$NONCE")
REL=("$TTL_MS" "$KEEP_MS" "$DEVICE" "$NONCE")

# Pre-fill: accounts sl:{PREFIX%012d} (redis-benchmark's __rand_int__ form), stream 0 the bench
# device, the others random devices and nonces, written with SL.ACQUIRE (the same layout).
load() { # load DB PREFIX ACCOUNTS STREAMS
  python3 - "$2" "$3" "$4" "$TTL_MS" "$KEEP_MS" "$DETAILS" <<'PY' | rcn "$1" --pipe >"$WORK/pipe.out" 2>&1
import random, sys
prefix, accounts, streams, ttl, keep, details = sys.argv[1:]
rng, out = random.Random(26), sys.stdout.buffer
def bulk(b): return b"$%d\r\n%s\r\n" % (len(b), b)
for a in range(int(accounts)):
    key = b"sl:{%s%012d}" % (prefix.encode(), a)
    for s in range(int(streams)):
        device, nonce = (b"mobile-7f3a9c2e1b4d", b"bench-nonce-0001") if s == 0 else \
            (b"tv-%014x" % rng.getrandbits(56), rng.randbytes(16))
        args = [b"SL.ACQUIRE", key, ttl.encode(), keep.encode(), b"", b"0", b"premium", b"4", device,
                nonce, details.encode("latin-1"), b"", b"", b"", b""]
        out.write(b"*%d\r\n" % len(args) + b"".join(bulk(x) for x in args))
PY
  grep -q 'errors: 0,' "$WORK/pipe.out" || { cat "$WORK/pipe.out" >&2; die "load failed"; }
}
cpu() {
  rc INFO cpu | tr -d '\r' | awk -F: '$1 == "used_cpu_user_main_thread" { u = $2 } $1 == "used_cpu_sys_main_thread" { s = $2 } END { printf "%.6f\n", u + s }'
}

log "load average $(cut -d' ' -f1-3 /proc/loadavg); pre-filling $BENCH_KEYS accounts per case on ${SERVERS[*]}"
VALUE=$(printf 'v%.0s' $(seq 60))
for server in "${SERVERS[@]}"; do
  PORT=${SPORT[$server]}
  for op in acquire release; do # the same scripts on every server (EVALSHA finds them)
    [[ $(cat "$LUA/fast.lua" "$LUA/${op}_fast.lua" "$LUA/common.lua" "$LUA/$op.lua" | rc -x SCRIPT LOAD) == "${SHA[$op]}" ]] \
      || die "$op: another script on $server"
  done
  load 0 acq1- "$BENCH_KEYS" 1
  load 0 hb2- "$BENCH_KEYS" 2
  redis-benchmark -p "$PORT" -n "$BENCH_KEYS" -c "$BENCH_C" -P "$PIPE" -r "$BENCH_KEYS" -q SET 'key:__rand_int__' "$VALUE" >/dev/null
done

declare -A CMD RANGE DB STAT
PHASES=()
phase() { # phase NAME CMDSTAT KEYRANGE DB COMMAND...
  local id=$1
  STAT[$id]=$2 RANGE[$id]=$3 DB[$id]=$4
  shift 4
  CMD[$id]=$(printf '%q ' "$@")
  PHASES+=("$id")
}
phase 'SET, 60-byte value'                set "$BENCH_KEYS" 0 SET 'key:__rand_int__' "$VALUE"
phase 'play-start, re-acquire: Lua'       evalsha "$BENCH_KEYS" 0 EVALSHA "${SHA[acquire]}" 1 'sl:{acq1-__rand_int__}' "${ACQ[@]}"
phase 'play-start, re-acquire: module'    sl.acquire "$BENCH_KEYS" 0 SL.ACQUIRE 'sl:{acq1-__rand_int__}' "${ACQ[@]}"
phase 'play-start, new account: Lua'      evalsha 100000000 0 EVALSHA "${SHA[acquire]}" 1 'sl:{new-__rand_int__}' "${ACQ[@]}"
phase 'play-start, new account: module'   sl.acquire 100000000 0 SL.ACQUIRE 'sl:{mnew-__rand_int__}' "${ACQ[@]}"
phase 'heartbeat, both paths (GETEX)'     getex "$BENCH_KEYS" 0 GETEX "sl:{hb2-__rand_int__}${NONCE:0:8}" PX "$TTL_MS"
phase 'account key renewed, 1 in 12: Lua touch' evalsha "$BENCH_KEYS" 0 EVALSHA "${SHA[touch]}" 2 'sl:{hb2-__rand_int__}' "sl:{hb2-__rand_int__}${NONCE:0:8}" "$KEEP_MS"
phase 'account key renewed, 1 in 12: module SL.HEARTBEAT' sl.heartbeat "$BENCH_KEYS" 0 SL.HEARTBEAT 'sl:{hb2-__rand_int__}' "${HB_TOUCH[@]}"
phase 'SL.HEARTBEAT as every heartbeat (before)' sl.heartbeat "$BENCH_KEYS" 0 SL.HEARTBEAT 'sl:{hb2-__rand_int__}' "${HB[@]}"
phase 'stop: Lua'                         evalsha "$RELEASE_KEYS" 1 EVALSHA "${SHA[release]}" 1 'sl:{rel-__rand_int__}' "${REL[@]}"
phase 'stop: module'                      sl.release "$RELEASE_KEYS" 1 SL.RELEASE 'sl:{rel-__rand_int__}' "${REL[@]}"

printf 'name\tpipe\tcpu_us\tcalls\tserver\n' >"$WORK/runs.tsv"
run_once() { # run_once NAME PIPE SERVER
  local id=$1 pipe=$2 c0 c1 calls
  PORT=${SPORT[$3]}
  local -a cmd
  eval "cmd=(${CMD[$id]})"
  if [[ ${DB[$id]} == 1 ]]; then rcn 1 FLUSHDB >/dev/null; load 1 rel- "$RELEASE_KEYS" 1; fi
  rc CONFIG RESETSTAT >/dev/null
  c0=$(cpu)
  redis-benchmark -p "$PORT" --dbnum "${DB[$id]}" -n "$BENCH_N" -c "$BENCH_C" -P "$pipe" -r "${RANGE[$id]}" \
    -q "${cmd[@]}" >/dev/null 2>&1
  c1=$(cpu)
  calls=$(rc INFO commandstats | tr -d '\r' | grep "^cmdstat_${STAT[$id]}:" | sed -E 's/.*[:,]calls=([0-9]+).*/\1/')
  if [[ -z $calls ]] || ((calls < BENCH_N)); then die "$id: $calls calls of $BENCH_N"; fi
  if rc INFO commandstats | tr -d '\r' | grep "^cmdstat_${STAT[$id]}:" | grep -qv 'failed_calls=0'; then
    die "$id: failed calls"
  fi
  printf '%s\t%s\t%s\t%s\t%s\n' "$id" "$pipe" "$(python3 -c "print(f'{($c1 - $c0) * 1e6 / $calls:.3f}')")" "$calls" "$3" >>"$WORK/runs.tsv"
  log "$(printf '%-36s -P %-2s %-6s %s' "$id" "$pipe" "$3" "$(tail -1 "$WORK/runs.tsv" | cut -f3) us CPU/op")"
}
for ((round = 1; round <= REPEAT; round++)); do
  log "round $round of $REPEAT, load average $(cut -d' ' -f1-3 /proc/loadavg)"
  for pipe in 1 "$PIPE"; do
    for id in "${PHASES[@]}"; do
      for server in "${SERVERS[@]}"; do run_once "$id" "$pipe" "$server"; done
    done
  done
done
# The heartbeat phases renewed and nothing else: every bench lease key still there.
for server in "${SERVERS[@]}"; do
  PORT=${SPORT[$server]}
  [[ $(rc SL.HEARTBEAT 'sl:{hb2-000000000001}' "${HB[@]}" | head -1) == 1 ]] || die "a bench lease was lost on $server"
done
if [[ -n ${APPENDFSYNC:-} ]]; then
  PORT=${SPORT[aof]}
  aof_bytes=$(du -sb "$WORK/aof" | cut -f1)
  log "the append-only file: $aof_bytes bytes at the end, $(rc INFO persistence | tr -d '\r' | grep -E '^aof_rewrites:' | cut -d: -f2) rewrites"
fi

echo
echo "### Module vs Lua vs SET ($(date -u '+%Y-%m-%d %H:%M UTC'), $(redis-server --version | cut -d' ' -f3), $(nproc) CPUs)"
echo
echo "${APPENDFSYNC:+APPENDFSYNC=$APPENDFSYNC }BENCH_N=$BENCH_N REPEAT=$REPEAT BENCH_C=$BENCH_C PIPE=$PIPE BENCH_KEYS=$BENCH_KEYS RELEASE_KEYS=$RELEASE_KEYS scripts/module-cost.sh"
echo "Load average at end $(cut -d' ' -f1-3 /proc/loadavg)."
echo
python3 - "$WORK/runs.tsv" "$PIPE" <<'PY'
import csv, statistics, sys
runs = list(csv.DictReader(open(sys.argv[1]), delimiter="\t"))
pipe = sys.argv[2]
names = list(dict.fromkeys(r["name"] for r in runs))
servers = list(dict.fromkeys(r["server"] for r in runs))
SET = "SET, 60-byte value"
def values(name, p, server="memory"):
    return [float(r["cpu_us"]) for r in runs if r["name"] == name and r["pipe"] == p and r["server"] == server]
def med(name, p, server="memory"): return statistics.median(values(name, p, server))
def spread(name, p, server="memory"):
    v = values(name, p, server)
    return f"{min(v):.2f}–{max(v):.2f}"
if servers == ["memory"]:
    print(f"| operation | µs per op, 8 clients each waiting (range) | × SET | µs per op, -P {pipe} (range) | × SET -P {pipe} |")
    print("|---|---|---:|---|---:|")
    for n in names:
        print(f"| {n} | {med(n, '1'):.2f} ({spread(n, '1')}) | {med(n, '1') / med(SET, '1'):.2f}"
              f" | {med(n, pipe):.2f} ({spread(n, pipe)}) | {med(n, pipe) / med(SET, pipe):.2f} |")
else:
    for p in ["1", pipe]:
        depth = "8 clients each waiting" if p == "1" else f"8 clients, -P {p}"
        print(f"\n{depth}; × SET: against SET on the server without the file, in the same run\n")
        print("| operation | µs per op, no file (range) | × SET | µs per op, append-only file (range) | × SET | file / no file |")
        print("|---|---|---:|---|---:|---:|")
        for n in names:
            base, aof, set_ = med(n, p), med(n, p, "aof"), med(SET, p)
            print(f"| {n} | {base:.2f} ({spread(n, p)}) | {base / set_:.2f} | {aof:.2f} ({spread(n, p, 'aof')})"
                  f" | {aof / set_:.2f} | {aof / base:.2f} |")
PY
