#!/usr/bin/env bash
# The supply-chain policy of deny.toml: licences, banned crates and where crates come from
# (`cargo deny check licenses bans sources`; scripts/install-test-deps.sh installs cargo-deny).
set -euo pipefail
cd "$(dirname "$0")/.."
command -v cargo-deny >/dev/null || { echo "check-supply-chain: cargo-deny missing (scripts/install-test-deps.sh)" >&2; exit 1; }
echo "== cargo deny check licenses bans sources"
# An absolute manifest path: cargo-deny runs cargo from the manifest's directory.
cargo deny --manifest-path "$PWD/Cargo.toml" --locked check --hide-inclusion-graph \
  licenses bans sources
