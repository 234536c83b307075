#!/usr/bin/env bash
# store-cost.sh: what screenlimit's Lua scripts cost Redis, measured on a throwaway local server.
#
#   CPU:    server-side usec per call from INFO commandstats (CONFIG RESETSTAT before each phase,
#           so every EVALSHA phase has cmdstat_evalsha to itself), for a plain SET, the acquire
#           script and the heartbeat script, driven by redis-benchmark over loopback.
#   Memory: used_memory before and after loading STREAMS live streams in a household mix, and
#           again with one stream per account (the worst case).
#
# Needs redis-server, redis-cli, redis-benchmark (Debian redis-tools/redis-server 7.0) and python3.
# Never touches any Redis but the one it starts; that one is killed on exit.
#
# Environment (defaults in brackets):
#   STREAMS        live streams for the household-mix memory run              [1000000]
#   WORST_STREAMS  streams for the one-stream-per-account memory run          [STREAMS]
#   BENCH_N        requests per redis-benchmark phase                         [200000]
#   BENCH_C        redis-benchmark connections                                [50]
#   BENCH_KEYS     accounts pre-filled for the acquire/heartbeat phases      [100000]
#   TTL_MS         lease TTL passed to the scripts (revocation is 2 x TTL)    [90000]
#
# Household mix (memory run): account i holds 1 stream if i mod 10 is 0-4 (50% of accounts),
# 2 if 5-7 (30%), 4 if 8-9 (20%): 1.9 streams per account on average.
set -euo pipefail

STREAMS=${STREAMS:-1000000}
WORST_STREAMS=${WORST_STREAMS:-$STREAMS}
BENCH_N=${BENCH_N:-200000}
BENCH_C=${BENCH_C:-50}
BENCH_KEYS=${BENCH_KEYS:-100000}
TTL_MS=${TTL_MS:-90000}
REV_MS=$((2 * TTL_MS))

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
LUA_DIR=$ROOT/limiter/src/store/redis/lua

for tool in redis-server redis-cli redis-benchmark python3; do
  command -v "$tool" >/dev/null || { echo "store-cost: $tool not found" >&2; exit 1; }
done

WORK=$(mktemp -d)
REDIS_PID=
cleanup() {
  if [[ -n $REDIS_PID ]]; then
    kill "$REDIS_PID" 2>/dev/null || true
    wait "$REDIS_PID" 2>/dev/null || true
  fi
  rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

log() { printf '[store-cost %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

# ---------------------------------------------------------------- server
free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()'
}

PORT=
for _ in 1 2 3 4 5; do
  PORT=$(free_port)
  redis-server --bind 127.0.0.1 --port "$PORT" --save '' --appendonly no \
    --protected-mode yes --logfile "$WORK/redis.log" &
  REDIS_PID=$!
  for _ in $(seq 50); do
    if redis-cli -h 127.0.0.1 -p "$PORT" PING 2>/dev/null | grep -q PONG; then break 2; fi
    kill -0 "$REDIS_PID" 2>/dev/null || break
    sleep 0.1
  done
  kill "$REDIS_PID" 2>/dev/null || true
  wait "$REDIS_PID" 2>/dev/null || true
  REDIS_PID=
done
[[ -n $REDIS_PID ]] || { echo "store-cost: could not start redis-server" >&2; cat "$WORK/redis.log" >&2; exit 1; }

rc() { redis-cli -h 127.0.0.1 -p "$PORT" "$@"; }
info_field() { rc INFO "$1" | tr -d '\r' | awk -F: -v k="$2" '$1 == k { print $2 }'; }

log "redis-server $(redis-server --version | sed -E 's/.* v=([^ ]+).*/\1/') on 127.0.0.1:$PORT (pid $REDIS_PID), $(nproc) CPUs"

# ---------------------------------------------------------------- scripts
# Exactly what the service loads: common.lua followed by the operation (see lease_script! in
# limiter/src/store/redis/mod.rs).
declare -A SHA
for op in acquire heartbeat release list; do
  cat "$LUA_DIR/common.lua" "$LUA_DIR/$op.lua" >"$WORK/$op.lua"
  SHA[$op]=$(rc -x SCRIPT LOAD <"$WORK/$op.lua")
  expected=$(sha1sum "$WORK/$op.lua" | cut -d' ' -f1)
  [[ ${SHA[$op]} == "$expected" ]] || { echo "store-cost: SHA mismatch for $op" >&2; exit 1; }
done
# Diagnostic floors: an empty script, and a script making the same Redis calls as a heartbeat
# renewal (TIME, GET, SET ... PXAT) with no decoding or encoding.
SHA[noop]=$(rc SCRIPT LOAD 'return 1')
SHA[floor]=$(rc SCRIPT LOAD "local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local v = redis.call('GET', KEYS[1])
if not v then v = ARGV[1] end
redis.call('SET', KEYS[1], v, 'PXAT', now + tonumber(ARGV[2]))
return 1")
# Counts accounts, live streams and payload bytes under a key pattern, by decoding every value.
SHA[count]=$(rc SCRIPT LOAD "$(cat "$LUA_DIR/common.lua")
local ttl, now = tonumber(ARGV[2]), now_ms()
local keys, streams, bytes, cursor = 0, 0, 0, '0'
repeat
  local page = redis.call('SCAN', cursor, 'MATCH', ARGV[1], 'COUNT', 1000)
  cursor = page[2] and page[1] or '0'
  for _, key in ipairs(page[2]) do
    local _, _, recs = load(key, now, ttl)
    keys, streams = keys + 1, streams + active_count(recs, now)
    bytes = bytes + redis.call('STRLEN', key)
  end
until cursor == '0'
return { keys, streams, bytes }")

# Functional check: grant, renew, release, then the released stream is told it expired.
chk=$(rc EVALSHA "${SHA[acquire]}" 1 'sl:{check}' "$TTL_MS" "$REV_MS" '' 0 premium 4 \
  tv-check-0000001 0123456789abcdef 0 'Living Room TV' profile-1 title:tt0111161 '' '' | head -1)
[[ $chk == 1 ]] || { echo "store-cost: acquire did not grant (got $chk)" >&2; exit 1; }
chk=$(rc EVALSHA "${SHA[heartbeat]}" 1 'sl:{check}' "$TTL_MS" "$REV_MS" premium 4 \
  tv-check-0000001 0123456789abcdef | head -1)
[[ $chk == 1 ]] || { echo "store-cost: heartbeat did not renew (got $chk)" >&2; exit 1; }
chk=$(rc EVALSHA "${SHA[release]}" 1 'sl:{check}' "$TTL_MS" "$REV_MS" tv-check-0000001 0123456789abcdef)
[[ $chk == 1 ]] || { echo "store-cost: release did not release (got $chk)" >&2; exit 1; }
chk=$(rc EVALSHA "${SHA[heartbeat]}" 1 'sl:{check}' "$TTL_MS" "$REV_MS" premium 4 \
  tv-check-0000001 0123456789abcdef | head -1)
[[ $chk == 3 ]] || { echo "store-cost: heartbeat after release should say expired (got $chk)" >&2; exit 1; }
rc DEL 'sl:{check}' >/dev/null

# ---------------------------------------------------------------- loader
# Writes EVALSHA acquire commands in RESP to stdout, for redis-cli --pipe.
#   gen.py mix    PREFIX N   household mix until N streams     keys sl:{PREFIX%08d}
#   gen.py single PREFIX N   N accounts of one stream          keys sl:{PREFIX%08d}
#   gen.py bench  PREFIX A K A accounts of K streams each; stream 0 is the benchmark device
#                            (tv-7f3a9c2e1b4d5a, nonce bench-nonce-0001); keys sl:{PREFIX%012d},
#                            the form redis-benchmark gives __rand_int__.
#   gen.py other  PREFIX A K the same keys, but none of the K streams is the benchmark device.
cat >"$WORK/gen.py" <<'PY'
import os, random, sys

mode, prefix, sha, ttl, rev = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5]
rng = random.Random(20240601)
KINDS = [  # type code, id prefix, hex digits (ids are 17-20 chars), device meta
    (0, "tv-", 14, "Living Room TV"),
    (1, "mobile-", 12, "Samsung Galaxy S23"),
    (2, "tablet-", 12, "iPad Air 5th gen"),
    (3, "web-", 14, "Chrome on Windows"),
    (4, "console-", 12, "PlayStation 5 Pro"),
]
BENCH_DEVICE, BENCH_NONCE = b"tv-7f3a9c2e1b4d5a", b"bench-nonce-0001"
out = sys.stdout.buffer
head = b"*18\r\n$7\r\nEVALSHA\r\n$40\r\n" + sha.encode() + b"\r\n$1\r\n1\r\n"
def bulk(b): return b"$%d\r\n%s\r\n" % (len(b), b)
tail_timing = bulk(ttl.encode()) + bulk(rev.encode()) + bulk(b"") + bulk(b"0") + bulk(b"premium") + bulk(b"4")
tail_replace = bulk(b"") + bulk(b"")
buf = []
def stream(key, a, s, device=None, nonce=None):
    code, pfx, digits, meta = KINDS[(a + s) % 5]
    if device is None:
        device = b"%s%0*x" % (pfx.encode(), digits, rng.getrandbits(4 * digits))
    if nonce is None:
        nonce = rng.randbytes(16)
    title = b"title:tt%07d" % rng.randrange(10_000_000)
    buf.append(head + bulk(key) + tail_timing + bulk(device) + bulk(nonce) + bulk(b"%d" % code)
               + bulk(meta.encode()) + bulk(b"profile-%d" % (s + 1)) + bulk(title) + tail_replace)
    if len(buf) >= 10000:
        out.write(b"".join(buf)); buf.clear()

pre = prefix.encode()
if mode == "mix":
    n, a, left = int(sys.argv[6]), 0, int(sys.argv[6])
    while left > 0:
        k = min(left, (1, 1, 1, 1, 1, 2, 2, 2, 4, 4)[a % 10])
        key = b"sl:{%s%08d}" % (pre, a)
        for s in range(k):
            stream(key, a, s)
        left -= k; a += 1
elif mode == "single":
    for a in range(int(sys.argv[6])):
        stream(b"sl:{%s%08d}" % (pre, a), a, 0)
elif mode in ("bench", "other"):
    accounts, k = int(sys.argv[6]), int(sys.argv[7])
    for a in range(accounts):
        key = b"sl:{%s%012d}" % (pre, a)
        for s in range(k):
            if s == 0 and mode == "bench":
                stream(key, 0, 0, BENCH_DEVICE, BENCH_NONCE)
            else:
                stream(key, a, s)
out.write(b"".join(buf))
PY

load() { # load MODE PREFIX ARGS... : pipes generated acquires into the server, checks for errors
  python3 "$WORK/gen.py" "$1" "$2" "${SHA[acquire]}" "$TTL_MS" "$REV_MS" "${@:3}" \
    | rc --pipe >"$WORK/pipe.out" 2>&1
  grep -q 'errors: 0,' "$WORK/pipe.out" || { echo "store-cost: load failed:" >&2; cat "$WORK/pipe.out" >&2; exit 1; }
}
count() { # count PATTERN -> "accounts streams payload_bytes"
  rc EVALSHA "${SHA[count]}" 0 "$1" "$TTL_MS" | tr '\n' ' '
}

# ---------------------------------------------------------------- CPU
# Acquire/heartbeat use the benchmark device, and plan '' with default premium/4 like a request
# that names no plan. __rand_int__ is replaced per occurrence by redis-benchmark.
ACQ_TAIL=("$TTL_MS" "$REV_MS" '' 0 premium 4 tv-7f3a9c2e1b4d5a bench-nonce-0001 0
  'Living Room TV' profile-1 title:tt0111161 '' '')
HB_TAIL=("$TTL_MS" "$REV_MS" premium 4 tv-7f3a9c2e1b4d5a bench-nonce-0001)
VALUE=$(printf 'v%.0s' $(seq 60))

declare -A USEC CALLS RPS FAILED
PHASES=()
phase() { # phase NAME CMDSTAT KEYRANGE COMMAND...
  local name=$1 stat=$2 range=$3
  shift 3
  rc CONFIG RESETSTAT >/dev/null
  local csv
  csv=$(redis-benchmark -h 127.0.0.1 -p "$PORT" -n "$BENCH_N" -c "$BENCH_C" -P 1 -r "$range" --csv "$@" 2>/dev/null)
  RPS[$name]=$(printf '%s\n' "$csv" | tail -1 | cut -d, -f2 | tr -d '"')
  local line
  line=$(rc INFO commandstats | tr -d '\r' | grep "^cmdstat_$stat:")
  USEC[$name]=$(sed -E 's/.*usec_per_call=([0-9.]+).*/\1/' <<<"$line")
  CALLS[$name]=$(sed -E 's/.*[:,]calls=([0-9]+).*/\1/' <<<"$line")
  FAILED[$name]=$(sed -E 's/.*failed_calls=([0-9]+).*/\1/' <<<"$line")
  PHASES+=("$name")
  log "$(printf '%-34s %8s usec/call  %7s calls  %6s failed  %9s req/s' \
    "$name" "${USEC[$name]}" "${CALLS[$name]}" "${FAILED[$name]}" "${RPS[$name]}")"
}

log "CPU phases: -n $BENCH_N -c $BENCH_C -P 1, accounts pre-filled: $BENCH_KEYS"
load bench acq1- "$BENCH_KEYS" 1          # accounts holding the benchmark device only
load bench hb2- "$BENCH_KEYS" 2           # benchmark device + 1 other
load bench hb4- "$BENCH_KEYS" 4           # benchmark device + 3 others (a full premium account)
load other acqo- "$BENCH_KEYS" 1          # accounts holding one other device (not the bench one)
for p in acq1- hb2- hb4- acqo-; do
  read -r _ s _ <<<"$(count "sl:{$p*")"
  log "pre-filled sl:{$p*}: $s streams"
done

phase 'SET (60-byte value)'              set     1000000   SET 'key:__rand_int__' "$VALUE"
phase 'evalsha return 1 (floor)'         evalsha 1000000   EVALSHA "${SHA[noop]}" 0
phase 'evalsha TIME+GET+SET (floor)'     evalsha "$BENCH_KEYS" EVALSHA "${SHA[floor]}" 1 'sl:{hb2-__rand_int__}' "$VALUE" "$REV_MS"
# Acquire on a fresh account: GET misses, one record written. Keys drawn from 10^8, so repeats
# are rare (~0.1%); all are grants.
phase 'acquire, new account'             evalsha 100000000 EVALSHA "${SHA[acquire]}" 1 'sl:{new-__rand_int__}' "${ACQ_TAIL[@]}"
# Acquire from a device already holding the account's only stream (re-acquire: own record dropped
# and rewritten): one record read, one written. Grant.
phase 'acquire, re-acquire (1 stream)'   evalsha "$BENCH_KEYS" EVALSHA "${SHA[acquire]}" 1 'sl:{acq1-__rand_int__}' "${ACQ_TAIL[@]}"
# Acquire a second stream (the account holds one other device; the first hit appends, later hits
# replace the bench device's own record): 1-2 records read, 2 written. Grant.
phase 'acquire, 2nd stream'              evalsha "$BENCH_KEYS" EVALSHA "${SHA[acquire]}" 1 'sl:{acqo-__rand_int__}' "${ACQ_TAIL[@]}"
# Heartbeat renewals: every key was pre-filled with the benchmark device, so every call renews.
phase 'heartbeat renew, 2-stream acct'   evalsha "$BENCH_KEYS" EVALSHA "${SHA[heartbeat]}" 1 'sl:{hb2-__rand_int__}' "${HB_TAIL[@]}"
phase 'heartbeat renew, 4-stream acct'   evalsha "$BENCH_KEYS" EVALSHA "${SHA[heartbeat]}" 1 'sl:{hb4-__rand_int__}' "${HB_TAIL[@]}"

# Post-checks: the heartbeat phases only renewed (stream counts unchanged), acquires granted.
read -r _ hb2 _ <<<"$(count 'sl:{hb2-*')"
read -r _ hb4 _ <<<"$(count 'sl:{hb4-*')"
read -r acqo_keys acqo_streams _ <<<"$(count 'sl:{acqo-*')"
read -r new_keys new_streams _ <<<"$(count 'sl:{new-*')"
log "after: hb2 $hb2 streams (expect $((2 * BENCH_KEYS))), hb4 $hb4 (expect $((4 * BENCH_KEYS))),"\
" acqo $acqo_streams streams on $acqo_keys accounts, new $new_streams streams on $new_keys accounts"
[[ $hb2 == $((2 * BENCH_KEYS)) && $hb4 == $((4 * BENCH_KEYS)) ]] \
  || log "WARNING: heartbeat phases changed stream counts; some calls were not renewals"
[[ $acqo_keys == "$BENCH_KEYS" ]] || log "WARNING: the 2nd-stream phase did not hit the pre-filled accounts"
# One more call of each benchmarked command, to see its reply: 1 = granted / renewed.
for probe in "acquire sl:{acq1-000000000001}" "acquire sl:{acqo-000000000001}" \
  "heartbeat sl:{hb2-000000000001}" "heartbeat sl:{hb4-000000000001}"; do
  read -r op key <<<"$probe"
  if [[ $op == acquire ]]; then tail_args=("${ACQ_TAIL[@]}"); else tail_args=("${HB_TAIL[@]}"); fi
  reply=$(rc EVALSHA "${SHA[$op]}" 1 "$key" "${tail_args[@]}" | head -1)
  [[ $reply == 1 ]] || log "WARNING: $op on $key replied $reply, not 1"
done

# ---------------------------------------------------------------- memory
mem_run() { # mem_run MODE N -> sets MEM_* globals
  rc FLUSHALL >/dev/null
  sleep 0.2
  local before after t0 t1
  before=$(info_field memory used_memory)
  t0=$(date +%s.%N)
  load "$1" acct- "$2"
  t1=$(date +%s.%N)
  sleep 0.2
  after=$(info_field memory used_memory)
  read -r MEM_KEYS MEM_STREAMS MEM_PAYLOAD <<<"$(count 'sl:{acct-*')"
  MEM_DELTA=$((after - before))
  MEM_SECS=$(python3 -c "print(f'{$t1 - $t0:.1f}')")
  MEM_PER=$(python3 -c "print(f'{$MEM_DELTA / $MEM_STREAMS:.1f}')")
  MEM_PAYLOAD_PER=$(python3 -c "print(f'{$MEM_PAYLOAD / $MEM_STREAMS:.1f}')")
  MEM_PER_KEY_OVERHEAD=$(python3 -c "print(f'{($MEM_DELTA - $MEM_PAYLOAD) / $MEM_KEYS:.1f}')")
  MEM_SAMPLE=$(rc MEMORY USAGE 'sl:{acct-00000000}' SAMPLES 0)
  log "$1: $MEM_STREAMS streams on $MEM_KEYS accounts loaded in ${MEM_SECS}s;"\
" used_memory $before -> $after (+$MEM_DELTA) = $MEM_PER B/stream;"\
" value bytes $MEM_PAYLOAD_PER/stream; other $MEM_PER_KEY_OVERHEAD B/account"
}

log "memory: household mix, $STREAMS streams"
mem_run mix "$STREAMS"
MIX=("$MEM_STREAMS" "$MEM_KEYS" "$MEM_DELTA" "$MEM_PER" "$MEM_PAYLOAD_PER" "$MEM_PER_KEY_OVERHEAD" "$MEM_SECS")
[[ $MEM_STREAMS == "$STREAMS" ]] || log "WARNING: expected $STREAMS live streams, counted $MEM_STREAMS"
log "memory: one stream per account, $WORST_STREAMS streams"
mem_run single "$WORST_STREAMS"
ONE=("$MEM_STREAMS" "$MEM_KEYS" "$MEM_DELTA" "$MEM_PER" "$MEM_PAYLOAD_PER" "$MEM_PER_KEY_OVERHEAD" "$MEM_SECS")
[[ $MEM_STREAMS == "$WORST_STREAMS" ]] || log "WARNING: expected $WORST_STREAMS live streams, counted $MEM_STREAMS"
rc FLUSHALL >/dev/null

# ---------------------------------------------------------------- summary
SET_USEC=${USEC['SET (60-byte value)']}
echo
echo "### Store cost per operation ($(date -u +%Y-%m-%d), redis $(redis-server --version | sed -E 's/.* v=([^ ]+).*/\1/'), $(nproc) CPUs)"
echo
echo "redis-benchmark -n $BENCH_N -c $BENCH_C -P 1 over loopback; usec/call is server-side (INFO commandstats); TTL ${TTL_MS} ms."
echo
echo "| operation | usec/call | x SET | calls | failed | redis-benchmark req/s |"
echo "|---|---:|---:|---:|---:|---:|"
for name in "${PHASES[@]}"; do
  ratio=$(python3 -c "print(f'{${USEC[$name]} / $SET_USEC:.1f}')")
  echo "| $name | ${USEC[$name]} | ${ratio} | ${CALLS[$name]} | ${FAILED[$name]} | ${RPS[$name]} |"
done
echo
echo "| memory run | live streams (counted) | accounts | used_memory delta | bytes/stream | value bytes/stream | other bytes/account | load time |"
echo "|---|---:|---:|---:|---:|---:|---:|---:|"
echo "| household mix 50% x1, 30% x2, 20% x4 | ${MIX[0]} | ${MIX[1]} | ${MIX[2]} | ${MIX[3]} | ${MIX[4]} | ${MIX[5]} | ${MIX[6]} s |"
echo "| one stream per account | ${ONE[0]} | ${ONE[1]} | ${ONE[2]} | ${ONE[3]} | ${ONE[4]} | ${ONE[5]} | ${ONE[6]} s |"
