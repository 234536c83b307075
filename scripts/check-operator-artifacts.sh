#!/usr/bin/env bash
# Operator artifacts are fresh and the Helm chart renders:
#  (a) regenerates crds/ (and the chart's copy) from the Rust types and fails on any difference;
#  (b) runs `helm lint` and `helm template` with Helm's own engine (PyPI helm-python-sdk) in a
#      virtualenv under target/, on the default values and on the example/namespaced variants.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=lib/venv.sh
source scripts/lib/venv.sh
# shellcheck source=lib/version.sh
source scripts/lib/version.sh

echo "== operator: crds/ fresh"
cargo run --quiet --locked -p screenlimit-operator --bin crdgen > crds/streamlimiter.yaml
cp crds/streamlimiter.yaml charts/screenlimit/crds/streamlimiter.yaml
if ! git diff --exit-code -- crds/ charts/screenlimit/crds/; then
  echo "crds/ is stale: commit the regenerated files (cargo run -p screenlimit-operator --bin crdgen > crds/streamlimiter.yaml)" >&2
  exit 1
fi
untracked=$(git ls-files --others --exclude-standard -- crds/ charts/screenlimit/crds/)
if [[ -n $untracked ]]; then
  echo "crds/: untracked generated files, commit them: $untracked" >&2
  exit 1
fi

echo "== operator: helm lint + helm template (helm-python-sdk)"
venv=target/helm-venv
if [[ ! -x $venv/bin/python ]] || ! "$venv/bin/python" -c 'import helm_python' 2>/dev/null; then
  make_venv "$venv"
  "$venv/bin/pip" install --quiet --disable-pip-version-check helm-python-sdk==0.2.2 PyYAML
fi

SCREENLIMIT_VERSION=$(product_version) "$venv/bin/python" - <<'PY'
import json
import os
import re
import subprocess
import sys
import tempfile

import helm_python
import yaml

chart = "charts/screenlimit"
version = os.environ["SCREENLIMIT_VERSION"]
failed = False

lint = helm_python.lint(chart)
for m in lint.get("messages", []):
    print("  lint:", m)
if lint.get("errors"):
    print("helm lint errors:", lint["errors"], file=sys.stderr)
    failed = True

def render(values):
    out = helm_python.Chart.load(chart).render(values, name="rel", namespace="screenlimit-system")
    docs = []
    for path, text in out.items():
        if path.endswith("NOTES.txt"):
            continue
        for doc in yaml.safe_load_all(text):
            if doc:
                docs.append(doc)
    return docs

def kinds(docs):
    return sorted(f"{d['kind']}/{d['metadata']['name']}" for d in docs)

variants = {
    "default": ({}, ["ClusterRole/rel-screenlimit", "ClusterRoleBinding/rel-screenlimit",
                     "Deployment/rel-screenlimit", "Role/rel-screenlimit-leader-election",
                     "RoleBinding/rel-screenlimit-leader-election", "Service/rel-screenlimit-metrics",
                     "ServiceAccount/rel-screenlimit", "Pod/rel-screenlimit-test"]),
    "example+namespaced": ({"example": {"enabled": True}, "watchNamespace": "video", "leaderElection": False},
                           ["Deployment/rel-screenlimit", "Role/rel-screenlimit",
                            "Role/rel-screenlimit-leader-election", "RoleBinding/rel-screenlimit",
                            "RoleBinding/rel-screenlimit-leader-election", "Service/rel-screenlimit-metrics",
                            "ServiceAccount/rel-screenlimit", "StreamLimiter/screenlimit-demo",
                            "Pod/rel-screenlimit-test"]),
    "monitoring+knobs": ({"metrics": {"serviceMonitor": {"enabled": True, "labels": {"release": "kps"}},
                                      "prometheusRule": {"enabled": True, "labels": {"release": "kps"}}},
                          "commonLabels": {"cost-center": "video"}, "podLabels": {"team": "play"},
                          "priorityClassName": "screenlimit-critical",
                          "topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone",
                                                         "whenUnsatisfiable": "ScheduleAnyway"}]},
                         ["ClusterRole/rel-screenlimit", "ClusterRoleBinding/rel-screenlimit",
                          "Deployment/rel-screenlimit", "Role/rel-screenlimit-leader-election",
                          "RoleBinding/rel-screenlimit-leader-election", "Service/rel-screenlimit-metrics",
                          "ServiceAccount/rel-screenlimit", "ServiceMonitor/rel-screenlimit",
                          "PrometheusRule/rel-screenlimit", "Pod/rel-screenlimit-test"]),
    "grafana": ({"grafanaDashboard": {"enabled": True, "annotations": {"grafana_folder": "screenlimit"}}},
                ["ClusterRole/rel-screenlimit", "ClusterRoleBinding/rel-screenlimit",
                 "Deployment/rel-screenlimit", "Role/rel-screenlimit-leader-election",
                 "RoleBinding/rel-screenlimit-leader-election", "Service/rel-screenlimit-metrics",
                 "ServiceAccount/rel-screenlimit", "Pod/rel-screenlimit-test",
                 "ConfigMap/rel-screenlimit-dashboard"]),
}
dashboards = []
for name, (values, expected) in variants.items():
    docs = render(values)
    got = kinds(docs)
    if got != sorted(expected):
        print(f"helm template ({name}): got {got}, expected {sorted(expected)}", file=sys.stderr)
        failed = True
    for d in docs:
        if d["kind"] == "Deployment":
            c = d["spec"]["template"]["spec"]["containers"][0]
            assert c["image"] == f"ghcr.io/screenlimit/operator:{version}", c["image"]
            args = c.get("args") or []
            assert ("--no-leader-election" in args) == (values.get("leaderElection") is False), args
        if d["kind"] in ("ClusterRole", "Role") and not d["metadata"]["name"].endswith("leader-election"):
            for rule in d["rules"]:
                assert "*" not in rule["verbs"] and "*" not in rule["resources"], rule
                if "secrets" in rule["resources"]:
                    assert rule["verbs"] == ["create"], rule
            # The operator owns and prunes the NetworkPolicies of each StreamLimiter.
            assert any("networkpolicies" in r["resources"] and "delete" in r["verbs"]
                       for r in d["rules"]), d["rules"]
            # ... and the ServiceMonitor and PrometheusRule of spec.monitoring.
            for kind in ("servicemonitors", "prometheusrules"):
                assert any(r["apiGroups"] == ["monitoring.coreos.com"] and kind in r["resources"]
                           and {"list", "watch", "patch", "delete"} <= set(r["verbs"])
                           for r in d["rules"]), (kind, d["rules"])
    for d in docs:
        for key, value in values.get("commonLabels", {}).items():
            assert d["metadata"]["labels"].get(key) == value, (d["kind"], d["metadata"])
        if d["kind"] == "Deployment":
            pod = d["spec"]["template"]
            for key, value in values.get("podLabels", {}).items():
                assert pod["metadata"]["labels"][key] == value, pod["metadata"]
            assert pod["spec"].get("priorityClassName") == values.get("priorityClassName"), pod["spec"]
            assert pod["spec"].get("topologySpreadConstraints") == values.get("topologySpreadConstraints"), pod["spec"]
            assert pod["spec"]["securityContext"]["runAsNonRoot"] is True
        if d["kind"] == "ServiceMonitor":
            assert d["metadata"]["labels"]["release"] == "kps", d["metadata"]
            assert d["spec"]["endpoints"][0]["port"] == "http", d["spec"]
        if d["kind"] == "PrometheusRule":
            # The operator's own alert, once per install (alerts/operator.yaml, promtool-tested
            # in operator/tests/monitoring.rs), with its template text left for Prometheus.
            assert d["metadata"]["labels"]["release"] == "kps", d["metadata"]
            rules = [r for g in d["spec"]["groups"] for r in g["rules"]]
            assert [r["alert"] for r in rules] == ["ScreenlimitOperatorReconcileFailing"], rules
            assert "{{ $labels.namespace }}" in rules[0]["annotations"]["summary"], rules[0]
        if d["kind"] == "Pod":
            assert d["metadata"]["annotations"]["helm.sh/hook"] == "test", d["metadata"]
        if d["kind"] == "StreamLimiter":
            # The example's spec comes from values.yaml as written, enforcement included.
            assert d["spec"]["enforcement"] == {"mode": "enforce"}, d["spec"]
        if d["kind"] == "ConfigMap" and d["metadata"]["name"].endswith("-dashboard"):
            assert d["metadata"]["labels"]["grafana_dashboard"] == "1", d["metadata"]
            dashboards.append(json.loads(d["data"]["screenlimit-limiter.json"]))
    print(f"  template ({name}): {len(docs)} objects OK")

# values.schema.json: bad values are refused with a message that names them.
for bad, says in [({"replicaCount": "two"}, "/replicaCount"), ({"metrcis": {}}, "metrcis"),
                  ({"metrics": {"serviceMonitor": {"interval": "often"}}}, "/metrics/serviceMonitor/interval"),
                  ({"image": {"pullPolicy": "Sometimes"}}, "/image/pullPolicy")]:
    try:
        render(bad)
    except Exception as e:
        if says not in str(e):
            print(f"schema refusal of {bad} does not name {says}: {e}", file=sys.stderr)
            failed = True
    else:
        print(f"values.schema.json accepted {bad}", file=sys.stderr)
        failed = True
print("  values.schema.json refuses bad values OK")

# The dashboard: every query is valid PromQL (promtool, as recording rules with the dashboard's
# variables filled in) and names only metrics the limiter exports (limiter/src/metrics.rs).
assert len(dashboards) == 1, dashboards
exported = set(re.findall(r'(?:Opts::new|IntGauge::new|IntCounter::new)\(\s*"([a-z_]+)"',
                          open("limiter/src/metrics.rs").read()))
rules = []
for panel in dashboards[0]["panels"]:
    for target in panel["targets"]:
        expr = (target["expr"].replace("$__rate_interval", "5m")
                .replace("$namespace", "video").replace("$job", "demo-limiter"))
        for name in re.findall(r"screenlimit_([a-z_]+)", expr):
            name = re.sub(r"_(bucket|sum|count)$", "", name)
            if name not in exported:
                print(f"dashboard panel {panel['title']!r} queries screenlimit_{name}, which the limiter does not export", file=sys.stderr)
                failed = True
        rules.append({"record": f"dashboard:panel_{panel['id']}_{target['refId']}", "expr": expr})
with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as f:
    yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}, f)
checked = subprocess.run(["promtool", "check", "rules", f.name], capture_output=True, text=True)
if checked.returncode != 0:
    print("dashboard queries are not valid PromQL:", checked.stdout, checked.stderr, file=sys.stderr)
    failed = True
else:
    print(f"  grafana dashboard: {len(rules)} queries valid (promtool), metrics exported")
    # The degraded share divides like by like: with heartbeats degraded too (a store outage
    # degrades both), it is degraded decisions over all decisions, never above 100 %.
    with open(f.name.replace(".yaml", ".test.yaml"), "w") as t:
        scope = 'namespace="video",job="demo-limiter"'
        yaml.safe_dump({"rule_files": [f.name], "evaluation_interval": "1m", "tests": [{
            "interval": "1m",
            "input_series": [
                {"series": f'screenlimit_decisions_total{{{scope},decision="{k}"}}', "values": f"0+{v}x20"}
                for k, v in [("allowed", 90), ("denied", 10), ("degraded", 400), ("renewed", 1500)]],
            "promql_expr_test": [{"expr": "round(1000 * dashboard:panel_2_A)", "eval_time": "10m",
                                  "exp_samples": [{"labels": "{}", "value": 200}]}],
        }]}, t)
    tested = subprocess.run(["promtool", "test", "rules", t.name], capture_output=True, text=True)
    os.unlink(t.name)
    if tested.returncode != 0:
        print("the degraded-share panel does not divide like by like:", tested.stdout, tested.stderr, file=sys.stderr)
        failed = True
    else:
        print("  grafana dashboard: the degraded share divides like by like (promtool test)")

crd = yaml.safe_load(open(f"{chart}/crds/streamlimiter.yaml"))
assert crd["metadata"]["name"] == "streamlimiters.screenlimit.io"
spec = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
assert "planSource" in spec and "sentinel" in spec["redis"]["properties"], "CRD lacks planSource / redis.sentinel"
assert "deviceCaps" in spec["plans"]["items"]["properties"], "CRD lacks plans[].deviceCaps"
assert "enforcement" in spec and "enforcement" in spec["plans"]["items"]["properties"], \
    "CRD lacks spec.enforcement / plans[].enforcement"
assert {"serviceMonitor", "prometheusRule"} <= set(spec["monitoring"]["properties"]), "CRD lacks spec.monitoring"
assert "peers" in spec["regions"]["properties"], "CRD lacks spec.regions.peers"
for example in ("examples/dev.yaml", "examples/production.yaml"):
    for doc in yaml.safe_load_all(open(example)):
        if doc and doc.get("kind") == "StreamLimiter":
            assert doc["apiVersion"] == "screenlimit.io/v1alpha1", example
sys.exit(1 if failed else 0)
PY
echo "== operator artifacts OK"
