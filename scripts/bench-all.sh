#!/usr/bin/env bash
# bench-all.sh: every benchmark of BENCHMARKS.md in one go, sized for a 2-core machine
# (about 10 minutes). Reports (table + JSON) go to $OUT (default target/bench-runs/<date>).
# Nothing is left running: each scenario starts and kills its own redis-server / limiter /
# PostgreSQL.  Environment: STEADY_LEASES (200000), STEADY_SECS (60), SKIP_PROFILE=1.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
OUT=${OUT:-target/bench-runs/$(date -u +%Y%m%dT%H%M%SZ)}
mkdir -p "$OUT"
cargo build --release -q -p screenlimit-limiter -p screenlimit-bench
L=target/release/screenlimit-loadgen
run() { # run NAME ARGS...: one scenario, table to NAME.txt, JSON to NAME.json
  local name=$1; shift
  echo "== $name: screenlimit-loadgen $* ($(date -u +%H:%M:%S), load $(cut -d' ' -f1-3 /proc/loadavg))" | tee "$OUT/$name.txt"
  "$L" "$@" --json "$OUT/$name.json" 2>"$OUT/$name.log" | tee -a "$OUT/$name.txt" || echo "($name: exit $?)" | tee -a "$OUT/$name.txt"
}
run max max --spawn --levels 4,8,16,32,64 --step 8s --accounts 100000 --leases 20000
run steady steady --spawn --leases "${STEADY_LEASES:-200000}" --duration "${STEADY_SECS:-60}s" \
  --play-rate 5000 --connections 64 --progress 10s
run race race --spawn --accounts 10000 --extra 3 --plan standard --wave 200 --connections 64
run churn churn --spawn --clients 200 --duration 60s --ttl 2s --heartbeat-interval 1s \
  --connections 64 --progress 15s
run fleet fleet --spawn --progress 15s
run overhead overhead --rounds 3 --step 8s --concurrency 32
run plan-cache plan-cache --accounts 20000 --rounds 5 --step 4s --concurrency 1,16
echo "== peer ($(date -u +%H:%M:%S))" | tee "$OUT/peer.txt"
DURATION=10 ROUNDS=3 scripts/bench-peer.sh 2>"$OUT/peer.log" | tee -a "$OUT/peer.txt"

if [[ -z ${SKIP_PROFILE:-} ]] && command -v perf >/dev/null; then
  # perf of the limiter under the max play-start load (16 in flight) for 15 s.
  echo "== profile ($(date -u +%H:%M:%S))" | tee "$OUT/profile.txt"
  PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  LPORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  redis-server --bind 127.0.0.1 --port "$PORT" --save '' --appendonly no --logfile /dev/null &
  RPID=$!
  SCREENLIMIT_STORE_BACKEND=redis SCREENLIMIT_REDIS_SHARDS=redis://127.0.0.1:$PORT \
    SCREENLIMIT_STREAM_ID_SECRET=a-long-shared-secret-for-the-profile RUST_LOG=warn \
    target/release/screenlimit-limiter --listen "127.0.0.1:$LPORT" >/dev/null 2>&1 &
  LPID=$!
  trap 'kill $LPID $RPID 2>/dev/null || true' EXIT
  sleep 1
  "$L" max --url "http://127.0.0.1:$LPORT" --redis "redis://127.0.0.1:$PORT" --ops play-start \
    --levels 16 --step 20s --quiet --progress 1h >/dev/null 2>&1 &
  GPID=$!
  sleep 3
  perf record -F 499 -g --call-graph dwarf,16384 -p "$LPID" -o "$OUT/perf.data" -- sleep 12 2>>"$OUT/profile.log" || true
  wait "$GPID" || true
  perf report -i "$OUT/perf.data" --no-children --percent-limit 1.5 --stdio --sort dso,symbol -g none 2>/dev/null \
    | grep -v '^#' | grep -v '^$' | head -40 | tee -a "$OUT/profile.txt"
  perf report -i "$OUT/perf.data" --children --percent-limit 4 --stdio --sort symbol -g none 2>/dev/null \
    | grep -v '^#' | grep -v '^$' | head -40 >"$OUT/profile-children.txt"
  kill "$LPID" "$RPID" 2>/dev/null || true
  wait "$LPID" "$RPID" 2>/dev/null || true
  trap - EXIT
fi
echo "reports in $OUT"
