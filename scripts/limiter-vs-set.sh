#!/usr/bin/env bash
# limiter-vs-set.sh: the fleet-sizing measure the store's cost targets are defined on. Redis
# main-thread CPU (INFO cpu, used_cpu_user_main_thread + used_cpu_sys_main_thread, network I/O
# included) per heartbeat and per play-start through one limiter, 8 clients each waiting for its
# answer (screenlimit-loadgen max --levels 8), against `redis-benchmark -c 8 -t set` on the same
# server in the same run.
#
#   BIN=target/release scripts/limiter-vs-set.sh            # this tree's release build
#   BIN=/path/to/old/release LEGACY=1 scripts/limiter-vs-set.sh   # a build without batch_window
#   TLS=1 scripts/limiter-vs-set.sh                           # the limiter over rediss:// (and the
#                                                             # SET baseline over TLS as well)
#   CLUSTER=1 scripts/limiter-vs-set.sh                       # the server as a Redis Cluster primary
#                                                             # (all 16384 slots), store.cluster
#
# Environment: BIN (directory of screenlimit-limiter and screenlimit-loadgen) [target/release],
# STEP (time per phase) [5s], WINDOW (store.batch_window) [0s], LEGACY=1 leaves batch_window out of
# the limiter config (builds before it existed), SET_N (redis-benchmark requests) [200000], TLS=1
# puts the limiter and redis-benchmark on a TLS port (client certificates required; certificates
# made with openssl for the run); the load generator reads INFO on the plain loopback port.
# STORE_TIMEOUT (store.timeout) [25ms]: on a box too busy for it, a degraded answer stops the run.
# Starts its own redis-server and limiter on free loopback ports and kills both on exit.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BIN=${BIN:-$ROOT/target/release}
STEP=${STEP:-5s}
WINDOW=${WINDOW:-0s}
STORE_TIMEOUT=${STORE_TIMEOUT:-25ms}
SET_N=${SET_N:-200000}
for tool in redis-server redis-cli redis-benchmark python3 curl; do
  command -v "$tool" >/dev/null || { echo "limiter-vs-set: $tool not found" >&2; exit 1; }
done
for bin in screenlimit-limiter screenlimit-loadgen; do
  [[ -x $BIN/$bin ]] || { echo "limiter-vs-set: no $BIN/$bin (cargo build --release -p screenlimit-limiter -p screenlimit-bench)" >&2; exit 1; }
done

free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
REDIS_PORT=$(free_port)
LIMITER_PORT=$(free_port)
WORK=$(mktemp -d)
PIDS=()
cleanup() {
  for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$WORK"
}
trap cleanup EXIT

SHARD_URL="redis://127.0.0.1:$REDIS_PORT"
TLS_ARGS=()
BENCH_TLS=()
STORE_TLS=
if [[ -n ${TLS:-} ]]; then
  command -v openssl >/dev/null || { echo "limiter-vs-set: TLS=1 needs openssl" >&2; exit 1; }
  TLS_PORT=$(free_port)
  ec=(-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes)
  (
    cd "$WORK"
    openssl req -x509 "${ec[@]}" -days 1 -subj /CN=bench-ca -keyout ca.key -out ca.crt
    printf 'subjectAltName=DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth,clientAuth\n' >ext
    for name in server client; do
      openssl req "${ec[@]}" -subj "/CN=$name" -keyout "$name.key" -out "$name.csr"
      openssl x509 -req -in "$name.csr" -CA ca.crt -CAkey ca.key -CAcreateserial -days 1 \
        -extfile ext -out "$name.crt"
    done
  ) 2>/dev/null
  TLS_ARGS=(--tls-port "$TLS_PORT" --tls-cert-file "$WORK/server.crt" --tls-key-file "$WORK/server.key"
    --tls-ca-cert-file "$WORK/ca.crt" --tls-auth-clients yes)
  BENCH_TLS=(--tls --cacert "$WORK/ca.crt" --cert "$WORK/client.crt" --key "$WORK/client.key")
  SHARD_URL="rediss://localhost:$TLS_PORT"
  STORE_TLS=", tls: { ca_file: \"$WORK/ca.crt\", client_cert_file: \"$WORK/client.crt\", client_key_file: \"$WORK/client.key\" }"
fi
CLUSTER_ARGS=()
[[ -n ${CLUSTER:-} ]] && CLUSTER_ARGS=(--cluster-enabled yes --cluster-config-file "$WORK/nodes.conf"
  --cluster-port "$(free_port)")
redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --save '' --appendonly no --dir "$WORK" \
  --logfile "$WORK/redis.log" "${TLS_ARGS[@]}" "${CLUSTER_ARGS[@]}" &
PIDS+=($!)
window=", batch_window: $WINDOW"
[[ -n ${LEGACY:-} ]] && window=
placement="redis_shards: [\"$SHARD_URL\"]"
[[ -n ${CLUSTER:-} ]] && placement="cluster: { nodes: [\"$SHARD_URL\"] }"
cat >"$WORK/limiter.yaml" <<YAML
listen: 127.0.0.1:$LIMITER_PORT
store: { backend: redis, $placement, timeout: $STORE_TIMEOUT$window$STORE_TLS }
stream_id_secret: "limiter-vs-set-stream-id-secret-0001"
YAML
for _ in $(seq 50); do redis-cli -p "$REDIS_PORT" ping >/dev/null 2>&1 && break; sleep 0.1; done
if [[ -n ${CLUSTER:-} ]]; then
  # One primary serving every slot: the same server, its commands routed and checked as a
  # cluster's (slot checks, the migration guard of every script).
  redis-cli -p "$REDIS_PORT" cluster addslotsrange 0 16383 >/dev/null
  for _ in $(seq 100); do
    redis-cli -p "$REDIS_PORT" cluster info | grep -q cluster_state:ok && break
    sleep 0.1
  done
fi
"$BIN/screenlimit-limiter" --config "$WORK/limiter.yaml" >"$WORK/limiter.log" 2>&1 &
PIDS+=($!)
for _ in $(seq 100); do curl -sf "127.0.0.1:$LIMITER_PORT/healthz" >/dev/null && break; sleep 0.1; done

main_cpu() {
  redis-cli -p "$REDIS_PORT" info cpu | tr -d '\r' |
    awk -F: '/used_cpu_(user|sys)_main_thread/ { s += $2 } END { printf "%.6f", s }'
}

"$BIN/screenlimit-loadgen" max --url "http://127.0.0.1:$LIMITER_PORT" \
  --redis "redis://127.0.0.1:$REDIS_PORT" --ops heartbeat,play-start --levels 8 --step "$STEP" \
  --connections 8 --leases 20000 --accounts 100000 --json "$WORK/max.json" --quiet \
  --progress 1h >/dev/null 2>"$WORK/loadgen.err" ||
  { tail -12 "$WORK/loadgen.err" >&2; exit 1; }
before=$(main_cpu)
if [[ -n ${TLS:-} ]]; then
  redis-benchmark -p "$TLS_PORT" "${BENCH_TLS[@]}" -c 8 -n "$SET_N" -t set -q >/dev/null
else
  redis-benchmark -p "$REDIS_PORT" -c 8 -n "$SET_N" -t set -q >/dev/null
fi
after=$(main_cpu)
batches=$(curl -s "127.0.0.1:$LIMITER_PORT/metrics" |
  awk '/^screenlimit_store_batches_total/ { b += $2 } /^screenlimit_store_batched_commands_total/ { c += $2 } END { if (b) printf "%.1f", c / b; else print "n/a" }')

python3 - "$WORK/max.json" "$before" "$after" "$SET_N" "$batches" <<'PY'
import json, os, sys
report, before, after, n, depth = sys.argv[1], float(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
set_us = (after - before) * 1e6 / n
rows = json.load(open(report))["rows"]
print(f"SET, redis-benchmark -c 8{' (TLS)' if os.environ.get('TLS') else ''}: {set_us:.2f} us of Redis main-thread CPU per SET")
for row in rows:
    us = row["redis_main_thread_cpu_us_per_request"]
    print(f"{row['op']:<11} 8 clients: {row['rate_per_sec']:>8.0f}/s  p99 {row['p99_ms']:.2f} ms  "
          f"{us:6.2f} us per op = {us / set_us:.2f}x SET")
print(f"mean batch depth over the run (commands per round trip): {depth}")
PY
