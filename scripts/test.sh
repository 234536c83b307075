#!/usr/bin/env bash
# The whole test suite, on a fresh machine: install what the tests need, check formatting and
# lints, the generated artifacts, the one version, the workflows, the supply-chain policy and the
# images, build the JS client library and run its unit tests, fuzz the HTTP API against its OpenAPI
# document (schemathesis, both stores), then run every test (unit, conformance on both stores,
# HTTP contract, race, fault tests, the JS library in headless Chromium).
set -euo pipefail
cd "$(dirname "$0")/.."
# One clean build, run once: incremental caches would only double the workspace's share of the
# target directory on a disk the run may share.
export CARGO_INCREMENTAL="${CARGO_INCREMENTAL:-0}"

scripts/install-test-deps.sh
echo "== cargo fmt --check"
cargo fmt --all -- --check
echo "== cargo clippy -D warnings"
cargo clippy --workspace --all-targets --locked -- -D warnings
scripts/check-module-cycles.py
scripts/check-docs.py
scripts/check-operator-artifacts.sh
scripts/check-versions.sh
scripts/lint-workflows.sh
scripts/check-supply-chain.sh
# The three images, built (release binaries, then buildah or a Docker/Podman engine) and checked
# from outside: config, file list, a run on a read-only root as their user.
scripts/build-images.sh
scripts/check-images.sh
# The JS client library (clients/js): built with tsc (its browser test in tests/tests/js_player.rs
# loads the build) and its unit tests on Node's test runner.
echo "== clients/js: tsc build and unit tests"
npm run --prefix clients/js --silent build
npm test --prefix clients/js --silent
# Before nextest: the fuzz run takes about a minute, so a broken contract shows early, and the
# nextest summary stays the last thing this script prints (CI reads the runner's closing lines).
scripts/schemathesis.sh
# The limiter's tests that run Redis with the screenlimit module load this file (a workspace test
# build does not necessarily leave the cdylib where they look; without the variable each test
# process builds it itself, limiter/tests/support/mod.rs `module_path`).
echo "== the screenlimit Redis module, for the tests that load it"
cargo build --locked -p screenlimit-redis-module
target_dir=$(cargo metadata --format-version 1 --no-deps | sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')
export SCREENLIMIT_MODULE_SO="$target_dir/debug/libscreenlimit_redis_module.so"
test -f "$SCREENLIMIT_MODULE_SO"
echo "== cargo nextest run"
cargo nextest run --workspace --locked --profile "${NEXTEST_PROFILE:-default}"
