#!/usr/bin/env bash
# bench-peer.sh: our acquire + release cycle against npm redis-semaphore's (5.8.x, ioredis,
# Node 20) on the same throwaway redis-server, in the same run, per cycle: Redis main-thread CPU
# (INFO cpu used_cpu_user_main_thread + used_cpu_sys_main_thread, network I/O included: the
# fleet-sizing measure), Redis µs of the commands alone (INFO commandstats usec, CONFIG RESETSTAT
# before each phase), and cycles per second.
# Phases alternate ROUNDS times; medians are reported. Loopback only; everything it starts is
# killed on exit, and the npm packages go to a temp dir.
#
#   DURATION=10 CONCURRENCY=50 ACCOUNTS=100000 ROUNDS=3 scripts/bench-peer.sh
#
# With MODULE=<path of libscreenlimit_redis_module.so> (an absolute path) the server loads the
# module and each round adds a third phase: our cycle as the module's SL.ACQUIRE + SL.RELEASE.
set -euo pipefail
DURATION=${DURATION:-10}
CONCURRENCY=${CONCURRENCY:-50}
ACCOUNTS=${ACCOUNTS:-100000}
ROUNDS=${ROUNDS:-3}
MODULE=${MODULE:-}
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
LOADGEN=${LOADGEN:-$ROOT/target/release/screenlimit-loadgen}
[[ -x $LOADGEN ]] || (cd "$ROOT" && cargo build --release -q -p screenlimit-bench)

WORK=$(mktemp -d)
REDIS_PID=
cleanup() {
  [[ -n $REDIS_PID ]] && { kill "$REDIS_PID" 2>/dev/null || true; wait "$REDIS_PID" 2>/dev/null || true; }
  rm -rf "$WORK"
}
trap cleanup EXIT

PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
LOAD=()
[[ -n $MODULE ]] && LOAD=(--loadmodule "$MODULE")
redis-server --bind 127.0.0.1 --port "$PORT" --save '' --appendonly no --logfile "$WORK/redis.log" "${LOAD[@]}" &
REDIS_PID=$!
for _ in $(seq 50); do redis-cli -p "$PORT" PING 2>/dev/null | grep -q PONG && break; sleep 0.1; done
rc() { redis-cli -h 127.0.0.1 -p "$PORT" "$@"; }

echo "[bench-peer] installing redis-semaphore@5.8 + ioredis into $WORK" >&2
(cd "$WORK" && npm init -y >/dev/null && npm install --silent --no-audit --no-fund redis-semaphore@~5.8.0 ioredis@5 >/dev/null)
PEER_VERSION=$(node -p "require('$WORK/node_modules/redis-semaphore/package.json').version")

cat >"$WORK/peer.js" <<'JS'
// acquire + release cycles of redis-semaphore's Semaphore (limit 4, 90 s lock timeout, like
// our premium plan and TTL) on random keys, CONCURRENCY loops for DURATION seconds.
const Redis = require('ioredis');
const { Semaphore } = require('redis-semaphore');
const [port, duration, concurrency, accounts] = process.argv.slice(2).map(Number);
const client = new Redis({ host: '127.0.0.1', port });
let cycles = 0, failures = 0;
const end = Date.now() + duration * 1000;
async function loop() {
  while (Date.now() < end) {
    const key = 'acct-' + Math.floor(Math.random() * accounts);
    const sem = new Semaphore(client, key, 4, { lockTimeout: 90000, acquireTimeout: 1000, retryInterval: 10, refreshInterval: 0 });
    try { await sem.acquire(); await sem.release(); cycles++; } catch (e) { failures++; }
  }
}
(async () => {
  const t0 = Date.now();
  await Promise.all(Array.from({ length: concurrency }, loop));
  const secs = (Date.now() - t0) / 1000;
  console.log(JSON.stringify({ cycles, failures, secs }));
  client.disconnect();
})();
JS

# Redis 7 counts a command run inside a script both on its own line and inside the script's
# time, so only top-level commands are summed: EVAL/EVALSHA (redis-semaphore's acquire script)
# and ZREM (its release, a plain command). Our cycle is two EVALSHAs.
usec_calls() { # top-level usec and calls since the last reset
  rc INFO commandstats | tr -d '\r' |
    awk -F'[:=,]' '/^cmdstat_(evalsha|eval|zrem):/ { u += $5; c += $3 } END { print u, c }'
}
main_cpu() { # seconds of Redis main-thread CPU so far
  rc INFO cpu | tr -d '\r' |
    awk -F: '/used_cpu_(user|sys)_main_thread/ { s += $2 } END { printf "%.6f", s }'
}
if [[ -n $MODULE ]] && ! rc SL.VERSION >/dev/null 2>&1; then
  echo "[bench-peer] the module did not load: $(tail -3 "$WORK/redis.log")" >&2
  exit 1
fi
# One phase of our cycle (`store-cycle`, FLAGS passed on); its figures appended to the arrays
# PREFIX_CPU, PREFIX_US and PREFIX_RATE.
ours_phase() {
  local -n cpu=${1}_CPU us=${1}_US rate=${1}_RATE
  local name=$2 before after n
  shift 2
  before=$(main_cpu)
  "$LOADGEN" store-cycle "$@" --redis "redis://127.0.0.1:$PORT" --duration "${DURATION}s" \
    --concurrency "$CONCURRENCY" --accounts "$ACCOUNTS" --json "$WORK/ours.json" >/dev/null
  after=$(main_cpu)
  n=$(jq -r .figures.cycles "$WORK/ours.json")
  cpu+=("$(python3 -c "print(round(($after - $before) * 1e6 / $n, 2))")")
  us+=("$(jq -r .figures.redis_usec_per_cycle "$WORK/ours.json")")
  rate+=("$(jq -r .figures.cycles_per_sec "$WORK/ours.json")")
  echo "[bench-peer] round $round $name: main thread ${cpu[-1]} us/cycle; commands ${us[-1]} us/cycle, ${rate[-1]}/s; $(jq -c .figures.commandstats "$WORK/ours.json")" >&2
}
declare -a PEER_US PEER_RATE OUR_US OUR_RATE PEER_CPU OUR_CPU NAT_US NAT_RATE NAT_CPU
for round in $(seq "$ROUNDS"); do
  rc CONFIG RESETSTAT >/dev/null
  before=$(main_cpu)
  out=$(node "$WORK/peer.js" "$PORT" "$DURATION" "$CONCURRENCY" "$ACCOUNTS")
  after=$(main_cpu)
  read -r usec calls < <(usec_calls)
  cycles=$(jq -r .cycles <<<"$out"); secs=$(jq -r .secs <<<"$out")
  PEER_CPU+=("$(python3 -c "print(round(($after - $before) * 1e6 / $cycles, 2))")")
  PEER_US+=("$(python3 -c "print(round($usec / $cycles, 2))")")
  PEER_RATE+=("$(python3 -c "print(round($cycles / $secs))")")
  echo "[bench-peer] round $round redis-semaphore: $out; main thread ${PEER_CPU[-1]} us/cycle; redis usec $usec calls $calls -> ${PEER_US[-1]} us/cycle, ${PEER_RATE[-1]}/s" >&2
  rc INFO commandstats | tr -d '\r' | grep cmdstat_ >&2
  ours_phase OUR screenlimit
  [[ -n $MODULE ]] && ours_phase NAT "screenlimit module" --native
done
med() { printf '%s\n' "$@" | sort -g | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }'; }
cat <<OUT
redis-server $(redis-server --version | sed -E 's/.* v=([^ ]+).*/\1/'), redis-semaphore $PEER_VERSION, node $(node --version), $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg)
concurrency $CONCURRENCY, $ACCOUNTS keys, ${DURATION}s per phase, $ROUNDS rounds (medians)
                      main-thread us/cycle   commands us/cycle   cycles/s
redis-semaphore       $(med "${PEER_CPU[@]}")                  $(med "${PEER_US[@]}")               $(med "${PEER_RATE[@]}")
screenlimit scripts   $(med "${OUR_CPU[@]}")                  $(med "${OUR_US[@]}")               $(med "${OUR_RATE[@]}")
ratio (ours/peer)     $(python3 -c "print(round($(med "${OUR_CPU[@]}") / $(med "${PEER_CPU[@]}"), 2))")                   $(python3 -c "print(round($(med "${OUR_US[@]}") / $(med "${PEER_US[@]}"), 2))")                $(python3 -c "print(round($(med "${OUR_RATE[@]}") / $(med "${PEER_RATE[@]}"), 2))")
OUT
[[ -z $MODULE ]] && exit 0
cat <<OUT
screenlimit module    $(med "${NAT_CPU[@]}")                  $(med "${NAT_US[@]}")               $(med "${NAT_RATE[@]}")
ratio (module/peer)   $(python3 -c "print(round($(med "${NAT_CPU[@]}") / $(med "${PEER_CPU[@]}"), 2))")                   $(python3 -c "print(round($(med "${NAT_US[@]}") / $(med "${PEER_US[@]}"), 2))")                $(python3 -c "print(round($(med "${NAT_RATE[@]}") / $(med "${PEER_RATE[@]}"), 2))")
OUT
