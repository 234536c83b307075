#!/usr/bin/env bash
# Fetches a real Kubernetes control plane for the API-server suites (tests/tests/apiserver_*.rs)
# the usual way: kube-apiserver and etcd with setup-envtest (needs Go), and kube-controller-manager
# of the same release from the Kubernetes release bucket (garbage collection). Prints the folder
# to set as KUBEBUILDER_ASSETS.
#
# usage: scripts/envtest-assets.sh KUBERNETES_VERSION [DIR]     e.g. 1.36.x target/envtest
#
# Needs the network: run by .github/workflows/ci.yml (job apiserver). On a machine without it,
# point KUBEBUILDER_ASSETS at any folder holding those binaries instead.
set -euo pipefail
cd "$(dirname "$0")/.."
want=${1:?usage: $0 KUBERNETES_VERSION [DIR], e.g. 1.36.x}
dir=${2:-target/envtest}
mkdir -p "$dir"

command -v go >/dev/null || { echo "envtest-assets: setup-envtest needs Go" >&2; exit 1; }
go install sigs.k8s.io/controller-runtime/tools/setup-envtest@latest >&2
setup_envtest=$(go env GOPATH)/bin/setup-envtest
assets=$("$setup_envtest" use "$want" --bin-dir "$dir" -p path)
assets=$(cd "$assets" && pwd)
# The folder is named after the exact release, e.g. .../k8s/1.36.2-linux-amd64.
release=$(basename "$assets")
release=${release%%-*}
arch=$(go env GOARCH)
if [[ ! -x $assets/kube-controller-manager ]]; then
  curl -fsSL --retry 3 --max-time 300 -o "$assets/kube-controller-manager" \
    "https://dl.k8s.io/release/v$release/bin/linux/$arch/kube-controller-manager"
  chmod +x "$assets/kube-controller-manager"
fi
for binary in kube-apiserver etcd kube-controller-manager; do
  [[ -x $assets/$binary ]] || { echo "envtest-assets: $assets/$binary is missing" >&2; exit 1; }
done
echo "envtest-assets: Kubernetes $release in $assets" >&2
echo "$assets"
