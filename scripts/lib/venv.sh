# shellcheck shell=bash
# Sourced by the scripts that need a Python tool from PyPI (the Helm engine, schemathesis).
# make_venv DIR: a fresh virtualenv at DIR, installing Debian's python3-venv first when the
# machine's Python cannot make one.
make_venv() {
  local venv=$1
  if ! python3 -m venv "$venv" 2>/dev/null; then
    echo "python3 -m venv failed; installing python3-venv from Debian's packages"
    local sudo_cmd=()
    [[ $(id -u) -eq 0 ]] || sudo_cmd=(sudo)
    "${sudo_cmd[@]}" apt-get update -qq
    DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends python3-venv
    rm -rf "$venv"
    python3 -m venv "$venv"
  fi
}
