#!/bin/sh
# Starts one Sentinel (screenlimit-operator, ConfigMap <name>-redis-ha). Sentinel rewrites its
# config file (it records failovers, replicas and peers there), so the config is written afresh
# into the writable emptyDir /data at every start: read from the template (never `cp`, which
# would keep the ConfigMap's read-only mode), built beside the live file, then moved over
# whatever an earlier start left there. Each shard is monitored
# at its current primary as another running Sentinel reports it; when no other Sentinel answers,
# at the pod that says it is a primary; when none does, at pod 0 (the bootstrap).
# Env: NAMESPACE, SENTINEL_SERVICE, SENTINELS, QUORUM, DOWN_AFTER_MS, FAILOVER_TIMEOUT_MS, MAX_PODS;
#      from Secret <name>-redis-auth: SENTINEL_PASSWORD (this Sentinel's and its peers'; also as
#      REDISCLI_AUTH), REDIS_PASSWORD (the data nodes' default user); TLS_DIR when the pods
#      serve TLS. The passwords go only into /data/sentinel.conf (mode 0600).
set -eu
dir=/etc/screenlimit/redis-ha
self="$HOSTNAME.$SENTINEL_SERVICE.$NAMESPACE.svc"
conf=/data/sentinel.conf
next=/data/sentinel.conf.next
for password in "$REDIS_PASSWORD" "$SENTINEL_PASSWORD"; do
  case "$password" in
    "" | *[!A-Za-z0-9._~+/=-]*)
      echo "Secret <name>-redis-auth: a password is empty or has a character other than A-Z a-z 0-9 . _ ~ + / = -" >&2
      exit 1 ;;
  esac
done
tls=""
umask 077
rm -f "$next"
cat "$dir/sentinel.conf" > "$next"
if [ -n "${TLS_DIR:-}" ]; then
  tls="--tls --cacert $TLS_DIR/ca.crt"
  cat >> "$next" <<CONF
port 0
tls-port 26379
tls-cert-file $TLS_DIR/tls.crt
tls-key-file $TLS_DIR/tls.key
tls-ca-cert-file $TLS_DIR/ca.crt
tls-auth-clients no
tls-replication yes
CONF
else
  echo "port 26379" >> "$next"
fi
{
  echo "requirepass $SENTINEL_PASSWORD"
  echo "sentinel sentinel-pass $SENTINEL_PASSWORD"
  # A stable id per pod name: a restarted Sentinel is the same peer, not one more.
  echo "sentinel myid $(printf '%s' "$self" | sha1sum | cut -c1-40)"
  echo "sentinel announce-ip $self"
  echo "sentinel announce-port 26379"
} >> "$next"

peer=""
k=0
while [ "$k" -lt "$SENTINELS" ]; do
  host="$SENTINEL_SERVICE-$k.$SENTINEL_SERVICE.$NAMESPACE.svc"
  # shellcheck disable=SC2086
  if [ "$host" != "$self" ] && [ "$(REDISCLI_AUTH="$SENTINEL_PASSWORD" timeout 3 redis-cli $tls -h "$host" -p 26379 --raw ping </dev/null 2>/dev/null || true)" = "PONG" ]; then
    peer=$host
    break
  fi
  k=$((k + 1))
done

while read -r name shard; do
  [ -n "$name" ] || continue
  master=""
  if [ -n "$peer" ]; then
    # shellcheck disable=SC2086
    reply=$(REDISCLI_AUTH="$SENTINEL_PASSWORD" timeout 3 redis-cli $tls -h "$peer" -p 26379 --raw sentinel get-master-addr-by-name "$name" </dev/null 2>/dev/null || true)
    # shellcheck disable=SC2086
    set -- $reply
    if [ "$#" -eq 2 ]; then master=$1; fi
  fi
  if [ -z "$master" ]; then
    i=0
    while [ "$i" -lt "$MAX_PODS" ]; do
      pod="$shard-$i.$shard.$NAMESPACE.svc"
      # shellcheck disable=SC2086
      role=$(REDISCLI_AUTH="$REDIS_PASSWORD" timeout 3 redis-cli $tls -h "$pod" -p 6379 --raw role </dev/null 2>/dev/null | head -n 1 || true)
      if [ "$role" = "master" ]; then
        master=$pod
        break
      fi
      i=$((i + 1))
    done
  fi
  master=${master:-$shard-0.$shard.$NAMESPACE.svc}
  # Sentinel refuses a host name it cannot resolve: wait for the pod's DNS record.
  n=0
  while command -v getent >/dev/null 2>&1 && ! getent hosts "$master" >/dev/null 2>&1; do
    n=$((n + 1))
    if [ "$n" -ge 90 ]; then
      echo "cannot resolve $master after 90s" >&2
      exit 1
    fi
    sleep 1
  done
  echo "monitoring $name at $master"
  cat >> "$next" <<CONF
sentinel monitor $name $master 6379 $QUORUM
sentinel down-after-milliseconds $name $DOWN_AFTER_MS
sentinel failover-timeout $name $FAILOVER_TIMEOUT_MS
sentinel parallel-syncs $name 1
sentinel auth-pass $name $REDIS_PASSWORD
CONF
done < "$dir/masters"
mv -f "$next" "$conf"
exec redis-server "$conf" --sentinel
