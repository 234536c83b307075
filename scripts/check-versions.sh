#!/usr/bin/env bash
# One version, one place: the workspace's version (Cargo.toml [workspace.package]) is every
# crate's, the JS client library's package, the chart's `version` and `appVersion`, and the tag
# of every screenlimit image named in the tree (the CRD's defaults, Dockerfiles, docs, examples). Fails naming each place that drifted.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=lib/version.sh
source scripts/lib/version.sh
version=$(product_version)
echo "== versions: everything at $version"

python3 - "$version" "$IMAGE_REPOSITORY_PREFIX" <<'PY'
import json, re, subprocess, sys
version, prefix = sys.argv[1], sys.argv[2]
drift = []

meta = json.loads(subprocess.run(
    ["cargo", "metadata", "--format-version", "1", "--no-deps", "--locked"],
    check=True, capture_output=True, text=True).stdout)
for package in meta["packages"]:
    if package["version"] != version:
        drift.append(f"crate {package['name']}: {package['version']} (use version.workspace = true)")

chart = open("charts/screenlimit/Chart.yaml").read()
for field in ("version", "appVersion"):
    m = re.search(rf'^{field}:\s*"?([^"\s]+)"?\s*$', chart, re.M)
    if not m or m.group(1) != version:
        drift.append(f"charts/screenlimit/Chart.yaml {field}: {m.group(1) if m else 'missing'}")

tracked = subprocess.run(["git", "ls-files"], check=True, capture_output=True, text=True).stdout.split()
image = re.compile(re.escape(prefix) + r"/([a-z-]+):([0-9][0-9A-Za-z.+-]*)")
for path in tracked:
    if path.endswith((".lock", ".png", ".svg")):
        continue
    try:
        text = open(path, encoding="utf-8").read()
    except (UnicodeDecodeError, IsADirectoryError, FileNotFoundError):
        continue
    for n, line in enumerate(text.splitlines(), 1):
        for m in image.finditer(line):
            if m.group(2) != version:
                drift.append(f"{path}:{n}: {m.group(0)}")

# The JS client library ships with the same version (clients/js/package.json and its lock).
for path in ("clients/js/package.json", "clients/js/package-lock.json"):
    js = json.load(open(path))
    if js.get("version") != version:
        drift.append(f"{path} version: {js.get('version')}")

if drift:
    print(f"versions drifted from the workspace's {version}:", file=sys.stderr)
    for d in drift:
        print("  " + d, file=sys.stderr)
    sys.exit(1)
PY
