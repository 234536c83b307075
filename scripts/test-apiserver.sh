#!/usr/bin/env bash
# The suites that need a real Kubernetes API server (tests/tests/apiserver_*.rs), on their own,
# where KUBEBUILDER_ASSETS names a folder with kube-apiserver and etcd (and, for garbage
# collection, kube-controller-manager): scripts/envtest-assets.sh fetches one. Without it they
# skip in one line each, as they do in scripts/test.sh; here a skip would hide everything, so
# the variable is required.
set -euo pipefail
cd "$(dirname "$0")/.."
: "${KUBEBUILDER_ASSETS:?set KUBEBUILDER_ASSETS to a folder with kube-apiserver and etcd (scripts/envtest-assets.sh 1.36.x)}"
for binary in kube-apiserver etcd; do
  [[ -x $KUBEBUILDER_ASSETS/$binary ]] || { echo "test-apiserver: no $KUBEBUILDER_ASSETS/$binary" >&2; exit 1; }
done
# What the suites run beside the control plane: openssl, and for apiserver_pods the pod runner's
# tools and redis-server (as the whole suite installs them).
scripts/install-test-deps.sh
# Helm's own engine renders the chart for the suites (as scripts/check-operator-artifacts.sh).
# shellcheck source=lib/venv.sh
source scripts/lib/venv.sh
venv=target/helm-venv
if [[ ! -x $venv/bin/python ]] || ! "$venv/bin/python" -c 'import helm_python' 2>/dev/null; then
  make_venv "$venv"
  "$venv/bin/pip" install --quiet --disable-pip-version-check helm-python-sdk==0.2.2 PyYAML
fi
echo "== the operator, the limiter and the Redis module, for the suites that run them"
# The suites find them beside their test binaries (target/debug).
cargo build --locked -p screenlimit-operator -p screenlimit-limiter -p screenlimit-redis-module
echo "== the API-server suites (Kubernetes in $KUBEBUILDER_ASSETS)"
suites=()
for file in tests/tests/apiserver_*.rs; do
  name=$(basename "$file" .rs)
  suites+=(--test "$name")
done
cargo test --locked -p screenlimit-system-tests "${suites[@]}" -- --test-threads 1
