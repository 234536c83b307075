# shellcheck shell=bash
# Sourced by the scripts that name the product's version: the workspace's one version
# ([workspace.package] version in Cargo.toml), which every crate, the chart and the images carry.
product_version() {
  python3 -c 'import tomllib; print(tomllib.load(open("Cargo.toml", "rb"))["workspace"]["package"]["version"])'
}
# The images this tree builds, one per program, as the CRD's defaults and the chart name them.
# shellcheck disable=SC2034 # read by the scripts that source this file
IMAGE_REPOSITORY_PREFIX=ghcr.io/screenlimit
# shellcheck disable=SC2034
IMAGE_NAMES=(limiter admin-ui operator)
