#!/usr/bin/env bash
# The kind quickstart of docs/kubernetes.md, from zero and without questions: a kind cluster, the three
# images built here and loaded into its node, the chart installed, examples/dev.yaml with the
# dashboard turned on, Ready, one play through a port-forward, the chart's own test, then
# everything removed again (also when a step fails).
#
# usage: scripts/kind-quickstart.sh [--keep]    (--keep: leave the cluster running at the end)
#
# Needs Docker (or Podman), kind, kubectl and helm on the PATH. Run on GitHub by
# .github/workflows/ci.yml (job kind-quickstart); it needs a container engine, so the test
# machines' suite only lints it (scripts/lint-workflows.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=lib/version.sh
source scripts/lib/version.sh

keep=false
case ${1:-} in
  --keep) keep=true ;;
  "") ;;
  *) echo "kind-quickstart: unknown argument $1 (usage: $0 [--keep])" >&2; exit 2 ;;
esac
for tool in kind kubectl helm curl; do
  command -v "$tool" >/dev/null || { echo "kind-quickstart: $tool is missing" >&2; exit 1; }
done
engine=docker
command -v docker >/dev/null || engine=podman
command -v "$engine" >/dev/null || { echo "kind-quickstart: needs Docker or Podman" >&2; exit 1; }

version=$(product_version)
cluster=screenlimit-quickstart
forward_pid=
cleanup() {
  local rc=$?
  [[ -n $forward_pid ]] && kill "$forward_pid" 2>/dev/null
  if ((rc != 0)); then
    echo "== kind-quickstart failed (rc $rc): what the cluster says" >&2
    kubectl get sl,pods,events -n video 2>&1 | tail -40 >&2 || true
    kubectl logs -n screenlimit-system deploy/screenlimit --tail=60 >&2 || true
  fi
  if ! $keep; then kind delete cluster --name "$cluster" >/dev/null 2>&1 || true; fi
  exit "$rc"
}
trap cleanup EXIT

echo "== 1. a cluster"
kind create cluster --name "$cluster" --wait 120s
echo "== 2. the images ($version), into the cluster's node"
scripts/build-images.sh --builder "$engine"
for image in limiter admin-ui operator; do
  kind load image-archive "target/images/$image-$version.oci.tar" --name "$cluster"
done
echo "== 3. the CRD and the operator"
helm install screenlimit charts/screenlimit --namespace screenlimit-system --create-namespace \
  --wait --timeout 180s
echo "== 4. a dashboard sign-in, then a StreamLimiter"
kubectl create namespace video
password=$(head -c 18 /dev/urandom | base64)
users=$(printf '%s' "$password" | "$engine" run --rm -i "ghcr.io/screenlimit/admin-ui:$version" \
  hash-password --user support --role support)
kubectl create secret generic screenlimit-demo-admin-auth -n video --from-literal=users="$users"
kubectl apply -n video -f examples/dev.yaml
kubectl patch sl screenlimit-demo -n video --type merge \
  -p '{"spec":{"adminUI":{"enabled":true,"authSecretName":"screenlimit-demo-admin-auth"}}}'
kubectl wait -n video streamlimiter/screenlimit-demo --for=condition=Ready --timeout=300s
kubectl get sl -n video
echo "== 5. a play through a port-forward"
kubectl port-forward -n video svc/screenlimit-demo-limiter 18080:8080 >/dev/null &
forward_pid=$!
for _ in $(seq 1 50); do
  curl -fsS -o /dev/null localhost:18080/readyz 2>/dev/null && break
  sleep 0.2
done
answer=$(curl -fsS --max-time 5 localhost:18080/v1/streams -H 'content-type: application/json' \
  -d '{"account_id":"acct-42","device_id":"tv-livingroom","plan":"standard"}')
echo "  $answer"
grep -q '"stream_id"' <<<"$answer" || { echo "kind-quickstart: the play was not granted" >&2; exit 1; }
echo "== 6. the chart's own test"
helm test screenlimit -n screenlimit-system --timeout 120s
echo "== 7. clean up"
kubectl delete -n video -f examples/dev.yaml --wait --timeout=120s
helm uninstall screenlimit -n screenlimit-system --wait --timeout 120s
echo "== kind quickstart OK"
