#!/bin/sh
# Before a primary stops (node drain, rollout), ask Sentinel to promote one of its replicas, so
# writes move within a second or two instead of after down-after-milliseconds. Sentinel does the
# failover; a replica, or a primary without replicas, just stops.
# Env: NAMESPACE, MASTER_NAME, SENTINEL_SERVICE, MAX_SENTINELS.
set -u
role=$(redis-cli -p 6379 --raw role </dev/null 2>/dev/null | head -n 1)
[ "$role" = "master" ] || exit 0
replicas=$(redis-cli -p 6379 --raw info replication </dev/null 2>/dev/null | tr -d '\r' | sed -n 's/^connected_slaves://p')
[ "${replicas:-0}" -gt 0 ] 2>/dev/null || exit 0
k=0
while [ "$k" -lt "$MAX_SENTINELS" ]; do
  sentinel="$SENTINEL_SERVICE-$k.$SENTINEL_SERVICE.$NAMESPACE.svc"
  if timeout 3 redis-cli -h "$sentinel" -p 26379 --raw sentinel failover "$MASTER_NAME" </dev/null 2>/dev/null | grep -q '^OK'; then
    break
  fi
  k=$((k + 1))
done
n=0
while [ "$n" -lt 20 ]; do
  role=$(redis-cli -p 6379 --raw role </dev/null 2>/dev/null | head -n 1)
  [ "$role" = "master" ] || exit 0
  sleep 1
  n=$((n + 1))
done
exit 0
