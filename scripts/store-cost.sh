#!/usr/bin/env bash
# store-cost.sh: what one Redis shard spends per screenlimit operation, measured on a throwaway
# local server, for the lease-key store layout (one value per account, plus one lease key per
# live lease, and a bounded history list per account that had an event worth keeping; a
# heartbeat on a live lease is one native GETEX of its lease key).
#
#   CPU:    each phase is one redis-benchmark run of -n BENCH_N calls from BENCH_C clients, each
#           waiting for its answer (-P 1); SET and GETEX also run pipelined (-P PIPE), as the
#           limiter sends a shard's commands in batches. Two measures per phase:
#             - Redis main-thread CPU per operation, network I/O included (the fleet-sizing
#               measure): the delta of INFO cpu used_cpu_user_main_thread +
#               used_cpu_sys_main_thread over the run, divided by the calls of the phase's command;
#             - INFO commandstats usec per call (command time alone, no I/O); CONFIG RESETSTAT
#               before each run, so every run has its command's cmdstat to itself.
#           Phases run REPEAT rounds round-robin; medians and ranges are reported, with ratios to
#           the SET of the same run. Every phase but "new account" must find every key it reads
#           (keyspace_misses 0), or the script stops.
#           Acquire runs enforced and in shadow on the same inputs (each on its own accounts,
#           pre-filled alike): a 2nd stream on an account with room (granted either way, no
#           history written), and a play over the limit on full accounts (4 streams, premium 4):
#           enforced, it is refused (it writes its refusal in the account's history and leaves
#           the account as it was); in shadow, it is let through (the history entry it would have
#           been, kind 8, then the grant: the account gains the benchmark device's stream).
#           After the rounds, each prefix's accounts, live streams and lease keys are counted
#           against what its phases may leave; the histories too (none but on the full accounts;
#           there one entry per call, of kind 1 enforced and 8 in shadow; in shadow one stream
#           more on each account drawn); and one more call of each benchmarked command must give
#           its expected reply (1 granted or renewed, 0 refused, 2 let through in shadow).
#   Memory: used_memory before and after loading STREAMS live streams in a household mix, and
#           again with one stream per account; the live streams are counted by decoding every
#           account value, the lease keys by name, and DBSIZE - accounts must equal the streams.
#
# Needs redis-server, redis-cli, redis-benchmark (Debian redis-tools/redis-server 7.0) and python3.
# Never touches any Redis but the one it starts on a free loopback port; that one is killed on
# exit. The machine's load average is printed at the start, at every round and at the end.
#
# Environment (defaults in brackets):
#   STREAMS        live streams for the household-mix memory run               [1000000]
#   WORST_STREAMS  streams for the one-stream-per-account memory run           [STREAMS]
#   BENCH_N        calls per redis-benchmark run                               [100000]
#   REPEAT         rounds of every CPU phase (round-robin), the median shown;
#                  0 = memory only                                             [3]
#   BENCH_C        redis-benchmark clients                                     [8]
#   PIPE           commands per round trip in the pipelined SET/GETEX phases   [8]
#   BENCH_KEYS     accounts pre-filled for each acquire/heartbeat case         [100000]
#   RELEASE_KEYS   accounts loaded afresh (in db 1) before each release run     [10 x BENCH_N]
#   TTL_MS         lease TTL passed to the scripts (ARGV[2] is 2 x TTL)        [3600000]
#   LUA_REF        git revision to take the Lua scripts (and mod.rs) from; unset = working tree
#
# TTL_MS defaults to an hour, longer than any run: no call's cost depends on the TTL, but a TTL
# shorter than the run would let pre-filled leases expire mid-run and turn renewals into misses.
#
# Example: STREAMS=300000 REPEAT=3 BENCH_N=50000 scripts/store-cost.sh   (about 4.5 minutes)
#
# Layout: only the current one. The script reads how each script is assembled from
# limiter/src/store/redis/ (mod.rs, scripts.rs; lease_script! and Scripts::sources(): fast.lua, the
# operation's fast path if it has one, common.lua, the operation), checks the lease-key shape
# in fast.lua (account key + first 8 bytes of the nonce, account key living 3 x keep = 6 TTLs),
# that the store renews with GETEX, and the arguments: every script that may write the account's
# history ends with its bounds, '<entries kept>:<retention ms>' (sent as the limiter's defaults,
# 50:604800000): acquire takes 14 ARGV (the 14th the bounds) and a 15th, 'shadow', for an account
# in shadow (lease_store.rs's SHADOW_ARG), heartbeat 7 (the 7th the bounds), release 5 (the 5th).
# A functional check then runs grant, lease key, GETEX, heartbeat, re-acquire, release, and on a
# full account an enforced refusal (0, a kind-1 history entry, the account unchanged) and a play
# let through in shadow (2, a kind-8 entry, one more stream). Anything else stops it. LUA_REF
# works for any commit with this layout (from 1a5b34f on). Older layouts are not measured here:
# for the 13-ARGV layout with no history, this script as it was at 234a14f (from a worktree of
# it, with LUA_REF) takes the commits from 41e7459 up to d347cc9, where the renewal's GETEX moved
# to send.rs; the commits from there up to 1a5b34f (the history's first layouts among them) never
# had a version of their own; for the batch renewal (renew.lua, up to a30f03d) run this script as
# it was at that commit; the PEXPIRE heartbeat of 257c199-6089a29 never had a version of its own.
#
# Household mix (memory run): account i holds 1 stream if i mod 10 is 0-4 (50% of accounts),
# 2 if 5-7 (30%), 4 if 8-9 (20%): 1.9 streams per account on average.
set -euo pipefail

STREAMS=${STREAMS:-1000000}
WORST_STREAMS=${WORST_STREAMS:-$STREAMS}
BENCH_N=${BENCH_N:-100000}
REPEAT=${REPEAT:-3}
BENCH_C=${BENCH_C:-8}
PIPE=${PIPE:-8}
BENCH_KEYS=${BENCH_KEYS:-100000}
RELEASE_KEYS=${RELEASE_KEYS:-$((10 * BENCH_N))}
TTL_MS=${TTL_MS:-3600000}
KEEP_MS=$((2 * TTL_MS))
KEY_LIFE_MS=$((6 * TTL_MS))
# The history's bounds, the last argument of every script that may write the account's history:
# '<entries kept>:<retention ms>', the limiter's defaults (50 entries, 7 days).
HIST=50:604800000

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
SCRIPT_START=$(date +%s)

die() { echo "store-cost: $*" >&2; exit 1; }
for tool in redis-server redis-cli redis-benchmark python3 sha1sum; do
  command -v "$tool" >/dev/null || die "$tool not found"
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
loadavg() { cut -d' ' -f1-3 /proc/loadavg; }

# ---------------------------------------------------------------- sources and layout
src() { # src PATH: a file of the repository, from the working tree or from LUA_REF
  if [[ -n ${LUA_REF:-} ]]; then
    git -C "$ROOT" show "$LUA_REF:$1"
  else
    cat "$ROOT/$1"
  fi
}
LUA=limiter/src/store/redis/lua
# The store's Rust source as one text: mod.rs, and the files it was split into later (the
# scripts' assembly in scripts.rs, the operations in lease_store.rs, the heartbeat's GETEX in
# send.rs), where the revision has them.
src limiter/src/store/redis/mod.rs >"$WORK/mod.rs" || die "no limiter/src/store/redis/mod.rs"
for part in scripts lease_store send; do
  src "limiter/src/store/redis/$part.rs" >>"$WORK/mod.rs" 2>/dev/null || true
done
# How each script is assembled, from mod.rs; prints "op fast|plain" per operation, or fails.
python3 - "$WORK/mod.rs" >"$WORK/ops" <<'PY' || die "mod.rs assembles its scripts in a way this script does not know"
import re, sys
text = open(sys.argv[1]).read()
macro = re.search(r"macro_rules! lease_script \{(.*?)\n\}", text, re.S)
assert macro, "no lease_script! macro"
def norm(inc):
    inc = inc.replace(" ", "")
    return {'"lua/fast.lua"': "fast", '"lua/common.lua"': "common",
            'concat!("lua/",$op,".lua")': "op", 'concat!("lua/",$op,"_fast.lua")': "op_fast"}.get(inc, "?" + inc)
# Each arm's includes in order: the plain arm must be fast, common, <op>; the fast arm fast,
# <op>_fast, common, <op>.
arms = [[norm(i) for i in re.findall(r'include_str!\((concat!\([^)]*\)|"[^"]*")\)', arm)]
        for arm in macro.group(1).split("=>")[1:]]
assert arms == [["fast", "common", "op"], ["fast", "op_fast", "common", "op"]], arms
sources = re.search(r"pub fn sources\(\).*?\[(.*?)\]\s*\}", text, re.S)
assert sources, "no Scripts::sources()"
# Each lease script starts with its flags line (`#!lua flags=...`, what Redis reads before it
# runs one: refused when full, allowed, read-only), as loaded on a server.
ops = re.findall(r'\(\s*"(\w+)",\s*concat!\("(#!lua[^"\\]*)\\n",\s*lease_script!\((fast )?"(\w+)"\)\)',
                 sources.group(1))
assert ops, "Scripts::sources() lists nothing"
for name, flags, fast, op in ops:
    assert name == op, (name, op)
    print(name, "fast" if fast else "plain", flags.replace(" ", "_"))
for need in ("acquire", "heartbeat", "release", "list"):
    assert need in [name for name, _, _, _ in ops], need + " missing from Scripts::sources()"
PY
src "$LUA/fast.lua" >"$WORK/fast.lua" || die "no fast.lua: not the lease-key layout"
src "$LUA/common.lua" >"$WORK/common.lua"
declare -A SHA
while read -r op kind flags; do
  src "$LUA/$op.lua" >"$WORK/$op.src"
  echo "${flags//_/ }" >"$WORK/$op.flags"
  if [[ $kind == fast ]]; then
    src "$LUA/${op}_fast.lua" >"$WORK/$op.fast"
    cat "$WORK/$op.flags" "$WORK/fast.lua" "$WORK/$op.fast" "$WORK/common.lua" "$WORK/$op.src" >"$WORK/$op.lua"
  else
    cat "$WORK/$op.flags" "$WORK/fast.lua" "$WORK/common.lua" "$WORK/$op.src" >"$WORK/$op.lua"
  fi
done <"$WORK/ops"
# The lease-key layout, as this script builds its keys and arguments. Each check names what
# changed, so a new layout is noticed here rather than measured wrongly.
if src "$LUA/renew.lua" >/dev/null 2>&1; then die "renew.lua exists: the batch-renewal layout, not this one"; fi
grep -q "return account_key \.\. string\.sub(nonce, 1, 8)" "$WORK/fast.lua" \
  || die "fast.lua's lease_key is not account key + first 8 bytes of the nonce"
grep -q "return 3 \* tonumber(keep)" "$WORK/fast.lua" || die "fast.lua's key_life is not 3 x keep (6 TTLs)"
grep -q 'ARGV\[13\]' "$WORK/acquire.lua" || die "acquire takes no ARGV[13] (caps book)"
grep -q 'history_of(KEYS\[1\], now, ARGV\[14\])' "$WORK/acquire.lua" \
  || die "acquire takes no ARGV[14] (the history's bounds)"
grep -q "ARGV\[15\] == nil" "$WORK/acquire.lua" || die "acquire takes no ARGV[15] (shadow)"
grep -q "shadow ~= 'shadow'" "$WORK/acquire.fast" || die "acquire's fast path does not read ARGV[15] as 'shadow'"
if grep -q 'ARGV\[1[6-9]\]' "$WORK/acquire.lua"; then die "acquire takes more than 15 ARGV"; fi
grep -q 'history_of(KEYS\[1\], now, ARGV\[7\])' "$WORK/heartbeat.lua" \
  || die "heartbeat takes no ARGV[7] (the history's bounds)"
if grep -q 'ARGV\[\([89]\|[1-9][0-9]\)\]' "$WORK/heartbeat.lua"; then die "heartbeat takes more than 7 ARGV"; fi
grep -q 'history_of(KEYS\[1\], now, ARGV\[5\])' "$WORK/release.lua" \
  || die "release takes no ARGV[5] (the history's bounds)"
if grep -q 'ARGV\[\([6-9]\|[1-9][0-9]\)\]' "$WORK/release.lua"; then die "release takes more than 5 ARGV"; fi
grep -q 'pub const SHADOW_ARG: &str = "shadow";' "$WORK/mod.rs" || die "mod.rs does not send 'shadow' (SHADOW_ARG)"
grep -q 'fn history_args' "$WORK/mod.rs" || die "mod.rs sends no history bounds (history_args)"
grep -q 'redis::cmd("GETEX")' "$WORK/mod.rs" || die "the store does not renew with a native GETEX"
if [[ -n ${LUA_REF:-} ]]; then
  LUA_FROM="git $(git -C "$ROOT" rev-parse --short "$LUA_REF")"
else
  LUA_FROM="working tree at $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo '?')"
  if ! git -C "$ROOT" diff --quiet HEAD -- limiter/src/store/redis 2>/dev/null; then
    LUA_FROM="$LUA_FROM + uncommitted changes"
  fi
fi

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
[[ -n $REDIS_PID ]] || { cat "$WORK/redis.log" >&2; die "could not start redis-server"; }

rc() { redis-cli -h 127.0.0.1 -p "$PORT" "$@"; }
rcn() { local db=$1; shift; redis-cli -h 127.0.0.1 -p "$PORT" -n "$db" "$@"; }
info_field() { rc INFO "$1" | tr -d '\r' | awk -F: -v k="$2" '$1 == k { print $2 }'; }
cpu_main() { # Redis main-thread CPU seconds so far, user + system
  rc INFO cpu | tr -d '\r' | awk -F: '
    $1 == "used_cpu_user_main_thread" { u = $2; nu++ }
    $1 == "used_cpu_sys_main_thread" { s = $2; ns++ }
    END { if (nu != 1 || ns != 1) exit 1; printf "%.6f\n", u + s }' \
    || die "INFO cpu has no used_cpu_{user,sys}_main_thread"
}

REDIS_VERSION=$(redis-server --version | sed -E 's/.* v=([^ ]+).*/\1/')
LOAD_START=$(loadavg)
log "load average at start: $LOAD_START (2-core machine shared with others: report ratios within one run)"
log "redis-server $REDIS_VERSION on 127.0.0.1:$PORT (pid $REDIS_PID), $(nproc) CPUs"
log "Lua from $LUA_FROM; scripts: $(tr '\n' ' ' <"$WORK/ops")"

while read -r op _; do
  SHA[$op]=$(rc -x SCRIPT LOAD <"$WORK/$op.lua")
  expected=$(sha1sum "$WORK/$op.lua" | cut -d' ' -f1)
  [[ ${SHA[$op]} == "$expected" ]] || die "SHA mismatch for $op"
done <"$WORK/ops"
# Diagnostic floors: an empty script, and a script making the same Redis calls as the simplest
# account write (TIME, GET, SET ... PX) with no decoding or encoding.
SHA[noop]=$(rc SCRIPT LOAD 'return 1')
SHA[floor]=$(rc SCRIPT LOAD "local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
local v = redis.call('GET', KEYS[1]) or ARGV[1]
redis.call('SET', KEYS[1], v, 'PX', ARGV[2])
return now > 0 and 1 or 0")
# Counts what lies under a key pattern, decoding every account value with its own reader of the
# byte layout documented at the top of common.lua (so it does not depend on the scripts' shared
# functions). An account key is 'sl:{' .. id .. '}'; anything longer that matches is a lease key.
# A record is live when its state is 0 and its end is ahead: the stored end, or its lease key's
# expiry once the stored end has passed (lease_ends in fast.lua).
# Returns accounts, live streams, account value bytes, lease keys, live streams whose lease key
# exists, lease value bytes, lease keys whose value is not a number.
SHA[count]=$(rc SCRIPT LOAD "local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
local byte, sub, find = string.byte, string.sub, string.find
local function u48(s, i)
  local a, b, c, d, e, f = byte(s, i, i + 5)
  return ((((a * 256 + b) * 256 + c) * 256 + d) * 256 + e) * 256 + f
end
local accounts, streams, bytes, leases, backed, lease_bytes, odd, cursor = 0, 0, 0, 0, 0, 0, 0, '0'
repeat
  local page = redis.call('SCAN', cursor, 'MATCH', ARGV[1], 'COUNT', 1000)
  cursor = page[1]
  for _, key in ipairs(page[2]) do
    local close = find(key, '}', 5, true)
    if close ~= #key then
      leases = leases + 1
      local lv = redis.call('GET', key)
      lease_bytes = lease_bytes + #lv
      if not tonumber(lv) or #key ~= close + 8 then odd = odd + 1 end
    else
      local v = redis.call('GET', key)
      accounts, bytes = accounts + 1, bytes + #v
      local p, n = 4 + byte(v, 3), #v
      if byte(v, 1) >= 2 then p = p + 7 end -- version 2: B override limit, I6 override end
      while p <= n do -- B state, I6 ends, I6 started, c16 nonce, B len, device, B len, details
        local state, ends = byte(v, p), u48(v, p + 1)
        local lease_key = key .. sub(v, p + 13, p + 20)
        local q = p + 30 + byte(v, p + 29)
        if state == 0 then
          local expiry = redis.call('PEXPIRETIME', lease_key)
          if expiry > 0 then backed = backed + 1 end
          if ends > now or expiry > now then streams = streams + 1 end
        end
        p = q + 1 + byte(v, q)
      end
    end
  end
until cursor == '0'
return { accounts, streams, bytes, leases, backed, lease_bytes, odd }")
# Counts the account histories under a key pattern ('sl:history:{' .. id .. '}', lists of entries
# newest first, each starting with its version, 1, and its kind: common.lua's history_of).
# Returns lists, entries, entries of version 1 and kind ARGV[2], lists holding ARGV[3] entries
# (the bound: older entries were trimmed).
SHA[history]=$(rc SCRIPT LOAD "local lists, entries, of_kind, full, cursor = 0, 0, 0, 0, '0'
local kind, max = tonumber(ARGV[2]), tonumber(ARGV[3])
repeat
  local page = redis.call('SCAN', cursor, 'MATCH', ARGV[1], 'COUNT', 1000)
  cursor = page[1]
  for _, key in ipairs(page[2]) do
    local list = redis.call('LRANGE', key, 0, -1)
    lists, entries = lists + 1, entries + #list
    if #list >= max then full = full + 1 end
    for _, e in ipairs(list) do
      if string.byte(e, 1) == 1 and string.byte(e, 2) == kind then of_kind = of_kind + 1 end
    end
  end
until cursor == '0'
return { lists, entries, of_kind, full }")
count() { # count DB PATTERN -> "accounts streams value_bytes lease_keys backed lease_bytes odd"
  local out
  out=$(rcn "$1" EVALSHA "${SHA[count]}" 0 "$2" | tr '\n' ' ')
  [[ $out =~ ^([0-9]+\ ){7}$ ]] || die "count failed: $out"
  echo "$out"
}
hist_count() { # hist_count PATTERN KIND -> "lists entries entries_of_kind full_lists"
  local out
  out=$(rc EVALSHA "${SHA[history]}" 0 "$1" "$2" "${HIST%%:*}" | tr '\n' ' ')
  [[ $out =~ ^([0-9]+\ ){4}$ ]] || die "history count failed: $out"
  echo "$out"
}

# ---------------------------------------------------------------- arguments
# The benchmark device: a phone, a play naming no plan (plan '' with default premium/4), no
# device caps configured (the limiter then sends '' for both caps arguments). Its nonce is
# printable, so its lease key, sl:{<account>}bench-no, can be named on a command line.
BENCH_DEVICE=mobile-7f3a9c2e1b4d
BENCH_NONCE=bench-nonce-0001
BENCH_LEASE_SUFFIX=${BENCH_NONCE:0:8}
BENCH_META='Samsung Galaxy S23'
# record.rs encode_details: B body length, B type, then B length + bytes of meta, profile,
# title. No byte is 0 here (type 1), so it can travel as a command-line argument.
hex() { printf '\\x%02x' "$1"; }
body=$((1 + 1 + ${#BENCH_META} + 1 + 9 + 1 + 15))
# shellcheck disable=SC2059 # the format is built from \x escapes on purpose
DETAILS=$(printf "$(hex $body)$(hex 1)$(hex ${#BENCH_META})%s$(hex 9)%s$(hex 15)%s" \
  "$BENCH_META" profile-1 title:tt0111161)
acq_args() { # acq_args DEVICE NONCE: the 14 ARGV of an enforced acquire without a take-over
  # (an account in shadow sends one more, 'shadow')
  ACQ=("$TTL_MS" "$KEEP_MS" '' 0 premium 4 "$1" "$2" "$DETAILS" '' '' '' '' "$HIST")
}
acq_args "$BENCH_DEVICE" "$BENCH_NONCE"
ACQ_TAIL=("${ACQ[@]}")
ACQ_SHADOW_TAIL=("${ACQ[@]}" shadow)
HB_TAIL=("$TTL_MS" "$KEEP_MS" premium 4 "$BENCH_DEVICE" "$BENCH_NONCE" "$HIST")
REL_TAIL=("$TTL_MS" "$KEEP_MS" "$BENCH_DEVICE" "$BENCH_NONCE" "$HIST")

# ---------------------------------------------------------------- functional check
# Grant, the lease key and its value, a native renewal, the full heartbeat, a re-acquire that
# moves the lease key, a release that deletes it, and "expired" after the release.
first() { head -1 | tr -d '\r'; }
expect() { # expect WHAT GOT WANT
  [[ $2 == "$3" ]] || die "layout check: $1 gave '$2', expected '$3'"
}
CK='sl:{check}'
acq_args tv-check-0000001 0123456789abcdef
expect "acquire" "$(rc EVALSHA "${SHA[acquire]}" 1 "$CK" "${ACQ[@]}" | first)" 1
expect "EXISTS lease key after acquire" "$(rc EXISTS "${CK}01234567" | first)" 1
read -r now_s _ <<<"$(rc TIME | tr '\n' ' ')"
lease_value=$(rc GET "${CK}01234567" | first)
[[ $lease_value =~ ^[0-9]+$ ]] || die "layout check: lease key value '$lease_value' is not a time"
life=$((lease_value - now_s * 1000))
((life > KEY_LIFE_MS - 5000 && life <= KEY_LIFE_MS + 1000)) \
  || die "layout check: lease key says the account lives $life ms more, expected ~$KEY_LIFE_MS (6 TTLs)"
pttl=$(rc PTTL "${CK}01234567" | first)
((pttl > TTL_MS - 5000 && pttl <= TTL_MS)) || die "layout check: lease key PTTL $pttl, expected ~$TTL_MS"
expect "GETEX lease key" "$(rc GETEX "${CK}01234567" PX "$TTL_MS" | first)" "$lease_value"
expect "heartbeat script" "$(rc EVALSHA "${SHA[heartbeat]}" 1 "$CK" "$TTL_MS" "$KEEP_MS" premium 4 \
  tv-check-0000001 0123456789abcdef "$HIST" | first)" 1
acq_args tv-check-0000001 fedcba9876543210
expect "re-acquire" "$(rc EVALSHA "${SHA[acquire]}" 1 "$CK" "${ACQ[@]}" | first)" 1
expect "EXISTS earlier lease key after re-acquire" "$(rc EXISTS "${CK}01234567" | first)" 0
expect "EXISTS new lease key after re-acquire" "$(rc EXISTS "${CK}fedcba98" | first)" 1
expect "release" "$(rc EVALSHA "${SHA[release]}" 1 "$CK" "$TTL_MS" "$KEEP_MS" tv-check-0000001 \
  fedcba9876543210 "$HIST" | first)" 1
expect "EXISTS lease key after release" "$(rc EXISTS "${CK}fedcba98" | first)" 0
expect "heartbeat after release" "$(rc EVALSHA "${SHA[heartbeat]}" 1 "$CK" "$TTL_MS" "$KEEP_MS" \
  premium 4 tv-check-0000001 fedcba9876543210 "$HIST" | first)" 3
fields() { head -"$1" | tr -d '\r' | paste -sd' '; } # the first N lines of a reply, on one line
expect "history after grants and a release" "$(hist_count 'sl:history:{check}' 1)" "0 0 0 0 "
# A full account (premium's 4 streams), then a play of a 5th device, enforced: refused (0, limit 4,
# rule 0 the account's limit, cap 0, plan premium 4), its entry (kind 1) written, the account as
# it was; then in shadow: let through (2, limit 4, 5 active, its end, plan, rule 0, cap 0) after
# its entry (kind 8), the account holding 5 live streams, each with its lease key.
CF='sl:{check-full}'
for d in 1 2 3 4; do
  acq_args "tv-check-000000$d" "000$d-check-nonce"
  expect "acquire $d of 4" "$(rc EVALSHA "${SHA[acquire]}" 1 "$CF" "${ACQ[@]}" | first)" 1
done
acq_args phone-check-00001 0123456789abcdef
expect "acquire over the limit" "$(rc EVALSHA "${SHA[acquire]}" 1 "$CF" "${ACQ[@]}" | fields 6)" "0 4 0 0 premium 4"
expect "history after a refusal" "$(hist_count 'sl:history:{check-full}' 1)" "1 1 1 0 "
read -r a streams _ leases backed _ <<<"$(count 0 'sl:{check-full}*')"
expect "accounts, live streams, lease keys after a refusal" "$a $streams $leases $backed" "1 4 4 4"
reply=$(rc EVALSHA "${SHA[acquire]}" 1 "$CF" "${ACQ[@]}" shadow | fields 8)
[[ $reply =~ ^2\ 4\ 5\ [0-9]{13}\ premium\ 4\ 0\ 0$ ]] \
  || die "layout check: acquire over the limit in shadow gave '$reply', expected '2 4 5 <end> premium 4 0 0'"
expect "history after a play let through in shadow" "$(hist_count 'sl:history:{check-full}' 8)" "1 2 1 0 "
read -r a streams _ leases backed _ <<<"$(count 0 'sl:{check-full}*')"
expect "accounts, live streams, lease keys after a play in shadow" "$a $streams $leases $backed" "1 5 5 5"
rc FLUSHDB >/dev/null
log "layout check passed: lease key = account key + nonce[1..8], value = account key's end (6 TTLs)," \
  "PXAT the lease's end; over the limit, enforced refused and in shadow let through, each with its entry"

# ---------------------------------------------------------------- loader
# Writes EVALSHA acquire commands in RESP to stdout, for redis-cli --pipe. Other streams get
# 16 random bytes of nonce, as the limiter's (so their lease keys end in binary bytes).
#   gen.py mix    PREFIX N   household mix until N streams     keys sl:{PREFIX%08d}
#   gen.py single PREFIX N   N accounts of one stream          keys sl:{PREFIX%08d}
#   gen.py bench  PREFIX A K A accounts of K streams each; stream 0 is the benchmark device
#                            (mobile-7f3a9c2e1b4d, nonce bench-nonce-0001); keys sl:{PREFIX%012d},
#                            the form redis-benchmark gives __rand_int__.
#   gen.py other  PREFIX A K the same keys, but none of the K streams is the benchmark device.
# Every call ends with the history's bounds (gen.py MODE PREFIX SHA TTL KEEP BOUNDS ARGS...).
cat >"$WORK/gen.py" <<'PY'
import random, sys

mode, prefix, sha, ttl, keep, bounds = sys.argv[1:7]
args = sys.argv[7:]
# "mix-release" / "single-release": the same streams (the same random draws), each stopped by the
# release script (sha is then release's): what stays is the account key with its tombstones.
release = mode.endswith("-release")
mode = mode.removesuffix("-release")
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
# EVALSHA sha 1 key + 14 ARGV: ttl, keep, plan, limit, default plan, default limit, device,
# nonce, details, replace device, replace nonce, the named plan's caps, the caps book, the
# history's bounds (an enforced account: no 15th, 'shadow').
head = b"*18\r\n$7\r\nEVALSHA\r\n$40\r\n%s\r\n$1\r\n1\r\n" % sha.encode()
def bulk(b): return b"$%d\r\n%s\r\n" % (len(b), b)
tail_timing = bulk(ttl.encode()) + bulk(keep.encode()) + bulk(b"") + bulk(b"0") + bulk(b"premium") + bulk(b"4")
tail_rest = bulk(b"") * 4 + bulk(bounds.encode())
buf = []
def stream(key, a, s, device=None, nonce=None):
    code, pfx, digits, meta = KINDS[(a + s) % 5]
    if device is None:
        device = b"%s%0*x" % (pfx.encode(), digits, rng.getrandbits(4 * digits))
    if nonce is None:
        nonce = rng.randbytes(16)
    title = b"title:tt%07d" % rng.randrange(10_000_000)
    profile, meta = b"profile-%d" % (s + 1), meta.encode()
    body = bytes([code, len(meta)]) + meta + bytes([len(profile)]) + profile + bytes([len(title)]) + title
    details = bulk(bytes([len(body)]) + body)  # record.rs encode_details
    if release:  # EVALSHA sha 1 key ttl keep device nonce bounds
        buf.append(b"*9\r\n$7\r\nEVALSHA\r\n$40\r\n%s\r\n$1\r\n1\r\n" % sha.encode() + bulk(key)
                   + bulk(ttl.encode()) + bulk(keep.encode()) + bulk(device) + bulk(nonce)
                   + bulk(bounds.encode()))
    else:
        buf.append(head + bulk(key) + tail_timing + bulk(device) + bulk(nonce) + details + tail_rest)
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
else:
    sys.exit("gen.py: unknown mode " + mode)
out.write(b"".join(buf))
PY

load() { # load DB MODE PREFIX ARGS... : pipes generated acquires (releases for *-release modes)
  # into db DB, checks for errors
  local sha=${SHA[acquire]}
  [[ $2 == *-release ]] && sha=${SHA[release]}
  python3 "$WORK/gen.py" "$2" "$3" "$sha" "$TTL_MS" "$KEEP_MS" "$HIST" "${@:4}" \
    | rcn "$1" --pipe >"$WORK/pipe.out" 2>&1
  grep -q 'errors: 0,' "$WORK/pipe.out" || { cat "$WORK/pipe.out" >&2; die "load failed"; }
}
listed() { # listed KEY... -> live streams per key as the list script (the service's read) reports
  # them, one digit per key. Only the reply's array header is read: records may hold any byte.
  python3 - "$PORT" "${SHA[list]}" "$TTL_MS" "$@" <<'PY'
import socket, sys
port, sha, ttl, *keys = sys.argv[1:]
def length(key):
    with socket.create_connection(("127.0.0.1", int(port))) as conn:
        args = [b"EVALSHA", sha.encode(), b"1", key.encode(), ttl.encode(), b"premium", b"4"]
        conn.sendall(b"*%d\r\n" % len(args) + b"".join(b"$%d\r\n%s\r\n" % (len(a), a) for a in args))
        head = conn.makefile("rb").readline()  # the rest of the reply is left unread
    assert head.startswith(b"*"), head
    return int(head[1:])
# The reply is 5 account fields, then one raw record per live lease.
fixed = length("sl:{store-cost-no-such-account}")
print("".join(str(length(key) - fixed) for key in keys))
PY
}

# Waits for incremental rehashing of the main and expires dicts of dbs 0 and 1 to finish. Redis
# does it 1 ms per cron tick (and a step per dict access), so hz is raised meanwhile. Up to 60 s.
settle() {
  local waited=0 stats
  rc CONFIG SET hz 500 >/dev/null
  # (No pipe into grep -q: under pipefail its early exit would end the wait at once.)
  while stats=$(rc DEBUG HTSTATS 0 && rc DEBUG HTSTATS 1) && [[ $stats == *'rehashing target'* ]]; do
    if ((waited >= 600)); then log "WARNING: still rehashing after 60 s"; break; fi
    sleep 0.1
    waited=$((waited + 1))
  done
  rc CONFIG SET hz 10 >/dev/null
  ((waited == 0)) || log "waited $((waited / 10)).$((waited % 10)) s for a rehash to finish"
}

# ---------------------------------------------------------------- CPU
# __rand_int__ is replaced per occurrence by redis-benchmark (12 digits, below the phase's range).
VALUE=$(printf 'v%.0s' $(seq 60))

# Phases are registered first, then run REPEAT rounds round-robin (so a burst of other load on
# the machine spreads over all of them); each run is alone between CONFIG RESETSTAT and INFO.
declare -A NAME STAT RANGE CMD PIPED DBN MISSES_OK PRE POST
PHASES=()
phase() { # phase NAME PIPELINE CMDSTAT KEYRANGE COMMAND...; DB=n, MISSES=ok, PREP=fn, CHECK=fn
  local id="$1 @$2"
  NAME[$id]=$1 PIPED[$id]=$2 STAT[$id]=$3 RANGE[$id]=$4
  DBN[$id]=${DB:-0} MISSES_OK[$id]=${MISSES:-} PRE[$id]=${PREP:-} POST[$id]=${CHECK:-}
  shift 4
  CMD[$id]=$(printf '%q ' "$@") # args may hold any byte but NUL; %q round-trips them
  PHASES+=("$id")
}
printf 'name\tpipe\tcpu_us\tusec\tcalls\tfailed\trps\tmisses\tnote\n' >"$WORK/runs.tsv"
run_once() { # run_once ID: one redis-benchmark run, appends a line to runs.tsv
  local name=$1 csv line cpu0 cpu1 note=''
  local -a cmd
  eval "cmd=(${CMD[$name]})"
  [[ -z ${PRE[$name]} ]] || "${PRE[$name]}"
  settle # a rehash left running by an earlier phase would charge its steps to this one
  rc CONFIG RESETSTAT >/dev/null
  cpu0=$(cpu_main)
  csv=$(redis-benchmark -h 127.0.0.1 -p "$PORT" --dbnum "${DBN[$name]}" -n "$BENCH_N" -c "$BENCH_C" \
    -P "${PIPED[$name]}" -r "${RANGE[$name]}" --csv "${cmd[@]}" 2>/dev/null)
  cpu1=$(cpu_main)
  line=$(rc INFO commandstats | tr -d '\r' | grep "^cmdstat_${STAT[$name]}:") \
    || die "no cmdstat_${STAT[$name]} after $name"
  local usec calls failed rps misses cpu_us
  usec=$(sed -E 's/.*usec_per_call=([0-9.]+).*/\1/' <<<"$line")
  calls=$(sed -E 's/.*[:,]calls=([0-9]+).*/\1/' <<<"$line")
  failed=$(sed -E 's/.*failed_calls=([0-9]+).*/\1/' <<<"$line")
  rps=$(printf '%s\n' "$csv" | tail -1 | cut -d, -f2 | tr -d '"')
  misses=$(info_field stats keyspace_misses)
  cpu_us=$(python3 -c "print(f'{($cpu1 - $cpu0) * 1e6 / $calls:.3f}')")
  ((calls >= BENCH_N)) || die "$name: only $calls calls of $BENCH_N"
  ((failed == 0)) || die "$name: $failed calls failed"
  [[ -n ${MISSES_OK[$name]} ]] || ((misses == 0)) || die "$name: $misses keys were not found (keyspace_misses)"
  [[ -z ${POST[$name]} ]] || { "${POST[$name]}"; note=$POST_NOTE; }
  printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "${NAME[$name]}" "${PIPED[$name]}" "$cpu_us" "$usec" "$calls" \
    "$failed" "$rps" "$misses" "$note" >>"$WORK/runs.tsv"
  log "$(printf '%-42s -P %-2s %7s us CPU/op %6s usec/call %7s calls %6s misses %9s req/s' \
    "${NAME[$name]}" "${PIPED[$name]}" "$cpu_us" "$usec" "$calls" "$misses" "$rps")${note:+ ($note per mille real releases)}"
}

# REPEAT=0 skips the CPU phases (memory only).
if ((REPEAT > 0)); then
  log "CPU phases: $REPEAT rounds of -n $BENCH_N -c $BENCH_C -P 1 (and -P $PIPE for SET/GETEX), accounts pre-filled: $BENCH_KEYS"
  load 0 bench acq1- "$BENCH_KEYS" 1 # accounts holding the benchmark device only
  load 0 bench hb2- "$BENCH_KEYS" 2  # benchmark device + 1 other
  load 0 bench hb4- "$BENCH_KEYS" 4  # benchmark device + 3 others (a full premium account)
  load 0 other acqo- "$BENCH_KEYS" 1 # accounts holding one other device (not the bench one)
  # The shadow phases' own accounts, pre-filled as their enforced twins (the same draws).
  load 0 other acqos- "$BENCH_KEYS" 1 # as acqo-, played in shadow
  load 0 other full- "$BENCH_KEYS" 4  # 4 other devices: full under premium 4
  load 0 other fulls- "$BENCH_KEYS" 4 # as full-, played in shadow
  for p in acq1-:1 hb2-:2 hb4-:4 acqo-:1 acqos-:1 full-:4 fulls-:4; do
    read -r a s _ l b _ odd <<<"$(count 0 "sl:{${p%:*}*")"
    log "pre-filled sl:{${p%:*}*}: $a accounts, $s live streams, $l lease keys ($b of live streams, $odd odd)"
    want=$((BENCH_KEYS * ${p#*:}))
    [[ $a == "$BENCH_KEYS" && $s == "$want" && $l == "$want" && $b == "$want" && $odd == 0 ]] \
      || die "pre-fill of ${p%:*} does not hold $want live streams with their lease keys"
  done

  # Release: each run releases the benchmark device's live lease on accounts loaded afresh in db 1
  # (so earlier rounds leave nothing released), drawn from RELEASE_KEYS accounts; a draw that hits
  # an account twice finds the lease already released (the general code answers "not held"), and
  # the share of real releases is counted from the live streams left and shown.
  release_prep() {
    rcn 1 FLUSHDB >/dev/null
    load 1 bench rel- "$RELEASE_KEYS" 1
    read -r _ REL_BEFORE _ <<<"$(count 1 'sl:{rel-*')"
    [[ $REL_BEFORE == "$RELEASE_KEYS" ]] || die "release pre-fill: $REL_BEFORE live streams, expected $RELEASE_KEYS"
  }
  release_check() {
    local after leases backed
    read -r _ after _ leases backed _ <<<"$(count 1 'sl:{rel-*')"
    [[ $leases == "$after" && $backed == "$after" ]] || die "release left $after live streams but $leases lease keys"
    POST_NOTE="$(((REL_BEFORE - after) * 1000 / BENCH_N))"
    rcn 1 FLUSHDB >/dev/null
  }

  # SET baseline over BENCH_KEYS keys, after an untimed pass that creates them, so the timed pass is
  # mostly overwrites (like the scripts' own SETs) and no hash-table growth lands on it.
  redis-benchmark -h 127.0.0.1 -p "$PORT" -n "$BENCH_KEYS" -c "$BENCH_C" -P "$PIPE" -r "$BENCH_KEYS" -q \
    SET 'key:__rand_int__' "$VALUE" >/dev/null 2>&1
  HB_LEASE="sl:{hb2-__rand_int__}$BENCH_LEASE_SUFFIX"
  phase 'SET, 60-byte value'                      1 set "$BENCH_KEYS" SET 'key:__rand_int__' "$VALUE"
  phase 'SET, 60-byte value'                      "$PIPE" set "$BENCH_KEYS" SET 'key:__rand_int__' "$VALUE"
  # The heartbeat: GETEX of the lease key (the limiter reads the value, the account key's end).
  phase 'heartbeat: GETEX lease key PX ttl'       1 getex "$BENCH_KEYS" GETEX "$HB_LEASE" PX "$TTL_MS"
  phase 'heartbeat: GETEX lease key PX ttl'       "$PIPE" getex "$BENCH_KEYS" GETEX "$HB_LEASE" PX "$TTL_MS"
  phase 'EVALSHA return 1 (floor)'                1 evalsha 1000000 EVALSHA "${SHA[noop]}" 0
  phase 'EVALSHA TIME+GET+SET (floor)'            1 evalsha "$BENCH_KEYS" EVALSHA "${SHA[floor]}" 1 \
    'sl:{hb2-__rand_int__}' "$VALUE" "$KEY_LIFE_MS"
  # Acquire on a fresh account: GETEX misses, the account value and a lease key are written. Keys
  # drawn from 10^8, so repeats are rare (~0.1%); all are grants.
  MISSES=ok phase 'acquire, new account'          1 evalsha 100000000 EVALSHA "${SHA[acquire]}" 1 \
    'sl:{new-__rand_int__}' "${ACQ_TAIL[@]}"
  # Acquire from a device already holding the account's only stream (re-acquire: its record and
  # lease key deleted, the record rewritten, a lease key set; the bench nonce is the same each time,
  # so the new lease key has the old one's name, which costs the same as a new name). Grant.
  phase 'acquire, re-acquire (1 stream)'          1 evalsha "$BENCH_KEYS" EVALSHA "${SHA[acquire]}" 1 \
    'sl:{acq1-__rand_int__}' "${ACQ_TAIL[@]}"
  # Acquire a second stream (the account holds one other device; the first hit appends, later hits
  # replace the bench device's own record and lease key). Grant.
  phase 'acquire, 2nd stream'                     1 evalsha "$BENCH_KEYS" EVALSHA "${SHA[acquire]}" 1 \
    'sl:{acqo-__rand_int__}' "${ACQ_TAIL[@]}"
  # The same in shadow ('shadow' after the bounds): a play with room is granted as enforced, and
  # writes no history.
  phase 'acquire, 2nd stream, shadow'             1 evalsha "$BENCH_KEYS" EVALSHA "${SHA[acquire]}" 1 \
    'sl:{acqos-__rand_int__}' "${ACQ_SHADOW_TAIL[@]}"
  # A play over the limit (a 5th device on an account holding 4 under premium 4), enforced: refused
  # on the fast path, which lists the 4 live leases (asking each lease key its end) and pushes the
  # refusal's entry on the account's history (LPUSH, LTRIM, PEXPIRE); the account is left as it was.
  phase 'acquire over the limit, refused'         1 evalsha "$BENCH_KEYS" EVALSHA "${SHA[acquire]}" 1 \
    'sl:{full-__rand_int__}' "${ACQ_TAIL[@]}"
  # The same play in shadow: let through, after the entry it would have been (kind 8). The first
  # hit on an account appends the benchmark device's stream (5 live), later hits replace it, as
  # in the 2nd-stream phases, and are over the limit again.
  phase 'acquire over the limit, shadow'          1 evalsha "$BENCH_KEYS" EVALSHA "${SHA[acquire]}" 1 \
    'sl:{fulls-__rand_int__}' "${ACQ_SHADOW_TAIL[@]}"
  DB=1 PREP=release_prep CHECK=release_check \
    phase 'release of a live lease (1-stream acct)' 1 evalsha "$RELEASE_KEYS" EVALSHA "${SHA[release]}" 1 \
    'sl:{rel-__rand_int__}' "${REL_TAIL[@]}"
  # The full heartbeat script, the rare path (lease key gone, or the account key's end within 2
  # TTLs): here every call renews a live lease, rewriting the account value and the lease key.
  phase 'full heartbeat script, 2-stream acct'    1 evalsha "$BENCH_KEYS" EVALSHA "${SHA[heartbeat]}" 1 \
    'sl:{hb2-__rand_int__}' "${HB_TAIL[@]}"
  phase 'full heartbeat script, 4-stream acct'    1 evalsha "$BENCH_KEYS" EVALSHA "${SHA[heartbeat]}" 1 \
    'sl:{hb4-__rand_int__}' "${HB_TAIL[@]}"


  for ((round = 1; round <= REPEAT; round++)); do
    log "round $round of $REPEAT, load average $(loadavg)"
    for id in "${PHASES[@]}"; do run_once "$id"; done
  done

  # Post-checks: the heartbeat phases only renewed (stream and lease-key counts unchanged), the
  # acquires granted and left one lease key per live stream, the refusals left their accounts as
  # they were, and in shadow the plays over the limit were let through.
  post_check() { # post_check PREFIX ACCOUNTS MIN_STREAMS MAX_STREAMS
    local a s l b odd
    read -r a s _ l b _ odd <<<"$(count 0 "sl:{$1*")"
    log "after: sl:{$1*}: $a accounts, $s live streams, $l lease keys ($b of live streams)"
    if [[ $2 != any && $a != "$2" ]] || ! ((s >= $3 && s <= $4 && l == s && b == s && odd == 0)); then
      die "after the CPU phases sl:{$1*} holds $a accounts, $s live streams, $l lease keys"
    fi
  }
  post_check hb2- "$BENCH_KEYS" $((2 * BENCH_KEYS)) $((2 * BENCH_KEYS))
  post_check hb4- "$BENCH_KEYS" $((4 * BENCH_KEYS)) $((4 * BENCH_KEYS))
  post_check acq1- "$BENCH_KEYS" "$BENCH_KEYS" "$BENCH_KEYS"
  post_check acqo- "$BENCH_KEYS" "$BENCH_KEYS" $((2 * BENCH_KEYS))
  post_check acqos- "$BENCH_KEYS" "$BENCH_KEYS" $((2 * BENCH_KEYS))
  post_check full- "$BENCH_KEYS" $((4 * BENCH_KEYS)) $((4 * BENCH_KEYS))
  post_check fulls- "$BENCH_KEYS" $((4 * BENCH_KEYS + 1)) $((5 * BENCH_KEYS))
  post_check new- any 1 $((REPEAT * BENCH_N))
  # The history: none written but by the plays over the limit; there, one entry per call (kind 1
  # refused, kind 8 let through in shadow) unless an account was drawn more often than its list
  # keeps; in shadow, each account drawn (the one with a list) gained exactly one stream.
  hist_check() { # hist_check PREFIX KIND
    local lists entries of_kind full
    read -r lists entries of_kind full <<<"$(hist_count "sl:history:{$1*" "$2")"
    log "after: sl:history:{$1*}: $lists lists, $entries entries ($of_kind of kind $2, $full lists full)"
    ((of_kind == entries && (entries == REPEAT * BENCH_N || (full > 0 && entries < REPEAT * BENCH_N)))) \
      || die "after the CPU phases sl:history:{$1*} holds $entries entries ($of_kind of kind $2) for $((REPEAT * BENCH_N)) calls"
    HIST_LISTS=$lists
  }
  read -r lists _ <<<"$(hist_count 'sl:history:{*' 1)"
  read -r full_lists _ <<<"$(hist_count 'sl:history:{full*' 1)"
  ((lists == full_lists)) || die "$((lists - full_lists)) accounts not played over the limit have a history"
  hist_check full- 1
  hist_check fulls- 8
  read -r _ s _ <<<"$(count 0 'sl:{fulls-*')"
  ((s == 4 * BENCH_KEYS + HIST_LISTS)) \
    || die "in shadow $((s - 4 * BENCH_KEYS)) streams were added to full accounts, $HIST_LISTS accounts were drawn"
  # One more call of each benchmarked command, to see its reply: 1 = granted / renewed, 0 = refused,
  # 2 = let through in shadow.
  for probe in "acquire sl:{acq1-000000000001} 1" "acquire sl:{acqo-000000000001} 1" \
    "shadow sl:{acqos-000000000001} 1" "acquire sl:{full-000000000001} 0" \
    "shadow sl:{fulls-000000000001} 2" \
    "heartbeat sl:{hb2-000000000001} 1" "heartbeat sl:{hb4-000000000001} 1"; do
    read -r op key want <<<"$probe"
    case $op in
      acquire) tail_args=("${ACQ_TAIL[@]}") ;;
      shadow)
        op=acquire
        tail_args=("${ACQ_SHADOW_TAIL[@]}")
        ;;
      *) tail_args=("${HB_TAIL[@]}") ;;
    esac
    expect "$op${tail_args[14]:+ in shadow} on $key" "$(rc EVALSHA "${SHA[$op]}" 1 "$key" "${tail_args[@]}" | first)" "$want"
  done
  reply=$(rc GETEX "sl:{hb2-000000000001}$BENCH_LEASE_SUFFIX" PX "$TTL_MS" | first)
  [[ $reply =~ ^[0-9]{13}$ ]] || die "GETEX of a benchmark lease key gave '$reply'"
fi

# ---------------------------------------------------------------- memory
# Deletes the lease keys under a pattern (keys longer than their account key); returns how many.
SHA[drop_leases]=$(rc SCRIPT LOAD "local n, cursor = 0, '0'
repeat
  local page = redis.call('SCAN', cursor, 'MATCH', ARGV[1], 'COUNT', 1000)
  cursor = page[1]
  for _, key in ipairs(page[2]) do
    if string.find(key, '}', 5, true) ~= #key then n = n + redis.call('DEL', key) end
  end
until cursor == '0'
return n")
dict_overhead() { # bytes of dictEntry + buckets of db 0's main and expires dicts
  rc MEMORY STATS | tr -d '\r' \
    | awk 'prev == "overhead.hashtable.main" || prev == "overhead.hashtable.expires" { t += $1 } { prev = $1 } END { print t }'
}
printf 'run\tstreams\taccounts\tlease_keys\tdbsize\tdelta\tvalue_bytes\tlease_value_bytes\ttables\tlease_freed\ttables_freed\tsecs\n' >"$WORK/mem.tsv"
mem_run() { # mem_run MODE N: loads N streams, counts and checks them, appends to mem.tsv
  local before after t0 t1 tables accounts streams vbytes leases backed lbytes odd dbsize sample want
  rc FLUSHALL >/dev/null
  sleep 0.2
  before=$(info_field memory used_memory)
  t0=$(date +%s.%N)
  load 0 "$1" acct- "$2"
  t1=$(date +%s.%N)
  settle # while a dict rehashes both bucket arrays are held; measure after it is done
  after=$(info_field memory used_memory)
  tables=$(dict_overhead)
  log "$1: db 0 dicts (main, expires): $(rc DEBUG HTSTATS 0 | tr -d '\r' \
    | awk '/table size:/ { size = $3 } /number of elements:/ { printf "%s keys in %s buckets; ", $4, size }')"
  read -r accounts streams vbytes leases backed lbytes odd <<<"$(count 0 'sl:{acct-*')"
  dbsize=$(rc DBSIZE | first)
  log "$1: $streams live streams on $accounts accounts, $leases lease keys ($backed of live streams," \
    "$odd odd), DBSIZE $dbsize; used_memory $before -> $after"
  ((streams == $2)) || die "$1: counted $streams live streams, expected $2"
  ((leases == $2 && backed == $2 && odd == 0)) || die "$1: $leases lease keys ($backed of live streams), expected $2"
  ((dbsize - accounts == $2)) || die "$1: DBSIZE $dbsize - $accounts accounts is not $2 streams"
  # Cross-check the first ten accounts through the list script (the service's read) against the mix.
  # shellcheck disable=SC2046 # ten keys, one word each
  sample=$(listed $(printf 'sl:{acct-%08d} ' 0 1 2 3 4 5 6 7 8 9))
  want=1111111111
  [[ $1 == mix ]] && want=1111122244
  [[ $sample == "$want" ]] || die "list on the first 10 accounts gave $sample, expected $want"
  # What the lease keys themselves hold: used_memory freed by deleting them (their dict entries
  # in both dicts, key names, objects; the bucket arrays stay, as dicts do not shrink here).
  local dropped freed_after freed_tables
  dropped=$(rc EVALSHA "${SHA[drop_leases]}" 0 'sl:{acct-*' | first)
  ((dropped == $2)) || die "$1: deleted $dropped lease keys, expected $2"
  settle
  freed_after=$(info_field memory used_memory)
  freed_tables=$(dict_overhead)
  printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$1" "$streams" "$accounts" "$leases" "$dbsize" \
    "$((after - before))" "$vbytes" "$lbytes" "$tables" "$((after - freed_after))" \
    "$((tables - freed_tables))" "$(python3 -c "print(f'{$t1 - $t0:.1f}')")" >>"$WORK/mem.tsv"
  log "$1: +$((after - before)) B = $(((after - before) / streams)) B/stream; deleting the lease keys freed" \
    "$((after - freed_after)) B ($(((after - freed_after) / streams)) B/stream)"
}
# What stopped streams leave (the sizing rule's second term): the same streams loaded, then each
# stopped by the release script: no lease key is left, each account key holds its records as
# tombstones (remembered 2 TTLs; the key lives 6 TTLs after its last write, so an account that
# stopped watching costs this until then).
printf 'run\tstreams\taccounts\tdbsize\tlive\ttombstones\n' >"$WORK/tomb.tsv"
tomb_run() { # tomb_run MODE N
  local before live after accounts streams rest
  rc FLUSHALL >/dev/null
  sleep 0.2
  before=$(info_field memory used_memory)
  load 0 "$1" acct- "$2"
  settle
  live=$(info_field memory used_memory)
  load 0 "$1-release" acct- "$2"
  settle
  after=$(info_field memory used_memory)
  read -r accounts streams rest <<<"$(count 0 'sl:{acct-*')"
  ((streams == 0)) || die "$1: $streams live streams left after releasing them all"
  dbsize=$(rc DBSIZE | first)
  ((dbsize == accounts)) || die "$1: DBSIZE $dbsize, $accounts accounts: lease keys left"
  printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$1" "$2" "$accounts" "$dbsize" "$((live - before))" \
    "$((after - before))" >>"$WORK/tomb.tsv"
  log "$1 stopped: $2 streams on $accounts accounts: +$((live - before)) B live, +$((after - before)) B as tombstones"
}
log "memory: household mix, $STREAMS streams"
mem_run mix "$STREAMS"
log "memory: one stream per account, $WORST_STREAMS streams"
mem_run single "$WORST_STREAMS"
log "memory: the same streams stopped (tombstones)"
tomb_run mix "$STREAMS"
tomb_run single "$WORST_STREAMS"
rc FLUSHALL >/dev/null
LOAD_END=$(loadavg)
log "load average at end: $LOAD_END; $(($(date +%s) - SCRIPT_START)) s in all"

# ---------------------------------------------------------------- summary
echo
echo "### Store cost per operation ($(date -u '+%Y-%m-%d %H:%M UTC'), redis $REDIS_VERSION, $(nproc) CPUs)"
echo
echo "STREAMS=$STREAMS WORST_STREAMS=$WORST_STREAMS BENCH_N=$BENCH_N REPEAT=$REPEAT BENCH_C=$BENCH_C" \
  "PIPE=$PIPE BENCH_KEYS=$BENCH_KEYS RELEASE_KEYS=$RELEASE_KEYS TTL_MS=$TTL_MS scripts/store-cost.sh"
echo "Load average at start $LOAD_START, at end $LOAD_END."
echo "Lua from $LUA_FROM; acquire ${SHA[acquire]:0:12}, heartbeat ${SHA[heartbeat]:0:12}, release ${SHA[release]:0:12}."
echo
python3 - "$WORK/runs.tsv" "$WORK/mem.tsv" "$WORK/tomb.tsv" <<'PY'
import csv, statistics, sys
SET = "SET, 60-byte value"
def cpu_table(runs):
    order, by = [], {}
    for r in runs:
        k = (r["name"], int(r["pipe"]))
        if k not in by:
            order.append(k); by[k] = []
        by[k].append(r)
    def vals(k, f): return [float(r[f]) for r in by[k]]
    def med(k, f): return statistics.median(vals(k, f))
    def rng(k, f): return f"{min(vals(k, f)):.2f}–{max(vals(k, f)):.2f}"
    print("| operation | commands per round trip (-P) | Redis main-thread CPU µs per op, I/O included"
          " | × SET -P 1 | × SET, same -P | INFO commandstats µs per call | × SET, same -P (commandstats)"
          " | calls | calls/s (median) |")
    print("|---|---:|---|---:|---:|---|---:|---:|---:|")
    for k in order:
        name, pipe = k
        same = (SET, pipe) if (SET, pipe) in by else (SET, 1)
        cpu, usec = med(k, "cpu_us"), med(k, "usec")
        notes = [r["note"] for r in by[k] if r["note"]]
        if notes:
            name += f" (real releases {', '.join(f'{int(n) / 10:.1f} %' for n in notes)} of calls)"
        calls = sum(int(r["calls"]) for r in by[k])
        rps = statistics.median(float(r["rps"]) for r in by[k])
        print(f"| {name} | {pipe} | {cpu:.2f} ({rng(k, 'cpu_us')}) | {cpu / med((SET, 1), 'cpu_us'):.2f}"
              f" | {cpu / med(same, 'cpu_us'):.2f} | {usec:.2f} ({rng(k, 'usec')}) | {usec / med(same, 'usec'):.2f}"
              f" | {calls:,} | {rps:,.0f} |")
    print()
runs = list(csv.DictReader(open(sys.argv[1]), delimiter="\t"))
if runs:
    cpu_table(runs)
print("| memory run | live streams (counted) | accounts | lease keys | DBSIZE | used_memory delta"
      " | **bytes per live stream** | account value bytes (STRLEN) per stream"
      " | dict entries + buckets (main + expires) per stream | rest per key"
      " | freed by deleting the lease keys, per stream | load time |")
print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
for m in csv.DictReader(open(sys.argv[2]), delimiter="\t"):
    s, keys = int(m["streams"]), int(m["dbsize"])
    delta, vb, tb = int(m["delta"]), int(m["value_bytes"]), int(m["tables"])
    label = {"mix": "household mix 50% ×1, 30% ×2, 20% ×4", "single": "one stream per account"}[m["run"]]
    print(f"| {label} | {s:,} | {int(m['accounts']):,} | {int(m['lease_keys']):,} | {keys:,} | {delta:,} |"
          f" **{delta / s:.1f}** | {vb / s:.1f} | {tb / s:.1f} | {(delta - vb - tb) / keys:.1f} |"
          f" {int(m['lease_freed']) / s:.1f} (of which dict entries {int(m['tables_freed']) / s:.1f}) | {m['secs']} s |")
print()
print("| stopped streams | streams | accounts (keys left) | bytes per live stream | **bytes per stopped stream (tombstone)** |")
print("|---|---:|---:|---:|---:|")
for t in csv.DictReader(open(sys.argv[3]), delimiter="\t"):
    s = int(t["streams"])
    label = {"mix": "household mix", "single": "one stream per account"}[t["run"]]
    print(f"| {label} | {s:,} | {int(t['accounts']):,} | {int(t['live']) / s:.1f} | **{int(t['tombstones']) / s:.1f}** |")
PY
