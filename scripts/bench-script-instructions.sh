#!/usr/bin/env bash
# Instructions per call of the lease scripts, counted by callgrind inside redis-server: unlike
# microseconds, the counts repeat exactly for the same binary and inputs, whatever else the machine
# is doing, so they show the effect of a Lua change at once. Compares SET, a floor script that only
# calls TIME + GET + SET, acquire, heartbeat and release (EVALSHA), and heartbeat as a Redis
# Function (FCALL), whose prelude runs once at load instead of on every call.
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

acquire=$(cli SCRIPT LOAD "$(cat $LUA/common.lua $LUA/acquire.lua)")
heartbeat=$(cli SCRIPT LOAD "$(cat $LUA/common.lua $LUA/heartbeat.lua)")
release=$(cli SCRIPT LOAD "$(cat $LUA/common.lua $LUA/release.lua)")
floor=$(cli SCRIPT LOAD "redis.call('TIME') local v = redis.call('GET', KEYS[1]) redis.call('SET', KEYS[1], v or 'x', 'PX', ARGV[2]) return 1")
python3 - "$LUA" > "$work/fn.lua" <<'PY'
import sys
lua = sys.argv[1] + '/'
common = open(lua + 'common.lua').read()
# Library load time has no string/struct globals: bind them on first call instead.
common = common.replace(
    "local byte, sub, char, find, pack = string.byte, string.sub, string.char, string.find, struct.pack",
    "local byte, sub, char, find, pack")
body = open(lua + 'heartbeat.lua').read().replace('KEYS[', 'keys[').replace('ARGV[', 'args[')
print("#!lua name=screenlimit_bench\n" + common + "\nredis.register_function('heartbeat', function(keys, args)\n"
      "if not byte then byte, sub, char, find, pack = string.byte, string.sub, string.char, string.find, struct.pack end\n"
      + body + "\nend)")
PY
cli FUNCTION LOAD "$(cat "$work/fn.lua")" >/dev/null

# Details as record.rs builds them: length, type, then length + bytes of meta, profile, title.
tv=$(printf '\x2a\x05\x0eLiving Room TV\x09profile-1\x0ftitle:tt0111161')
phone=$(printf '\x28\x01\x0cMom-s iPhone\x09profile-2\x0ftitle:tt0068646')
nonce=0123456789abcdef
bench() { redis-benchmark -p "$port" -q -n "$1" -c 4 -r "$N" "${@:2}" >/dev/null 2>&1; }
# Households: every account gets a tv (and most a phone) before anything is counted.
bench $((N * 3)) EVALSHA "$acquire" 1 'sl:{acct-__rand_int__}' 90000 180000 '' 0 premium 4 tv-living-room-01 "$nonce" "$tv" '' '' ''

phase() {
  local name=$1; shift
  callgrind_control -z $vg >/dev/null 2>&1; callgrind_control -i on $vg >/dev/null 2>&1
  bench "$N" "$@"
  callgrind_control -i off $vg >/dev/null 2>&1; callgrind_control -d "$name" $vg >/dev/null 2>&1
}
phase set SET 'k:__rand_int__' 'Living Room TV 0123456789abcdef0123456789abcdef01234567'
phase floor EVALSHA "$floor" 1 'sl:{floor-__rand_int__}' 90000 180000
phase acquire EVALSHA "$acquire" 1 'sl:{acct-__rand_int__}' 90000 180000 '' 0 premium 4 phone-__rand_int__ "$nonce" "$phone" '' '' ''
phase heartbeat EVALSHA "$heartbeat" 1 'sl:{acct-__rand_int__}' 90000 180000 premium 4 tv-living-room-01 "$nonce"
phase heartbeat_fcall FCALL heartbeat 1 'sl:{acct-__rand_int__}' 90000 180000 premium 4 tv-living-room-01 "$nonce"
phase release EVALSHA "$release" 1 'sl:{acct-__rand_int__}' 90000 180000 tv-living-room-01 "$nonce"

python3 - "$work" "$N" <<'PY'
import glob, re, sys
work, n = sys.argv[1], int(sys.argv[2])
rows = {}
for f in glob.glob(work + '/cg.out.*'):
    text = open(f).read()
    rows[re.search(r'desc: Trigger: dump (\S+)', text).group(1)] = int(re.search(r'totals: (\d+)', text).group(1)) / n
set_cost = rows['set']
print(f"| phase | instructions per call | x SET |\n|---|---|---|")
for name in ['set', 'floor', 'acquire', 'heartbeat', 'heartbeat_fcall', 'release']:
    print(f"| {name} | {rows[name]:,.0f} | {rows[name] / set_cost:.1f} |")
PY
