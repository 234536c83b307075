#!/usr/bin/env bash
# The OpenAPI document is exact: schemathesis (PyPI, in a virtualenv under target/) fuzzes a
# running limiter against the /openapi.json it serves, with every check, the stateful phase (the
# document's links chain play-start to heartbeat, stop, list, force-stop...), a fixed seed and a
# bounded number of examples. Twice: on the embedded store, and on Redis (a throwaway
# redis-server this script starts on a free port). Both run with credentials, so the 401s and
# the `ignored_auth` check are covered too: the embedded store's run with the two credentials
# (the `support` and `player` schemes, each given its own token through schemathesis's
# OpenAPI-aware auth; the player scheme's is the gateway token, which plays as any account), the
# Redis run with the older single token (`auth_token_file`, one `bearer` scheme). Any failure exits non-zero. What schemathesis is told
# beyond its defaults, and why, is in scripts/schemathesis.toml and scripts/schemathesis_hooks.py.
#
#   SCHEMATHESIS_SEED, SCHEMATHESIS_MAX_EXAMPLES    override the fixed seed / examples per call
#   SCHEMATHESIS_STORES="memory redis"              which stores to run on
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=lib/venv.sh
source scripts/lib/venv.sh

schemathesis_version=4.32.5
seed=${SCHEMATHESIS_SEED:-20260611}
max_examples=${SCHEMATHESIS_MAX_EXAMPLES:-100}
stores=${SCHEMATHESIS_STORES:-memory redis}
repo=$(pwd)
target_dir=$(realpath -m "${CARGO_TARGET_DIR:-target}")

echo "== schemathesis: virtualenv"
venv=$target_dir/schemathesis-venv
if ! "$venv/bin/schemathesis" --version 2>/dev/null | grep -qF "$schemathesis_version"; then
  make_venv "$venv"
  "$venv/bin/pip" install --quiet --disable-pip-version-check "schemathesis==$schemathesis_version"
fi
{ command -v redis-server && command -v redis-cli; } >/dev/null || scripts/install-test-deps.sh

echo "== schemathesis: build the limiter"
cargo build --quiet --locked -p screenlimit-limiter --bin screenlimit-limiter
limiter_bin=$target_dir/debug/screenlimit-limiter
rm -rf "$target_dir/schemathesis"

work=$(mktemp -d)
pids=()
cleanup() {
  for pid in "${pids[@]}"; do
    kill "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  done
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# Polls $1 (a URL) until it answers 200, for at most 20 s.
wait_for() {
  python3 - "$1" <<'PY'
import sys, time, urllib.request
deadline = time.time() + 20
while True:
    try:
        with urllib.request.urlopen(sys.argv[1], timeout=1) as r:
            if r.status == 200:
                sys.exit(0)
    except OSError:
        pass
    if time.time() > deadline:
        sys.exit(f"{sys.argv[1]} did not answer 200 within 20 s")
    time.sleep(0.1)
PY
}

token=schemathesis-token-$RANDOM$RANDOM
printf '%s\n' "$token" > "$work/token"
support_token=schemathesis-support-$RANDOM$RANDOM
gateway_token=schemathesis-gateway-$RANDOM$RANDOM
printf '%s\n' "$support_token" > "$work/support"
printf '%s\n' "$gateway_token" > "$work/gateway"
printf 'a-schemathesis-hs256-secret-of-32-bytes-at-least\n' > "$work/hs256"
# The embedded store's run: two credentials, player tokens on, each scheme its own token.
split_auth="auth:
  support_token_file: $work/support
  gateway_token_file: $work/gateway
  players: { hs256_secret_file: $work/hs256, issuer: https://auth.example, audience: screenlimit }"
cp scripts/schemathesis.toml "$work/split.toml"
cat >> "$work/split.toml" <<TOML

# Written by scripts/schemathesis.sh: the support and player schemes' tokens.
[auth.openapi.support]
bearer = "$support_token"

[auth.openapi.player]
bearer = "$gateway_token"
TOML
printf 'a-shared-stream-id-secret-for-the-fuzz-run\n' > "$work/secret"

# Runs schemathesis against a limiter started with the config lines in $2, on store $1; with
# $3 = split, under the two credentials, else under the single token.
fuzz() {
  local store=$1 extra_config=$2 credentials=${3:-single} port auth_config auth_args
  port=$(free_port)
  if [[ $credentials == split ]]; then
    auth_config=$split_auth
    auth_args=(--config-file "$work/split.toml")
  else
    auth_config="auth_token_file: $work/token"
    auth_args=(--config-file "$repo/scripts/schemathesis.toml")
  fi
  cat > "$work/$store.yaml" <<YAML
listen: 127.0.0.1:$port
$auth_config
stream_id_secret_file: $work/secret
plans:
  basic: 1
  standard: { max_streams: 2, device_caps: { mobile: 1 } }
  premium: 4
threads: 1
$extra_config
YAML
  RUST_LOG=warn "$limiter_bin" --config "$work/$store.yaml" > "$work/$store.log" 2>&1 &
  pids+=($!)
  wait_for "http://127.0.0.1:$port/readyz" || { tail -n 20 "$work/$store.log" >&2; return 1; }
  echo "== schemathesis: $store store, $credentials credentials, seed $seed, $max_examples examples per call"
  local started=$SECONDS status=0
  # Bounded: --max-examples per operation and phase, plus a hard stop well above a normal run.
  # No example database, so a run depends on its seed alone. The hooks drop one known false
  # positive, and say how often (scripts/schemathesis_hooks.py).
  # It runs in the scratch directory: its caches (.hypothesis, .schemathesis) stay out of the tree.
  # Under one token schemathesis reads the document from the limiter with it; under two
  # credentials it gets the document from a file (read here with the support token) and the base
  # URL, since it cannot know which scheme's token opens the document before reading it.
  local single_header=() location="http://127.0.0.1:$port/openapi.json"
  if [[ $credentials == split ]]; then
    location=$work/$store-openapi.json
    python3 - "http://127.0.0.1:$port/openapi.json" "$support_token" "$location" <<'PY'
import sys, urllib.request
request = urllib.request.Request(sys.argv[1], headers={"Authorization": f"Bearer {sys.argv[2]}"})
with urllib.request.urlopen(request, timeout=5) as r, open(sys.argv[3], "wb") as out:
    out.write(r.read())
PY
    single_header=(--url "http://127.0.0.1:$port")
  else
    single_header=(--header "Authorization: Bearer $token")
  fi
  (cd "$work" && PYTHONPATH="$repo/scripts" SCHEMATHESIS_HOOKS=schemathesis_hooks \
    timeout 240 "$venv/bin/schemathesis" --no-color "${auth_args[@]}" \
    run "$location" "${single_header[@]}" \
    --checks all --seed "$seed" --max-examples "$max_examples" --workers 1 \
    --generation-database none --request-timeout 10 --report junit --report-dir "$target_dir/schemathesis/$store") \
    || status=$?
  echo "== schemathesis: $store store took $((SECONDS - started)) s"
  if ((status != 0)); then
    echo "schemathesis found mismatches on the $store store (exit $status); the limiter's log:" >&2
    tail -n 20 "$work/$store.log" >&2
    return "$status"
  fi
}

for store in $stores; do
  case $store in
    memory) fuzz memory "" split ;;
    redis)
      redis_port=$(free_port)
      redis-server --port "$redis_port" --bind 127.0.0.1 --save '' --appendonly no \
        --dir "$work" > "$work/redis.log" 2>&1 &
      pids+=($!)
      for _ in $(seq 100); do
        redis-cli -p "$redis_port" ping 2>/dev/null | grep -q PONG && break
        sleep 0.1
      done
      redis-cli -p "$redis_port" ping 2>/dev/null | grep -q PONG \
        || { echo "redis-server on port $redis_port did not start:" >&2; cat "$work/redis.log" >&2; exit 1; }
      # A roomy store deadline: the fuzz run checks the contract, and on a busy CI box the
      # default 25 ms would turn a slow answer into a 503 (a documented one, but a finding).
      fuzz redis "store: { backend: redis, redis_shards: [\"redis://127.0.0.1:$redis_port\"], timeout: 1s }"
      ;;
    *) echo "unknown store $store (memory or redis)" >&2; exit 2 ;;
  esac
done
echo "== schemathesis: OK"
