#!/usr/bin/env bash
# Valkey 8, for the tests that run the Lua scripts and the screenlimit module on it
# (limiter/tests/conformance.rs, the `valkey` backends). Debian 12 ships it only in
# bookworm-backports: its two packages are fetched from there with apt's own client (a private
# source list and package lists, so the machine's apt setup is left as it was), unpacked into
# /opt/valkey (no service is started, the machine's own Redis is left alone), and the server
# linked as /usr/local/bin/valkey-server (the tests take it from VALKEY_SERVER_BIN, else there).
set -euo pipefail

version=8.0.1+dfsg1-1~bpo12+1
target=/opt/valkey
if [[ -x /usr/local/bin/valkey-server ]] && /usr/local/bin/valkey-server --version | grep -q 'v=8\.'; then
  exit 0
fi
echo "install-valkey: fetching valkey-server $version from bookworm-backports"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/lists/partial" "$work/cache/archives/partial"
cat >"$work/backports.sources" <<SOURCES
Types: deb
URIs: http://deb.debian.org/debian
Suites: bookworm-backports
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SOURCES
apt_private=(
  -o "Dir::Etc::sourcelist=$work/backports.sources"
  -o Dir::Etc::sourceparts=/nonexistent
  -o "Dir::State::Lists=$work/lists"
  -o "Dir::Cache=$work/cache"
  -o APT::Sandbox::User=root
)
apt-get "${apt_private[@]}" update -qq
(cd "$work" && apt-get "${apt_private[@]}" download -qq \
  "valkey-server=$version" "valkey-tools=$version")
sudo_cmd=()
[[ $(id -u) -eq 0 ]] || sudo_cmd=(sudo)
"${sudo_cmd[@]}" rm -rf "$target"
"${sudo_cmd[@]}" mkdir -p "$target"
for deb in "$work"/valkey-*.deb; do
  "${sudo_cmd[@]}" dpkg-deb -x "$deb" "$target"
done
# valkey-server is a link to the one binary, which picks its role by its name.
"${sudo_cmd[@]}" ln -sf "$target/usr/bin/valkey-server" /usr/local/bin/valkey-server
/usr/local/bin/valkey-server --version
