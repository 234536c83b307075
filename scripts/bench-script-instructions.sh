#!/usr/bin/env bash
# Instructions per call of the lease scripts, counted by callgrind inside redis-server: unlike
# microseconds, the counts repeat exactly for the same binary and inputs, whatever else the machine
# is doing, so they show the effect of a Lua change at once. Compares SET, a floor script that only
# calls TIME + GET + SET on an account's value, the batch renewal the limiter sends for heartbeats
# (one stream, and eight per call, counted per stream), the full heartbeat script, acquire as the
# limiter loads it (fast path first) and its general code alone (a play on an account with room,
# a denial on a full one), and release.
# Needs redis-server, redis-cli, redis-benchmark and valgrind. N=5000 calls per phase by default.
set -euo pipefail
cd "$(dirname "$0")/.."
LUA=limiter/src/store/redis/lua
N=${N:-5000}
work=$(mktemp -d)
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
valgrind --tool=callgrind --callgrind-out-file="$work/cg.out" --instr-atstart=no \
  redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no >/dev/null 2>&1 &
vg=$!
trap 'kill $vg 2>/dev/null; wait $vg 2>/dev/null; rm -rf "$work"' EXIT
until redis-cli -p "$port" ping >/dev/null 2>&1; do sleep 0.2; done
cli() { redis-cli -p "$port" "$@"; }

ld() { cli SCRIPT LOAD "$(cat "$@")"; }
acquire=$(ld $LUA/fast.lua $LUA/acquire_fast.lua $LUA/common.lua $LUA/acquire.lua)
acquire_general=$(ld $LUA/common.lua $LUA/acquire.lua)
renew=$(ld $LUA/fast.lua $LUA/renew.lua)
heartbeat=$(ld $LUA/common.lua $LUA/heartbeat.lua)
release=$(ld $LUA/fast.lua $LUA/release_fast.lua $LUA/common.lua $LUA/release.lua)
floor=$(cli SCRIPT LOAD "redis.call('TIME') local v = redis.call('GET', KEYS[1]) if v then redis.call('SET', KEYS[1], v, 'PX', ARGV[2]) end return 1")

# Details as record.rs builds them: length, type, then length + bytes of meta, profile, title.
tv=$(printf '\x2a\x05\x0eLiving Room TV\x09profile-1\x0ftitle:tt0111161')
phone=$(printf '\x28\x01\x0cMom-s iPhone\x09profile-2\x0ftitle:tt0068646')
nonce=0123456789abcdef
bench() { redis-benchmark -p "$port" -q -n "$1" -c 4 -r "$N" "${@:2}" >/dev/null 2>&1; }
# Households: every account of `full` gets a tv and phones up to its limit of 4 (and some
# denials); every account of `room` only a tv, so the measured plays there are granted.
play() { # play CALLS SCRIPT KEY DEVICE DETAILS [PHASE]: acquire with the limiter's ARGV layout
  local args=(EVALSHA "$2" 1 "$3" 90000 180000 '' 0 premium 4 "$4" "$nonce" "$5" '' '' '')
  if [[ -n ${6:-} ]]; then phase "$6" "${args[@]}"; else bench "$1" "${args[@]}"; fi
}
play $((N * 5)) "$acquire" 'sl:{full-__rand_int__}' tv-living-room-01 "$tv"
play $((N * 5)) "$acquire" 'sl:{full-__rand_int__}' phone-__rand_int__ "$phone"
for room in room room_general; do
  play $((N * 5)) "$acquire" "sl:{$room-__rand_int__}" tv-living-room-01 "$tv"
done

phase() {
  local name=$1; shift
  callgrind_control -z $vg >/dev/null 2>&1; callgrind_control -i on $vg >/dev/null 2>&1
  bench "$N" "$@"
  callgrind_control -i off $vg >/dev/null 2>&1; callgrind_control -d "$name" $vg >/dev/null 2>&1
}
phase set SET 'k:__rand_int__' 'Living Room TV 0123456789abcdef0123456789abcdef01234567'
phase floor EVALSHA "$floor" 1 'sl:{full-__rand_int__}' 90000 180000
k='sl:{full-__rand_int__}' d=tv-living-room-01
phase renew EVALSHA "$renew" 1 "$k" 90000 180000 "$d" "$nonce"
phase renew_batch8 EVALSHA "$renew" 8 "$k" "$k" "$k" "$k" "$k" "$k" "$k" "$k" 90000 180000 \
  "$d" "$nonce" "$d" "$nonce" "$d" "$nonce" "$d" "$nonce" "$d" "$nonce" "$d" "$nonce" "$d" "$nonce" "$d" "$nonce"
phase heartbeat EVALSHA "$heartbeat" 1 "$k" 90000 180000 premium 4 "$d" "$nonce"
play "$N" "$acquire" 'sl:{room-__rand_int__}' phone-__rand_int__ "$phone" acquire_room
play "$N" "$acquire_general" 'sl:{room_general-__rand_int__}' phone-__rand_int__ "$phone" acquire_room_general
play "$N" "$acquire" 'sl:{full-__rand_int__}' phone-__rand_int__ "$phone" acquire_denied
play "$N" "$acquire_general" 'sl:{full-__rand_int__}' phone-__rand_int__ "$phone" acquire_denied_general
phase release EVALSHA "$release" 1 'sl:{full-__rand_int__}' 90000 180000 tv-living-room-01 "$nonce"

python3 - "$work" "$N" <<'PY'
import glob, re, sys
work, n = sys.argv[1], int(sys.argv[2])
rows = {}
for f in glob.glob(work + '/cg.out.*'):
    text = open(f).read()
    rows[re.search(r'desc: Trigger: dump (\S+)', text).group(1)] = int(re.search(r'totals: (\d+)', text).group(1)) / n
rows['renew_batch8'] /= 8  # per stream
set_cost = rows['set']
print(f"| phase | instructions per call | x SET |\n|---|---|---|")
for name in ['set', 'floor', 'renew', 'renew_batch8', 'heartbeat', 'acquire_room', 'acquire_room_general',
             'acquire_denied', 'acquire_denied_general', 'release']:
    print(f"| {name} | {rows[name]:,.0f} | {rows[name] / set_cost:.1f} |")
PY
