#!/usr/bin/env bash
# store-cost.sh: what screenlimit's Lua scripts cost Redis, measured on a throwaway local server.
#
#   CPU:    server-side usec per call from INFO commandstats (CONFIG RESETSTAT before each run,
#           so every EVALSHA run has cmdstat_evalsha to itself), for a plain SET, the acquire
#           script and the heartbeat script, driven by redis-benchmark over loopback; every
#           phase is run REPEAT times round-robin and the median is reported with the range.
#   Memory: used_memory before and after loading STREAMS live streams in a household mix, and
#           again with one stream per account (the worst case).
#
# Needs redis-server, redis-cli, redis-benchmark (Debian redis-tools/redis-server 7.0) and python3.
# Never touches any Redis but the one it starts; that one is killed on exit.
#
# Environment (defaults in brackets):
#   STREAMS        live streams for the household-mix memory run              [1000000]
#   WORST_STREAMS  streams for the one-stream-per-account memory run          [STREAMS]
#   BENCH_N        requests per redis-benchmark run                           [100000]
#   REPEAT         runs of every CPU phase (round-robin); the median is shown [3]
#   BENCH_C        redis-benchmark connections                                [50]
#   BENCH_KEYS     accounts pre-filled for the acquire/heartbeat phases      [100000]
#   TTL_MS         lease TTL passed to the scripts (ARGV[2] is 2 x TTL)       [90000]
#   LUA_REF        git revision to take the Lua scripts from; unset = the working tree
#
# Example: LUA_REF=HEAD STREAMS=200000 scripts/store-cost.sh   (about 2-3 minutes at the defaults)
#
# The scripts have changed shape over time; the layout is read off acquire.lua:
#   fields:  ARGV[9..12] = type, meta, profile, title; 14 ARGV (up to 6e7c7e0)
#   details: ARGV[9] = details bytes as limiter/src/store/redis/record.rs builds them; 11 ARGV,
#            plus ARGV[12] = per-device-type caps when acquire.lua reads it (from cf75b30)
# Heartbeat and release ARGV are the same in all. An unknown layout stops the script.
#
# Household mix (memory run): account i holds 1 stream if i mod 10 is 0-4 (50% of accounts),
# 2 if 5-7 (30%), 4 if 8-9 (20%): 1.9 streams per account on average.
set -euo pipefail

STREAMS=${STREAMS:-1000000}
WORST_STREAMS=${WORST_STREAMS:-$STREAMS}
BENCH_N=${BENCH_N:-100000}
REPEAT=${REPEAT:-3}
BENCH_C=${BENCH_C:-50}
BENCH_KEYS=${BENCH_KEYS:-100000}
TTL_MS=${TTL_MS:-90000}
REV_MS=$((2 * TTL_MS))

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
LUA_DIR=$ROOT/limiter/src/store/redis/lua

for tool in redis-server redis-cli redis-benchmark python3 sha1sum; do
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
    --protected-mode yes --enable-debug-command local --logfile "$WORK/redis.log" &
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

# Other work on the machine inflates usec/call (a command preempted mid-way is timed as slow).
LOAD_START=$(cut -d' ' -f1-3 /proc/loadavg)
log "load average at start: $LOAD_START (the CPU figures mean something only on an idle machine)"
log "redis-server $(redis-server --version | sed -E 's/.* v=([^ ]+).*/\1/') on 127.0.0.1:$PORT (pid $REDIS_PID), $(nproc) CPUs"

# ---------------------------------------------------------------- scripts
# Exactly what the service loads: the operation's fast path if it has one, common.lua, then the
# operation (see lease_script! in limiter/src/store/redis/mod.rs).
lua_src() { # lua_src NAME: one Lua file, from the working tree or from LUA_REF
  if [[ -n ${LUA_REF:-} ]]; then
    git -C "$ROOT" show "$LUA_REF:limiter/src/store/redis/lua/$1.lua"
  else
    cat "$LUA_DIR/$1.lua"
  fi
}
# `git show` and `cat` give the same bytes, so a script's SHA is the one the service loads.
lua_src common >"$WORK/common.lua"
# The fast paths' shared helpers (fast.lua) come first wherever a fast path does; older trees
# have no fast.lua.
lua_src fast >"$WORK/helpers.lua" 2>/dev/null || : >"$WORK/helpers.lua"
for op in acquire heartbeat release list; do
  lua_src "$op" >"$WORK/$op.src"
  if lua_src "${op}_fast" >"$WORK/$op.fast" 2>/dev/null; then
    cat "$WORK/helpers.lua" "$WORK/$op.fast" >"$WORK/$op.fast.full"
    mv "$WORK/$op.fast.full" "$WORK/$op.fast"
  else
    : >"$WORK/$op.fast"
  fi
done
CAPS=0
if grep -q 'ARGV\[14\]' "$WORK/acquire.src"; then
  LAYOUT=fields
elif grep -q 'ARGV\[11\]' "$WORK/acquire.src" && grep -q 'details' "$WORK/acquire.src" \
  && ! grep -q 'ARGV\[1[3-9]\]' "$WORK/acquire.src"; then
  LAYOUT=details
  if grep -q 'ARGV\[12\]' "$WORK/acquire.src"; then CAPS=1; fi
else
  echo "store-cost: acquire.lua has an ARGV layout this script does not know" >&2
  exit 1
fi
if [[ -n ${LUA_REF:-} ]]; then
  LUA_FROM="git $(git -C "$ROOT" rev-parse --short "$LUA_REF")"
else
  LUA_FROM="working tree at $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo '?')"
  if ! git -C "$ROOT" diff --quiet HEAD -- limiter/src/store/redis/lua 2>/dev/null; then
    LUA_FROM="$LUA_FROM + uncommitted Lua changes"
  fi
fi
LAYOUT_NAME=$LAYOUT
((CAPS)) && LAYOUT_NAME="$LAYOUT + caps"
log "Lua scripts from $LUA_FROM; acquire layout: $LAYOUT_NAME"

declare -A SHA
for op in acquire heartbeat release list; do
  cat "$WORK/$op.fast" "$WORK/common.lua" "$WORK/$op.src" >"$WORK/$op.lua"
  SHA[$op]=$(rc -x SCRIPT LOAD <"$WORK/$op.lua")
  expected=$(sha1sum "$WORK/$op.lua" | cut -d' ' -f1)
  [[ ${SHA[$op]} == "$expected" ]] || { echo "store-cost: SHA mismatch for $op" >&2; exit 1; }
done
# The batch renewal the limiter sends for heartbeats: fast.lua + renew.lua (no prelude); older
# trees lack it.
if lua_src renew >"$WORK/renew.src" 2>/dev/null; then
  cat "$WORK/helpers.lua" "$WORK/renew.src" >"$WORK/renew.lua"
  SHA[renew]=$(rc -x SCRIPT LOAD <"$WORK/renew.lua")
fi
# Diagnostic floors: an empty script, and a script making the same Redis calls as a heartbeat
# renewal (TIME, GET, SET ... PX) with no decoding or encoding.
SHA[noop]=$(rc SCRIPT LOAD 'return 1')
SHA[floor]=$(rc SCRIPT LOAD "local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
local v = redis.call('GET', KEYS[1]) or ARGV[1]
redis.call('SET', KEYS[1], v, 'PX', ARGV[2])
return now > 0 and 1 or 0")
# Counts accounts, live streams and value bytes under a key pattern by decoding every value with
# its own reader of the byte layout documented at the top of common.lua (so it does not depend on
# the prelude's helpers). Header: B version, B limit, B plan length, plan, and from version 2
# B override limit, I6 override end. ARGV: pattern, layout.
SHA[count]=$(rc SCRIPT LOAD "local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
local fields, byte = ARGV[2] == 'fields', string.byte
local function u48(s, i)
  local a, b, c, d, e, f = byte(s, i, i + 5)
  return ((((a * 256 + b) * 256 + c) * 256 + d) * 256 + e) * 256 + f
end
local keys, streams, bytes, cursor = 0, 0, 0, '0'
repeat
  local page = redis.call('SCAN', cursor, 'MATCH', ARGV[1], 'COUNT', 1000)
  cursor = page[1]
  for _, key in ipairs(page[2]) do
    local v = redis.call('GET', key)
    if v then
      keys, bytes = keys + 1, bytes + #v
      local p, n = 4 + byte(v, 3), #v
      if byte(v, 1) >= 2 then p = p + 7 end -- version 2: B override limit, I6 override end
      while p <= n do
        local state, ends, q
        if fields then -- B state, B type, c16 nonce, I6 ends, I6 started, 4 x (B len, bytes)
          state, ends, q = byte(v, p), u48(v, p + 18), p + 30
          for _ = 1, 4 do q = q + 1 + byte(v, q) end
        else -- B state, I6 ends, I6 started, 16 nonce, B len, device, B len, details
          state, ends, q = byte(v, p), u48(v, p + 1), p + 30 + byte(v, p + 29)
          q = q + 1 + byte(v, q)
        end
        if state == 0 and ends > now then streams = streams + 1 end
        p = q
      end
    end
  end
until cursor == '0'
return { keys, streams, bytes }")

# The benchmark device: a phone, as a request naming no plan (plan '' with default premium/4).
BENCH_DEVICE=mobile-7f3a9c2e1b4d
BENCH_NONCE=bench-nonce-0001
BENCH_META='Samsung Galaxy S23'
if [[ $LAYOUT == fields ]]; then
  DEVICE_ARGS=(1 "$BENCH_META" profile-1 title:tt0111161)
else
  # record.rs encode_details: B body length, B type, then B length + bytes of meta, profile,
  # title. No byte is 0 here (type 1), so it can travel as a command-line argument.
  hex() { printf '\\x%02x' "$1"; }
  body=$((1 + 1 + ${#BENCH_META} + 1 + 9 + 1 + 15))
  DEVICE_ARGS=("$(printf "$(hex $body)$(hex 1)$(hex ${#BENCH_META})%s$(hex 9)%s$(hex 15)%s" \
    "$BENCH_META" profile-1 title:tt0111161)")
fi
# Device caps: the service sends six 0 bytes (no cap). A NUL cannot be a command-line argument,
# so redis-benchmark gets '' instead, which the script reads the same way (byte() of nothing
# -> 0 = no cap); the pipelined loader sends the six 0 bytes.
CAPS_ARGS=()
((CAPS)) && CAPS_ARGS=('')
acq_args() { # acq_args DEVICE NONCE: the ARGV of an acquire without a take-over
  ACQ=("$TTL_MS" "$REV_MS" '' 0 premium 4 "$1" "$2" "${DEVICE_ARGS[@]}" '' '' "${CAPS_ARGS[@]}")
}
acq_args "$BENCH_DEVICE" "$BENCH_NONCE"
ACQ_TAIL=("${ACQ[@]}")
HB_TAIL=("$TTL_MS" "$REV_MS" premium 4 "$BENCH_DEVICE" "$BENCH_NONCE")

# Functional check: grant, renew, release, then the released stream is told it expired.
acq_args tv-check-0000001 0123456789abcdef
chk=$(rc EVALSHA "${SHA[acquire]}" 1 'sl:{check}' "${ACQ[@]}" | head -1)
[[ $chk == 1 ]] || { echo "store-cost: acquire did not grant (got $chk)" >&2; exit 1; }
chk=$(rc EVALSHA "${SHA[heartbeat]}" 1 'sl:{check}' "$TTL_MS" "$REV_MS" premium 4 \
  tv-check-0000001 0123456789abcdef | head -1)
[[ $chk == 1 ]] || { echo "store-cost: heartbeat did not renew (got $chk)" >&2; exit 1; }
if [[ -n ${SHA[renew]:-} ]]; then
  chk=$(rc EVALSHA "${SHA[renew]}" 1 'sl:{check}' "$TTL_MS" "$REV_MS" tv-check-0000001 0123456789abcdef)
  ((chk > 0)) || { echo "store-cost: renew did not renew (got $chk)" >&2; exit 1; }
fi
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
#                            (mobile-7f3a9c2e1b4d, nonce bench-nonce-0001); keys sl:{PREFIX%012d},
#                            the form redis-benchmark gives __rand_int__.
#   gen.py other  PREFIX A K the same keys, but none of the K streams is the benchmark device.
cat >"$WORK/gen.py" <<'PY'
import random, sys

layout, caps, mode, prefix, sha, ttl, rev = sys.argv[1:8]
args = sys.argv[8:]
rng = random.Random(20240601)
KINDS = [  # type code, id prefix, hex digits (ids are 17-20 chars), device meta
    (0, "tv-", 14, "Living Room TV"),
    (1, "mobile-", 12, "Samsung Galaxy S23"),
    (2, "tablet-", 12, "iPad Air 5th gen"),
    (3, "web-", 14, "Chrome on Windows"),
    (4, "console-", 12, "PlayStation 5 Pro"),
]
BENCH_DEVICE, BENCH_NONCE = b"mobile-7f3a9c2e1b4d", b"bench-nonce-0001"
out = sys.stdout.buffer
elements = 4 + (14 if layout == "fields" else 11) + int(caps)
head = b"*%d\r\n$7\r\nEVALSHA\r\n$40\r\n%s\r\n$1\r\n1\r\n" % (elements, sha.encode())
def bulk(b): return b"$%d\r\n%s\r\n" % (len(b), b)
tail_timing = bulk(ttl.encode()) + bulk(rev.encode()) + bulk(b"") + bulk(b"0") + bulk(b"premium") + bulk(b"4")
tail_replace = bulk(b"") + bulk(b"") + (bulk(b"\0" * 6) if caps == "1" else b"")
buf = []
def stream(key, a, s, device=None, nonce=None):
    code, pfx, digits, meta = KINDS[(a + s) % 5]
    if device is None:
        device = b"%s%0*x" % (pfx.encode(), digits, rng.getrandbits(4 * digits))
    if nonce is None:
        nonce = rng.randbytes(16)
    title = b"title:tt%07d" % rng.randrange(10_000_000)
    profile, meta = b"profile-%d" % (s + 1), meta.encode()
    if layout == "fields":
        dev = bulk(b"%d" % code) + bulk(meta) + bulk(profile) + bulk(title)
    else:  # record.rs encode_details
        body = bytes([code, len(meta)]) + meta + bytes([len(profile)]) + profile + bytes([len(title)]) + title
        dev = bulk(bytes([len(body)]) + body)
    buf.append(head + bulk(key) + tail_timing + bulk(device) + bulk(nonce) + dev + tail_replace)
    if len(buf) >= 10000:
        out.write(b"".join(buf)); buf.clear()

pre = prefix.encode()
if mode == "mix":
    a, left = 0, int(args[0])
    while left > 0:
        k = min(left, (1, 1, 1, 1, 1, 2, 2, 2, 4, 4)[a % 10])
        key = b"sl:{%s%08d}" % (pre, a)
        for s in range(k):
            stream(key, a, s)
        left -= k; a += 1
elif mode == "single":
    for a in range(int(args[0])):
        stream(b"sl:{%s%08d}" % (pre, a), a, 0)
elif mode in ("bench", "other"):
    accounts, k = int(args[0]), int(args[1])
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
  python3 "$WORK/gen.py" "$LAYOUT" "$CAPS" "$1" "$2" "${SHA[acquire]}" "$TTL_MS" "$REV_MS" "${@:3}" \
    | rc --pipe >"$WORK/pipe.out" 2>&1
  grep -q 'errors: 0,' "$WORK/pipe.out" || { echo "store-cost: load failed:" >&2; cat "$WORK/pipe.out" >&2; exit 1; }
}
count() { # count PATTERN -> "accounts streams value_bytes"
  local out
  out=$(rc EVALSHA "${SHA[count]}" 0 "$1" "$LAYOUT" | tr '\n' ' ')
  [[ $out =~ ^[0-9]+\ [0-9]+\ [0-9]+\ $ ]] || { echo "store-cost: count failed: $out" >&2; exit 1; }
  echo "$out"
}
listed() { # listed KEY... -> live streams per key as the list script (the service's read) reports
  # them, one digit per key. Only the reply's array header is read: records may hold any byte.
  python3 - "$PORT" "${SHA[list]}" "$TTL_MS" "$LAYOUT" "$@" <<'PY'
import socket, sys
port, sha, ttl, layout, *keys = sys.argv[1:]
def length(key):
    with socket.create_connection(("127.0.0.1", int(port))) as conn:
        args = [b"EVALSHA", sha.encode(), b"1", key.encode(), ttl.encode(), b"premium", b"4"]
        conn.sendall(b"*%d\r\n" % len(args) + b"".join(b"$%d\r\n%s\r\n" % (len(a), a) for a in args))
        head = conn.makefile("rb").readline()  # the rest of the reply is left unread
    assert head.startswith(b"*"), head
    return int(head[1:])
# The reply is some account fields, then per live lease 8 fields (fields layout) or one raw
# record; an account that does not exist gives the account fields alone.
fixed = length("sl:{store-cost-no-such-account}")
per = 8 if layout == "fields" else 1
print("".join(str((length(key) - fixed) // per) for key in keys))
PY
}

# Waits for incremental rehashing of the main and expires dicts to finish. Redis does it 1 ms
# per cron tick (and a step per dict access), so hz is raised meanwhile. Up to 60 s.
settle() {
  local waited=0 stats
  rc CONFIG SET hz 500 >/dev/null
  while stats=$(rc DEBUG HTSTATS 0) && grep -q 'rehashing target' <<<"$stats"; do
    if ((waited >= 600)); then log "WARNING: still rehashing after 60 s"; break; fi
    sleep 0.1
    waited=$((waited + 1))
  done
  rc CONFIG SET hz 10 >/dev/null
  ((waited == 0)) || log "waited $((waited / 10)).$((waited % 10)) s for a rehash to finish"
}

# ---------------------------------------------------------------- CPU
# Acquire/heartbeat use the benchmark device (ACQ_TAIL, HB_TAIL above). __rand_int__ is replaced
# per occurrence by redis-benchmark.
VALUE=$(printf 'v%.0s' $(seq 60))

# Phases are registered first, then run REPEAT rounds round-robin (so a burst of other load on the
# machine spreads over all of them); each run is alone between CONFIG RESETSTAT and INFO.
declare -A USEC CALLS RPS FAILED STAT RANGE CMD PER
PHASES=()
phase() { # phase NAME CMDSTAT KEYRANGE COMMAND...; PER_CALL=n: each call does n operations
  local name=$1
  STAT[$name]=$2 RANGE[$name]=$3 PER[$name]=${PER_CALL:-1}
  shift 3
  CMD[$name]=$(printf '%q ' "$@") # args may hold any byte but NUL; %q round-trips them
  PHASES+=("$name")
}
run_once() { # run_once NAME: one redis-benchmark run, appends to USEC/RPS/CALLS/FAILED
  local name=$1 csv line
  local -a cmd
  eval "cmd=(${CMD[$name]})"
  settle # a rehash left running by an earlier phase would charge its steps to this one
  rc CONFIG RESETSTAT >/dev/null
  csv=$(redis-benchmark -h 127.0.0.1 -p "$PORT" -n "$BENCH_N" -c "$BENCH_C" -P 1 -r "${RANGE[$name]}" --csv "${cmd[@]}" 2>/dev/null)
  line=$(rc INFO commandstats | tr -d '\r' | grep "^cmdstat_${STAT[$name]}:") \
    || { echo "store-cost: no cmdstat_${STAT[$name]} after $name" >&2; exit 1; }
  local usec calls failed rps
  usec=$(sed -E 's/.*usec_per_call=([0-9.]+).*/\1/' <<<"$line")
  calls=$(sed -E 's/.*[:,]calls=([0-9]+).*/\1/' <<<"$line")
  failed=$(sed -E 's/.*failed_calls=([0-9]+).*/\1/' <<<"$line")
  rps=$(printf '%s\n' "$csv" | tail -1 | cut -d, -f2 | tr -d '"')
  USEC[$name]+="$usec " RPS[$name]+="$rps " CALLS[$name]+="$calls " FAILED[$name]+="$failed "
  log "$(printf '%-34s %8s usec/call  %7s calls  %6s failed  %9s req/s' "$name" "$usec" "$calls" "$failed" "$rps")"
}
median() { python3 -c 'import statistics, sys; print(f"{statistics.median(map(float, sys.argv[1:])):.2f}")' $1; }
spread() { python3 -c 'import sys; v = sorted(map(float, sys.argv[1:])); print(f"{v[0]:.2f}-{v[-1]:.2f}")' $1; }
total() { python3 -c 'import sys; print(sum(map(int, sys.argv[1:])))' $1; }

log "CPU phases: $REPEAT rounds of -n $BENCH_N -c $BENCH_C -P 1, accounts pre-filled: $BENCH_KEYS"
load bench acq1- "$BENCH_KEYS" 1          # accounts holding the benchmark device only
load bench hb2- "$BENCH_KEYS" 2           # benchmark device + 1 other
load bench hb4- "$BENCH_KEYS" 4           # benchmark device + 3 others (a full premium account)
load other acqo- "$BENCH_KEYS" 1          # accounts holding one other device (not the bench one)
for p in acq1- hb2- hb4- acqo-; do
  read -r _ s _ <<<"$(count "sl:{$p*")"
  log "pre-filled sl:{$p*}: $s streams"
done

# SET baseline over BENCH_KEYS keys, after an untimed pass that creates them, so the timed pass is
# mostly overwrites (like the scripts' own SETs) and no hash-table growth lands on it.
redis-benchmark -h 127.0.0.1 -p "$PORT" -n "$BENCH_N" -c "$BENCH_C" -P 1 -r "$BENCH_KEYS" -q \
  SET 'key:__rand_int__' "$VALUE" >/dev/null 2>&1
phase 'SET (60-byte value)'              set     "$BENCH_KEYS" SET 'key:__rand_int__' "$VALUE"
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
phase 'full heartbeat script, 2-stream acct' evalsha "$BENCH_KEYS" EVALSHA "${SHA[heartbeat]}" 1 'sl:{hb2-__rand_int__}' "${HB_TAIL[@]}"
phase 'full heartbeat script, 4-stream acct' evalsha "$BENCH_KEYS" EVALSHA "${SHA[heartbeat]}" 1 'sl:{hb4-__rand_int__}' "${HB_TAIL[@]}"
# What the limiter sends for heartbeats: renew, one stream per call when the shard is quiet, and
# when heartbeats arrive together a batch of them (here 8, each on a random account).
if [[ -n ${SHA[renew]:-} ]]; then
  renew_batch() { # renew_batch PREFIX N: EVALSHA renew with N random accounts of PREFIX
    local keys=() args=() i
    for ((i = 0; i < $2; i++)); do keys+=("sl:{$1__rand_int__}"); args+=("$BENCH_DEVICE" "$BENCH_NONCE"); done
    RENEW=(EVALSHA "${SHA[renew]}" "$2" "${keys[@]}" "$TTL_MS" "$REV_MS" "${args[@]}")
  }
  renew_batch hb2- 1
  phase 'renew, 2-stream acct, 1 per call'  evalsha "$BENCH_KEYS" "${RENEW[@]}"
  renew_batch hb2- 8
  PER_CALL=8 phase 'renew, 2-stream acct, 8 per call' evalsha "$BENCH_KEYS" "${RENEW[@]}"
  renew_batch hb4- 8
  PER_CALL=8 phase 'renew, 4-stream acct, 8 per call' evalsha "$BENCH_KEYS" "${RENEW[@]}"
fi
for ((round = 1; round <= REPEAT; round++)); do
  log "round $round of $REPEAT"
  for name in "${PHASES[@]}"; do run_once "$name"; done
done

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
  # While a dict rehashes both bucket arrays are held; measure after it is done.
  settle
  after=$(info_field memory used_memory)
  # db.0 overhead: dictEntry per key in the main and expires dicts plus their bucket arrays.
  MEM_TABLES=$(rc MEMORY STATS | tr -d '\r' \
    | awk 'prev == "overhead.hashtable.main" || prev == "overhead.hashtable.expires" { t += $1 } { prev = $1 } END { print t }')
  read -r MEM_KEYS MEM_STREAMS MEM_PAYLOAD <<<"$(count 'sl:{acct-*')"
  # Cross-check the first ten accounts through the list script against the mix.
  local sample
  sample=$(listed $(printf 'sl:{acct-%08d} ' 0 1 2 3 4 5 6 7 8 9))
  local want=1111111111
  [[ $1 == mix ]] && want=1111122244
  [[ $sample == "$want" ]] || { echo "store-cost: list on the first 10 accounts gave $sample, expected $want" >&2; exit 1; }
  MEM_DELTA=$((after - before))
  MEM_SECS=$(python3 -c "print(f'{$t1 - $t0:.1f}')")
  MEM_PER=$(python3 -c "print(f'{$MEM_DELTA / $MEM_STREAMS:.1f}')")
  MEM_PAYLOAD_PER=$(python3 -c "print(f'{$MEM_PAYLOAD / $MEM_STREAMS:.1f}')")
  MEM_PER_KEY_OVERHEAD=$(python3 -c "print(f'{($MEM_DELTA - $MEM_PAYLOAD - $MEM_TABLES) / $MEM_KEYS:.1f}')")
  MEM_TABLES_PER=$(python3 -c "print(f'{$MEM_TABLES / $MEM_STREAMS:.1f}')")
  log "$1: $MEM_STREAMS streams on $MEM_KEYS accounts loaded in ${MEM_SECS}s;"\
" used_memory $before -> $after (+$MEM_DELTA) = $MEM_PER B/stream;"\
" value bytes $MEM_PAYLOAD_PER/stream; rest $MEM_PER_KEY_OVERHEAD B/account;"\
" main+expires dict overhead $MEM_TABLES B ($MEM_TABLES_PER/stream)"
}

log "memory: household mix, $STREAMS streams"
mem_run mix "$STREAMS"
MIX=("$MEM_STREAMS" "$MEM_KEYS" "$MEM_DELTA" "$MEM_PER" "$MEM_PAYLOAD_PER" "$MEM_PER_KEY_OVERHEAD" "$MEM_SECS" "$MEM_TABLES_PER")
[[ $MEM_STREAMS == "$STREAMS" ]] || log "WARNING: expected $STREAMS live streams, counted $MEM_STREAMS"
log "memory: one stream per account, $WORST_STREAMS streams"
mem_run single "$WORST_STREAMS"
ONE=("$MEM_STREAMS" "$MEM_KEYS" "$MEM_DELTA" "$MEM_PER" "$MEM_PAYLOAD_PER" "$MEM_PER_KEY_OVERHEAD" "$MEM_SECS" "$MEM_TABLES_PER")
[[ $MEM_STREAMS == "$WORST_STREAMS" ]] || log "WARNING: expected $WORST_STREAMS live streams, counted $MEM_STREAMS"
rc FLUSHALL >/dev/null

# ---------------------------------------------------------------- summary
SET_USEC=$(median "${USEC['SET (60-byte value)']}")
echo
echo "### Store cost per operation ($(date -u +%Y-%m-%d), redis $(redis-server --version | sed -E 's/.* v=([^ ]+).*/\1/'), $(nproc) CPUs)"
echo
echo "redis-benchmark -n $BENCH_N -c $BENCH_C -P 1 over loopback, $REPEAT runs per operation (median; range in brackets);"
echo "usec/call is server-side (INFO commandstats); TTL ${TTL_MS} ms;"
echo "load average at start $LOAD_START, at end $(cut -d' ' -f1-3 /proc/loadavg)."
echo "Lua from $LUA_FROM ($LAYOUT_NAME layout); acquire ${SHA[acquire]:0:12}, heartbeat ${SHA[heartbeat]:0:12}."
echo
echo "usec/op is usec/call divided by the operations in a call (1, or 8 for a batch of renewals)."
echo
echo "| operation | usec/op | x SET | calls | failed | redis-benchmark calls/s |"
echo "|---|---:|---:|---:|---:|---:|"
per_op() { python3 -c "import sys; print(' '.join(f'{float(v) / $2:.2f}' for v in sys.argv[1:]))" $1; }
for name in "${PHASES[@]}"; do
  usecs=$(per_op "${USEC[$name]}" "${PER[$name]}")
  usec=$(median "$usecs")
  ratio=$(python3 -c "print(f'{$usec / $SET_USEC:.1f}')")
  echo "| $name | $usec ($(spread "$usecs")) | ${ratio} | $(total "${CALLS[$name]}") |"\
" $(total "${FAILED[$name]}") | $(median "${RPS[$name]}" | cut -d. -f1) |"
done
echo
echo "| memory run | live streams (counted) | accounts | used_memory delta | bytes/stream | value bytes/stream (STRLEN) | dict entries+buckets bytes/stream | rest bytes/account | load time |"
echo "|---|---:|---:|---:|---:|---:|---:|---:|---:|"
echo "| household mix 50% x1, 30% x2, 20% x4 | ${MIX[0]} | ${MIX[1]} | ${MIX[2]} | ${MIX[3]} | ${MIX[4]} | ${MIX[7]} | ${MIX[5]} | ${MIX[6]} s |"
echo "| one stream per account | ${ONE[0]} | ${ONE[1]} | ${ONE[2]} | ${ONE[3]} | ${ONE[4]} | ${ONE[7]} | ${ONE[5]} | ${ONE[6]} s |"
