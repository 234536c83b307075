#!/bin/sh
# Starts the one Redis pod of a shard without replicas (screenlimit-operator; run as `sh -c`
# from the StatefulSet's command, no ConfigMap needed).
# Env: MAXMEMORY (bytes; only with a memory limit); APPENDONLY (yes: keep an append-only file); from Secret <name>-redis-auth: REDIS_PASSWORD (the default user; also as REDISCLI_AUTH for
# the probes), LIMITER_PASSWORD (the ACL user LIMITER_USER with the rules LIMITER_ACL); TLS_DIR
# when the pod serves TLS (tls.crt, tls.key, ca.crt from the user's Secret).
# The passwords go only into /data/redis.conf (mode 0600, in the pod's emptyDir), never into a
# ConfigMap or a command line. Nothing is persisted unless APPENDONLY=yes.
set -eu
for password in "$REDIS_PASSWORD" "$LIMITER_PASSWORD"; do
  case "$password" in
    "" | *[!A-Za-z0-9._~+/=-]*)
      echo "Secret <name>-redis-auth: a password is empty or has a character other than A-Z a-z 0-9 . _ ~ + / = -" >&2
      exit 1 ;;
  esac
done
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
CONF
else
  echo "port 6379" > "$next"
fi
cat >> "$next" <<CONF
requirepass $REDIS_PASSWORD
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
CONF
# A full shard refuses new plays (the limiter's failure policy decides) instead of growing until
# the kubelet kills it: MAXMEMORY is 70 % of the container's memory limit, set by the operator.
if [ -n "${MAXMEMORY:-}" ]; then
  echo "maxmemory $MAXMEMORY" >> "$next"
fi
if [ -n "$module" ]; then
  echo "loadmodule $module" >> "$next"
fi
mv -f "$next" "$conf"
exec redis-server "$conf"
