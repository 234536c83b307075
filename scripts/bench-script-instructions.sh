#!/usr/bin/env bash
# Instructions per call of the store's commands, counted by callgrind inside redis-server: unlike
# microseconds, the counts repeat exactly for the same binary and inputs, whatever else the machine
# is doing, so they show the effect of a Lua change at once. User-space instructions only: the
# kernel's share of the network I/O is not counted (scripts/store-cost.sh measures that, as
# Redis main-thread CPU).
#
# Compares SET (one per round trip and 8 per round trip); the heartbeat as the limiter sends it,
# one native GETEX ... PX of the stream's lease key (likewise 1, 8 and 32 per round trip, the last
# a renewal window's depth) against one script call renewing 32 keys (renew_many); a floor
# script that only calls TIME + GET + SET on an account's value; the full heartbeat script (the
# rare path: lease key gone, or the account key's end near); acquire as the limiter loads it (fast
# path first) and its general code alone (a play on an account with room, a denial on a full
# one); and release.
#
# Layout: the lease-key layout (lease key = account key + first 8 bytes of the nonce; acquire
# takes 14 ARGV, the last the account history's bounds ('<entries kept>:<retention ms>'), which
# every script that may write the history ends with, then 'shadow' for an account in shadow;
# no renew.lua). The script checks it and stops on anything else. A denied
# play writes its entry in the account's history (capped at 50, so the phase's lists are full).
#
# With MODULE=path/to/libscreenlimit_redis_module.so (a release build of redis-module/) the server
# loads the module, and the native commands are counted beside the scripts on the same inputs:
# SL.HEARTBEAT (1 and 8 per round trip), SL.ACQUIRE granted and denied, SL.RELEASE, and SL.RENEW
# of 8 lease keys (1 and 8 calls per round trip) and of 32 (also per renewal).
#
# Needs redis-server, redis-cli, redis-benchmark, valgrind (callgrind_control) and python3.
# N=5000 calls per phase by default. Never touches any Redis but the one it starts under valgrind
# on a free loopback port; that one is killed on exit.
set -euo pipefail
cd "$(dirname "$0")/.."
LUA=limiter/src/store/redis/lua
N=${N:-5000}
# An hour: longer than the run under valgrind, so no pre-filled lease expires meanwhile.
TTL_MS=3600000
KEEP_MS=$((2 * TTL_MS))

die() { echo "bench-script-instructions: $*" >&2; exit 1; }
for tool in redis-server redis-cli redis-benchmark valgrind callgrind_control python3; do
  command -v "$tool" >/dev/null || die "$tool not found"
done
[[ ! -e $LUA/renew.lua ]] || die "renew.lua exists: the batch-renewal layout, not this one"
grep -q "return account_key \.\. string\.sub(nonce, 1, 8)" $LUA/fast.lua \
  || die "fast.lua's lease_key is not account key + first 8 bytes of the nonce"
grep -q 'ARGV\[13\]' $LUA/acquire.lua || die "acquire takes no ARGV[13] (caps book)"
grep -q 'ARGV\[14\]' $LUA/acquire.lua || die "acquire takes no ARGV[14] (history bounds)"
grep -q "ARGV\[15\] == nil" $LUA/acquire.lua || die "acquire takes no ARGV[15] (shadow)"
if grep -q 'ARGV\[1[6-9]\]' $LUA/acquire.lua $LUA/acquire_fast.lua; then die "acquire takes more than 15 ARGV"; fi
# The history's bounds, one argument (the defaults: 50 entries, 7 days).
HIST=(50:604800000)

work=$(mktemp -d)
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
module_args=()
if [[ -n ${MODULE:-} ]]; then
  [[ -f $MODULE ]] || die "no module at $MODULE (cargo build --release -p screenlimit-redis-module)"
  # Absolute: Redis changes to its --dir before it loads modules.
  module_args=(--loadmodule "$(realpath "$MODULE")")
fi
valgrind --tool=callgrind --callgrind-out-file="$work/cg.out" --instr-atstart=no \
  redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no --dir "$work" "${module_args[@]}" >/dev/null 2>&1 &
vg=$!
trap 'kill $vg 2>/dev/null; wait $vg 2>/dev/null; rm -rf "$work"' EXIT
for _ in $(seq 300); do
  redis-cli -p "$port" ping >/dev/null 2>&1 && break
  kill -0 $vg 2>/dev/null || die "redis-server under valgrind did not start"
  sleep 0.2
done
cli() { redis-cli -p "$port" "$@"; }

# Each script as the limiter assembles it (lease_script! in limiter/src/store/redis/scripts.rs):
# fast.lua, the fast path if there is one, common.lua, the operation.
ld() { cli SCRIPT LOAD "$(cat "$@")"; }
acquire=$(ld $LUA/fast.lua $LUA/acquire_fast.lua $LUA/common.lua $LUA/acquire.lua)
acquire_general=$(ld $LUA/fast.lua $LUA/common.lua $LUA/acquire.lua)
heartbeat=$(ld $LUA/fast.lua $LUA/common.lua $LUA/heartbeat.lua)
release=$(ld $LUA/fast.lua $LUA/release_fast.lua $LUA/common.lua $LUA/release.lua)
floor=$(cli SCRIPT LOAD "redis.call('TIME') local v = redis.call('GET', KEYS[1]) if v then redis.call('SET', KEYS[1], v, 'PX', ARGV[2]) end return 1")
# A window's renewals as one script call on the Lua path, the alternative to a pipeline of GETEX:
# each key's GETEX ... PX, every value answered in order.
renew_many=$(cli SCRIPT LOAD "local r = {} for i, k in ipairs(KEYS) do r[i] = redis.call('GETEX', k, 'PX', ARGV[1]) end return r")

# Details as record.rs builds them: length, type, then length + bytes of meta, profile, title.
tv=$(printf '\x2a\x05\x0eLiving Room TV\x09profile-1\x0ftitle:tt0111161')
phone=$(printf '\x28\x01\x0cMom-s iPhone\x09profile-2\x0ftitle:tt0068646')
# Nonces: printable, so a lease key (account key + the nonce's first 8 bytes) can be named on the
# command line: the tv's lease key on account X is sl:{X}tv-nonce.
tv_nonce=tv-nonce-0000001 phone_nonce=ph-nonce-0000001
bench() { redis-benchmark -p "$port" -q -n "$1" -c 4 -r "${RANGE:-$N}" "${@:2}" >/dev/null 2>&1; }
play() { # play SCRIPT KEY DEVICE DETAILS NONCE PHASE [shadow]: a measured acquire with the
  # limiter's 14 ARGV (15 in shadow)
  phase "$6" 1 EVALSHA "$1" 1 "$2" "$TTL_MS" "$KEEP_MS" '' 0 premium 4 "$3" "$5" "$4" '' '' '' '' "${HIST[@]}" "${@:7}"
}
# Households, pre-filled through the acquire script in one pipe: every account of `full`
# (sl:{full-%012d}, the form redis-benchmark gives __rand_int__; N of them) holds a tv and three
# phones, premium's limit of 4; every account of `room`, `room_general` and `room_native` (the
# module's phase) only a tv, under a default plan of 16 streams (the measured plays name no plan,
# so they keep it), so the measured plays there are granted, all of them: N draws over N accounts
# hit a few accounts 4 or 5 times, which a limit of 4 would refuse (and a refusal writes history);
# `rel` (10 x N accounts, a tv each) is released, so that few draws hit an account twice. The
# shadow phases have their own: `full_shadow` and `full_native_shadow` as `full`,
# `room_shadow` and `room_native_shadow` as `room`.
python3 - "$acquire" "$N" "$TTL_MS" "$KEEP_MS" "$tv" "$phone" <<'PY' | cli --pipe >"$work/pipe.out"
import sys
sha, n, ttl, keep = sys.argv[1].encode(), int(sys.argv[2]), sys.argv[3].encode(), sys.argv[4].encode()
tv, phone = sys.argv[5].encode(), sys.argv[6].encode()
def bulk(b): return b"$%d\r\n%s\r\n" % (len(b), b)
out = []
def play(key, device, details, nonce, limit=b"4"):
    args = [b"EVALSHA", sha, b"1", key, ttl, keep, b"", b"0", b"premium", limit, device, nonce, details,
            b"", b"", b"", b"", b"50:604800000"]
    out.append(b"*%d\r\n" % len(args) + b"".join(bulk(a) for a in args))
for a in range(n):
    for full in [b"full", b"full_shadow", b"full_native_shadow"]:
        play(b"sl:{%s-%012d}" % (full, a), b"tv-living-room-01", tv, b"tv-nonce-0000001")
        for j in range(3):
            play(b"sl:{%s-%012d}" % (full, a), b"phone-%d-%d" % (a, j), phone, b"p%d-nonce-0000001" % j)
    for room in [b"room", b"room_general", b"room_native", b"room_shadow", b"room_native_shadow"]:
        play(b"sl:{%s-%012d}" % (room, a), b"tv-living-room-01", tv, b"tv-nonce-0000001", b"16")
for a in range(10 * n):
    play(b"sl:{rel-%012d}" % a, b"tv-living-room-01", tv, b"tv-nonce-0000001")
sys.stdout.buffer.write(b"".join(out))
PY
grep -q 'errors: 0,' "$work/pipe.out" || { cat "$work/pipe.out" >&2; die "pre-fill failed"; }
# Counts the keys matching a pattern (a Lua SCAN: lease keys may end in any byte).
count=$(cli SCRIPT LOAD "local n, c = 0, '0' repeat local p = redis.call('SCAN', c, 'MATCH', ARGV[1], 'COUNT', 1000) c = p[1] n = n + #p[2] until c == '0' return n")
# The layout as the phases assume it: every pre-filled stream has its lease key, whose value is a
# time in ms.
leases=$(cli EVALSHA "$count" 0 'sl:{*}??-nonce')
((leases == 27 * N)) || die "$leases lease keys after the pre-fill, expected $((27 * N))"
[[ $(cli GET 'sl:{full-000000000001}tv-nonce') =~ ^[0-9]{13}$ ]] || die "lease key value is not a time in ms"

phase() { # phase NAME PIPELINE COMMAND...: counts instructions over N calls
  local name=$1 pipe=$2; shift 2
  callgrind_control -z $vg >/dev/null 2>&1; callgrind_control -i on $vg >/dev/null 2>&1
  bench "$N" -P "$pipe" "$@"
  callgrind_control -i off $vg >/dev/null 2>&1; callgrind_control -d "$name" $vg >/dev/null 2>&1
}
k='sl:{full-__rand_int__}' d=tv-living-room-01
phase set 1 SET 'k:__rand_int__' 'Living Room TV 0123456789abcdef0123456789abcdef01234567'
phase set_p8 8 SET 'k:__rand_int__' 'Living Room TV 0123456789abcdef0123456789abcdef01234567'
phase getex 1 GETEX "${k}tv-nonce" PX "$TTL_MS"
phase getex_p8 8 GETEX "${k}tv-nonce" PX "$TTL_MS"
# A renewal window's depth (the fleet's pair rate gives about 35 in 20 ms): 32 GETEX in one round
# trip, against one script call renewing the same 32 keys (`renew_many`).
phase getex_p32 32 GETEX "${k}tv-nonce" PX "$TTL_MS"
renew32=()
for _ in $(seq 32); do renew32+=("${k}tv-nonce"); done
phase lua_renew32 1 EVALSHA "$renew_many" 32 "${renew32[@]}" "$TTL_MS"
phase floor 1 EVALSHA "$floor" 1 "$k" "$TTL_MS" "$KEEP_MS"
phase heartbeat 1 EVALSHA "$heartbeat" 1 "$k" "$TTL_MS" "$KEEP_MS" premium 4 "$d" "$tv_nonce" "${HIST[@]}"
# Plays of a new phone (a random device id; phones played on one account share a lease-key name,
# which only an account drawn twice notices).
play "$acquire" 'sl:{room-__rand_int__}' phone-__rand_int__ "$phone" $phone_nonce acquire_room
play "$acquire_general" 'sl:{room_general-__rand_int__}' phone-__rand_int__ "$phone" $phone_nonce acquire_room_general
# Every measured play on an account with room was granted: none wrote history.
(($(cli EVALSHA "$count" 0 'sl:history:{room*') == 0)) || die "a play on an account with room was refused"
play "$acquire" 'sl:{full-__rand_int__}' phone-__rand_int__ "$phone" $phone_nonce acquire_denied
play "$acquire_general" 'sl:{full-__rand_int__}' phone-__rand_int__ "$phone" $phone_nonce acquire_denied_general
# In shadow: a play with room is granted as enforced; one over the limit is let through.
play "$acquire" 'sl:{room_shadow-__rand_int__}' phone-__rand_int__ "$phone" $phone_nonce acquire_room_shadow shadow
(($(cli EVALSHA "$count" 0 'sl:history:{room*') == 0)) || die "a play in shadow on an account with room wrote history"
play "$acquire" 'sl:{full_shadow-__rand_int__}' phone-__rand_int__ "$phone" $phone_nonce acquire_shadow_refused shadow
(($(cli EVALSHA "$count" 0 'sl:{full_shadow-*}ph-nonce') > 0)) || die "no play over the limit was let through in shadow"
RANGE=$((10 * N)) phase release 1 EVALSHA "$release" 1 'sl:{rel-__rand_int__}' "$TTL_MS" "$KEEP_MS" "$d" "$tv_nonce" "${HIST[@]}"
# A draw that hits an account twice finds its lease released already ("not held", general code).
released=$((10 * N - $(cli EVALSHA "$count" 0 'sl:{rel-*}tv-nonce')))
echo "release: $released of $N calls released a live lease (the others found it released already)"
if [[ -n ${MODULE:-} ]]; then
  # The same inputs through the module: heartbeats on the full households (their leases live),
  # plays on accounts with room (room_native, filled as room), denied plays on the full ones,
  # releases on the rel accounts (the same range as the script's phase, so a few more draws find
  # a lease that phase released: the count of real releases is printed).
  phase sl_heartbeat 1 SL.HEARTBEAT "$k" "$TTL_MS" "$KEEP_MS" premium 4 "$d" "$tv_nonce" "${HIST[@]}"
  phase sl_heartbeat_p8 8 SL.HEARTBEAT "$k" "$TTL_MS" "$KEEP_MS" premium 4 "$d" "$tv_nonce" "${HIST[@]}"
  phase sl_acquire_room 1 SL.ACQUIRE 'sl:{room_native-__rand_int__}' "$TTL_MS" "$KEEP_MS" '' 0 premium 4 \
    phone-__rand_int__ $phone_nonce "$phone" '' '' '' '' "${HIST[@]}"
  (($(cli EVALSHA "$count" 0 'sl:history:{room*') == 0)) || die "SL.ACQUIRE refused a play on an account with room"
  phase sl_acquire_denied 1 SL.ACQUIRE 'sl:{full-__rand_int__}' "$TTL_MS" "$KEEP_MS" '' 0 premium 4 \
    phone-__rand_int__ $phone_nonce "$phone" '' '' '' '' "${HIST[@]}"
  phase sl_acquire_room_shadow 1 SL.ACQUIRE 'sl:{room_native_shadow-__rand_int__}' "$TTL_MS" "$KEEP_MS" '' 0 premium 4 \
    phone-__rand_int__ $phone_nonce "$phone" '' '' '' '' "${HIST[@]}" shadow
  (($(cli EVALSHA "$count" 0 'sl:history:{room*') == 0)) || die "SL.ACQUIRE in shadow wrote history on an account with room"
  phase sl_acquire_shadow_refused 1 SL.ACQUIRE 'sl:{full_native_shadow-__rand_int__}' "$TTL_MS" "$KEEP_MS" '' 0 premium 4 \
    phone-__rand_int__ $phone_nonce "$phone" '' '' '' '' "${HIST[@]}" shadow
  (($(cli EVALSHA "$count" 0 'sl:{full_native_shadow-*}ph-nonce') > 0)) || die "SL.ACQUIRE let no play through in shadow"
  # A batch's renewals as one command (the limiter's SL.RENEW): 8 lease keys a call, so a
  # renewal costs the phase's count / 8.
  renew_keys=()
  for _ in 1 2 3 4 5 6 7 8; do renew_keys+=("${k}tv-nonce"); done
  phase sl_renew8 1 SL.RENEW "${renew_keys[@]}" "$TTL_MS"
  phase sl_renew8_p8 8 SL.RENEW "${renew_keys[@]}" "$TTL_MS"
  phase sl_renew32 1 SL.RENEW "${renew32[@]}" "$TTL_MS"
  RANGE=$((10 * N)) phase sl_release 1 SL.RELEASE 'sl:{rel-__rand_int__}' "$TTL_MS" "$KEEP_MS" "$d" "$tv_nonce" "${HIST[@]}"
  released_again=$((10 * N - released - $(cli EVALSHA "$count" 0 'sl:{rel-*}tv-nonce')))
  echo "SL.RELEASE: $released_again of $N calls released a live lease"
fi

python3 - "$work" "$N" <<'PY'
import glob, re, sys
work, n = sys.argv[1], int(sys.argv[2])
rows = {}
for f in glob.glob(work + '/cg.out.*'):
    text = open(f).read()
    rows[re.search(r'desc: Trigger: dump (\S+)', text).group(1)] = int(re.search(r'totals: (\d+)', text).group(1)) / n
names = ['set', 'set_p8', 'getex', 'getex_p8', 'getex_p32', 'lua_renew32', 'floor', 'heartbeat', 'acquire_room', 'acquire_room_general',
         'acquire_denied', 'acquire_denied_general', 'acquire_room_shadow', 'acquire_shadow_refused', 'release']
if 'sl_heartbeat' in rows:
    names += ['sl_heartbeat', 'sl_heartbeat_p8', 'sl_acquire_room', 'sl_acquire_denied', 'sl_acquire_room_shadow',
              'sl_acquire_shadow_refused', 'sl_release',
              'sl_renew8', 'sl_renew8_p8', 'sl_renew32']
missing = [name for name in names if name not in rows]
if missing:
    sys.exit(f"bench-script-instructions: no callgrind dump for {missing}")
print(f"| phase | instructions per call | x SET |\n|---|---|---|")
for name in names:
    print(f"| {name} | {rows[name]:,.0f} | {rows[name] / rows['set']:.2f} |")
for name, keys in [('sl_renew8', 8), ('sl_renew8_p8', 8), ('lua_renew32', 32), ('sl_renew32', 32)]:
    if name in rows:
        base = 'set_p8' if name == 'sl_renew8_p8' else 'set'
        print(f"| {name}, per renewal | {rows[name] / keys:,.0f} | {rows[name] / keys / rows[base]:.2f} x {base} |")
PY
