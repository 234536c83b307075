#!/bin/sh
# Before a primary stops (node drain, rollout), ask Sentinel to promote one of its replicas, so
# writes move within a second or two instead of after down-after-milliseconds. Sentinel does the
# failover; a replica, or a primary without replicas, just stops.
# Env: NAMESPACE, MASTER_NAME, SENTINEL_SERVICE, MAX_SENTINELS, REDISCLI_AUTH (this pod's
# password), SENTINEL_PASSWORD, TLS_DIR when the pods serve TLS.
set -u
tls=""
if [ -n "${TLS_DIR:-}" ]; then
  tls="--tls --cacert $TLS_DIR/ca.crt"
fi
# shellcheck disable=SC2086
role=$(redis-cli $tls -p 6379 --raw role </dev/null 2>/dev/null | head -n 1)
[ "$role" = "master" ] || exit 0
# shellcheck disable=SC2086
replicas=$(redis-cli $tls -p 6379 --raw info replication </dev/null 2>/dev/null | tr -d '\r' | sed -n 's/^connected_slaves://p')
[ "${replicas:-0}" -gt 0 ] 2>/dev/null || exit 0
k=0
while [ "$k" -lt "$MAX_SENTINELS" ]; do
  sentinel="$SENTINEL_SERVICE-$k.$SENTINEL_SERVICE.$NAMESPACE.svc"
  # shellcheck disable=SC2086
  if REDISCLI_AUTH="$SENTINEL_PASSWORD" timeout 3 redis-cli $tls -h "$sentinel" -p 26379 --raw sentinel failover "$MASTER_NAME" </dev/null 2>/dev/null | grep -q '^OK'; then
    break
  fi
  k=$((k + 1))
done
n=0
while [ "$n" -lt 20 ]; do
  # shellcheck disable=SC2086
  role=$(redis-cli $tls -p 6379 --raw role </dev/null 2>/dev/null | head -n 1)
  [ "$role" = "master" ] || exit 0
  sleep 1
  n=$((n + 1))
done
exit 0
