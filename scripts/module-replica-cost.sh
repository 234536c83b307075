#!/usr/bin/env bash
# module-replica-cost.sh: what a batch's renewals cost a primary with the screenlimit module and
# its replica (a plain redis-server), on the fleet-sizing measure: Redis main-thread CPU per
# operation with its I/O (INFO cpu used_cpu_user_main_thread + used_cpu_sys_main_thread deltas).
# Each round sends N calls at -c 8 -P 8 of SET, then of SL.RENEW of 8 lease keys (per renewal:
# the delta over 8 N), and waits for the replica to have applied them before reading its CPU.
# Loopback only; both servers start on free ports and are shut down on exit.
#
#   MODULE=$PWD/target/release/libscreenlimit_redis_module.so N=200000 ROUNDS=3 scripts/module-replica-cost.sh
set -euo pipefail
MODULE=${MODULE:?MODULE=<absolute path of libscreenlimit_redis_module.so>}
N=${N:-200000}
ROUNDS=${ROUNDS:-3}
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
PRIMARY=$(free_port)
REPLICA=$(free_port)
WORK=$(mktemp -d)
cleanup() {
  for port in "$REPLICA" "$PRIMARY"; do redis-cli -p "$port" SHUTDOWN NOSAVE >/dev/null 2>&1 || true; done
  rm -rf "$WORK"
}
trap cleanup EXIT
redis-server --bind 127.0.0.1 --port "$PRIMARY" --save '' --appendonly no --repl-diskless-sync-delay 0 \
  --loadmodule "$MODULE" --daemonize yes --logfile "$WORK/primary.log"
redis-server --bind 127.0.0.1 --port "$REPLICA" --save '' --appendonly no \
  --replicaof 127.0.0.1 "$PRIMARY" --daemonize yes --logfile "$WORK/replica.log"
for _ in $(seq 100); do
  redis-cli -p "$REPLICA" INFO replication 2>/dev/null | grep -q master_link_status:up && break
  sleep 0.2
done
redis-cli -p "$REPLICA" INFO replication | grep -q master_link_status:up || { echo "the replica never synced" >&2; exit 1; }

cpu() { redis-cli -p "$1" INFO cpu | tr -d '\r' | awk -F: '/used_cpu_(user|sys)_main_thread/ { s += $2 } END { printf "%.6f", s }'; }
offset() { redis-cli -p "$1" INFO replication | tr -d '\r' | awk -F: -v f="$2" '$1 == f { print $2 }'; }
applied() { # waits until the replica has what the primary wrote
  local target; target=$(offset "$PRIMARY" master_repl_offset)
  until (( $(offset "$REPLICA" slave_repl_offset) >= target )); do sleep 0.1; done
}
# Eight lease keys of one account (the same slot), each holding a time as the Lua path writes it.
KEYS=()
for i in 0 1 2 3 4 5 6 7; do
  KEYS+=("sl:{bench}lease-0$i")
  redis-cli -p "$PRIMARY" SET "sl:{bench}lease-0$i" 1796237039817 >/dev/null
done
phase() { # NAME OPS_PER_CALL COMMAND...: µs per operation on the primary and on the replica
  local name=$1 per=$2 p0 r0 p1 r1
  shift 2
  applied
  p0=$(cpu "$PRIMARY"); r0=$(cpu "$REPLICA")
  redis-benchmark -p "$PRIMARY" -n "$N" -c 8 -P 8 -q "$@" >/dev/null
  applied
  p1=$(cpu "$PRIMARY"); r1=$(cpu "$REPLICA")
  python3 -c "n = $N * $per; print(f'$name  primary {($p1 - $p0) * 1e6 / n:.3f} us/op  replica {($r1 - $r0) * 1e6 / n:.3f} us/op')"
}
echo "redis-server $(redis-server --version | sed -E 's/.* v=([^ ]+).*/\1/'), $(nproc) CPUs, N=$N calls per phase at -c 8 -P 8, load $(cut -d' ' -f1-3 /proc/loadavg)"
for round in $(seq "$ROUNDS"); do
  phase "round $round SET                    " 1 SET 'k:__rand_int__' 'Living Room TV 0123456789abcdef0123456789abcdef01234567'
  phase "round $round SL.RENEW of 8, per key " 8 SL.RENEW "${KEYS[@]}" 90000
done
