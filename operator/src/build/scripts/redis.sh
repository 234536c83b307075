#!/bin/sh
# Starts one Redis pod of a Sentinel-managed shard (screenlimit-operator, ConfigMap <name>-redis-ha).
# Which pod is primary is Sentinel's call. Ask a Sentinel first; only when no Sentinel knows the
# shard (first start, or every Sentinel down) ask the shard's other pods; only when none of them
# is a primary either does pod 0 start as the primary (the bootstrap). The operator never picks a
# primary after that.
# Env: NAMESPACE, SHARD (StatefulSet = headless Service), MASTER_NAME, SENTINEL_SERVICE,
#      MAX_SENTINELS, MAX_PODS, MAXMEMORY (bytes; only with a memory limit), APPENDONLY (yes: an
#      append-only file), MIN_REPLICAS_TO_WRITE and MIN_REPLICAS_MAX_LAG (a primary's writes need
#      that many replicas in sync; unset: no such rule); from Secret <name>-redis-auth: REDIS_PASSWORD (the default user:
#      replication, Sentinel, these scripts; also as REDISCLI_AUTH), LIMITER_PASSWORD (the ACL
#      user LIMITER_USER with the rules LIMITER_ACL), SENTINEL_PASSWORD; TLS_DIR when the pods
#      serve TLS (tls.crt, tls.key, ca.crt from the user's Secret).
# The passwords go only into /data/redis.conf (mode 0600, in the pod's emptyDir), never into a
# ConfigMap or a command line.
set -eu
self="$HOSTNAME.$SHARD.$NAMESPACE.svc"
master=""
for password in "$REDIS_PASSWORD" "$LIMITER_PASSWORD" "$SENTINEL_PASSWORD"; do
  case "$password" in
    "" | *[!A-Za-z0-9._~+/=-]*)
      echo "Secret <name>-redis-auth: a password is empty or has a character other than A-Z a-z 0-9 . _ ~ + / = -" >&2
      exit 1 ;;
  esac
done
tls=""
if [ -n "${TLS_DIR:-}" ]; then
  tls="--tls --cacert $TLS_DIR/ca.crt"
fi

ask_sentinels() {
  k=0
  while [ "$k" -lt "$MAX_SENTINELS" ]; do
    sentinel="$SENTINEL_SERVICE-$k.$SENTINEL_SERVICE.$NAMESPACE.svc"
    # Two lines (host, port) when that Sentinel knows the shard; nothing otherwise.
    # shellcheck disable=SC2086
    reply=$(REDISCLI_AUTH="$SENTINEL_PASSWORD" timeout 3 redis-cli $tls -h "$sentinel" -p 26379 --raw sentinel get-master-addr-by-name "$MASTER_NAME" </dev/null 2>/dev/null || true)
    # shellcheck disable=SC2086
    set -- $reply
    if [ "$#" -eq 2 ] && [ "$2" -eq "$2" ] 2>/dev/null; then
      master=$1
      echo "Sentinel $sentinel: the primary of $MASTER_NAME is $master"
      return 0
    fi
    k=$((k + 1))
  done
  return 1
}

ask_pods() {
  i=0
  while [ "$i" -lt "$MAX_PODS" ]; do
    pod="$SHARD-$i.$SHARD.$NAMESPACE.svc"
    if [ "$pod" != "$self" ]; then
      # shellcheck disable=SC2086
      role=$(REDISCLI_AUTH="$REDIS_PASSWORD" timeout 3 redis-cli $tls -h "$pod" -p 6379 --raw role </dev/null 2>/dev/null | head -n 1 || true)
      if [ "$role" = "master" ]; then
        master=$pod
        echo "no Sentinel answered; $pod is a primary"
        return 0
      fi
    fi
    i=$((i + 1))
  done
  return 1
}

if ! ask_sentinels && ! ask_pods; then
  master="$SHARD-0.$SHARD.$NAMESPACE.svc"
  echo "bootstrap: nobody knows a primary of $MASTER_NAME; pod 0 ($master) is it"
fi

# Written afresh at every start, beside the live file and then moved over it, so that whatever
# an earlier start (or Redis's own CONFIG REWRITE) left in /data never blocks this one.
conf=/data/redis.conf
next=/data/redis.conf.next
umask 077
rm -f "$next"
# screenlimit's module (spec.redis.module), copied here by the init container, and the limiter's
# grant of its commands (LIMITER_MODULE_ACL: Redis refuses to start on a rule naming a command it
# does not have, so only with the module). Without the file the shard still serves: the limiter
# finds no SL.VERSION and uses its Lua scripts.
module=
limiter_acl=$LIMITER_ACL
if [ -n "${REDIS_MODULE:-}" ]; then
  if [ -r "$REDIS_MODULE" ]; then
    module=$REDIS_MODULE
    # The grant of exactly the module's commands, written beside it from the same image; an
    # older image wrote none: the commands every module release has.
    module_acl=${LIMITER_MODULE_ACL:-}
    if [ -r "${module%.so}.acl" ]; then
      module_acl=$(cat "${module%.so}.acl")
    fi
    limiter_acl="$LIMITER_ACL $module_acl"
    echo "loading the module $module"
  else
    echo "warning: the module $REDIS_MODULE is missing; starting without it (the limiter uses Lua)"
  fi
fi
if [ -n "${TLS_DIR:-}" ]; then
  cat > "$next" <<CONF
port 0
tls-port 6379
tls-cert-file $TLS_DIR/tls.crt
tls-key-file $TLS_DIR/tls.key
tls-ca-cert-file $TLS_DIR/ca.crt
tls-auth-clients no
tls-replication yes
CONF
else
  echo "port 6379" > "$next"
fi
cat >> "$next" <<CONF
requirepass $REDIS_PASSWORD
masterauth $REDIS_PASSWORD
user $LIMITER_USER $limiter_acl >$LIMITER_PASSWORD
dir /data
save ""
CONF
# spec.redis.persistence: appendOnly (APPENDONLY=yes): an append-only file in /data (the pod's
# emptyDir), reloaded when the container restarts; written every command, fsynced every second.
if [ "${APPENDONLY:-no}" = yes ]; then
  printf 'appendonly yes\nappendfsync everysec\n' >> "$next"
else
  echo "appendonly no" >> "$next"
fi
cat >> "$next" <<CONF
protected-mode no
maxmemory-policy noeviction
replica-announce-ip $self
replica-announce-port 6379
CONF
# A full shard refuses new plays (the limiter's failure policy decides) instead of growing until
# the kubelet kills it: MAXMEMORY is 70 % of the container's memory limit, set by the operator.
if [ -n "${MAXMEMORY:-}" ]; then
  echo "maxmemory $MAXMEMORY" >> "$next"
fi
# spec.redis.minReplicasToWrite: a primary with fewer replicas in sync (replaced by a failover
# while paused or cut off, or its replicas down) refuses writes instead of acknowledging what the
# failover would lose; the limiter then decides by its failure policy.
if [ -n "${MIN_REPLICAS_TO_WRITE:-}" ]; then
  printf 'min-replicas-to-write %s\nmin-replicas-max-lag %s\n' "$MIN_REPLICAS_TO_WRITE" "${MIN_REPLICAS_MAX_LAG:-3}" >> "$next"
fi
if [ -n "$module" ]; then
  echo "loadmodule $module" >> "$next"
fi
if [ "$master" != "$self" ]; then
  echo "replicaof $master 6379" >> "$next"
  echo "starting as a replica of $master"
else
  echo "starting as the primary"
fi
mv -f "$next" "$conf"
exec redis-server "$conf"
