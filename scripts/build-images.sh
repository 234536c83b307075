#!/usr/bin/env bash
# Builds the three images (limiter, admin-ui, operator) as OCI archives under target/images/,
# tagged ghcr.io/screenlimit/<name>:<version> (the workspace's one version, scripts/lib/version.sh).
# Load one with `kind load image-archive`, `docker load -i` or `skopeo copy oci-archive:...`.
#
# usage: scripts/build-images.sh [--builder auto|docker|podman|buildah] [--out DIR]
#
# The builder is whatever the machine has (auto): a Docker or Podman engine builds the
# Dockerfiles under docker/ (they pull rust and distroless images); else buildah (Debian's package,
# no daemon, nothing pulled) assembles each image FROM scratch from this machine's release build:
# the binary, the shared libraries it links (ldd), a CA bundle and an /etc/passwd line for the
# non-root uid 65532, and nothing else (no shell). The limiter image also carries the Redis module
# (/usr/lib/screenlimit/screenlimit_redis_module.so), which the operator's Redis pods load.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=lib/version.sh
source scripts/lib/version.sh

builder=auto
out=target/images
while (($#)); do
  case $1 in
    --builder) builder=${2:?--builder needs a value}; shift 2 ;;
    --out) out=${2:?--out needs a directory}; shift 2 ;;
    -h|--help) sed -n '2,13p' "$0"; exit 0 ;;
    *) echo "build-images: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done

version=$(product_version)
revision=$(git rev-parse HEAD 2>/dev/null || echo unknown)
source_url=https://github.com/screenlimit/screenlimit
mkdir -p "$out"

engine_works() { command -v "$1" >/dev/null && "$1" info >/dev/null 2>&1; }
if [[ $builder == auto ]]; then
  if engine_works docker; then builder=docker
  elif engine_works podman; then builder=podman
  elif command -v buildah >/dev/null; then builder=buildah
  else
    echo "build-images: no image builder here: install Docker, Podman or buildah (apt-get install buildah)" >&2
    exit 1
  fi
fi
echo "== images: $version with $builder into $out/"

# What each image runs and where it listens (the operator's health and metrics port).
declare -A binary=([limiter]=screenlimit-limiter [admin-ui]=screenlimit-admin-ui [operator]=screenlimit-operator)
declare -A port=([limiter]=8080 [admin-ui]=8081 [operator]=8080)
declare -A title=(
  [limiter]="screenlimit limiter: the concurrent-stream API"
  [admin-ui]="screenlimit admin-ui: the support dashboard"
  [operator]="screenlimit operator: the StreamLimiter controller"
)

archive_of() { echo "$out/$1-$version.oci.tar"; }

build_with_engine() {
  local engine=$1 name ref
  for name in "${IMAGE_NAMES[@]}"; do
    ref=$IMAGE_REPOSITORY_PREFIX/$name:$version
    "$engine" build -f "docker/$name.Dockerfile" -t "$ref" \
      --label "org.opencontainers.image.version=$version" \
      --label "org.opencontainers.image.revision=$revision" .
    rm -f "$(archive_of "$name")"
    if [[ $engine == podman ]]; then
      podman save --format oci-archive -o "$(archive_of "$name")" "$ref"
    else
      docker save -o "$(archive_of "$name")" "$ref"
    fi
    echo "  $ref -> $(archive_of "$name")"
  done
}

# A root filesystem for `name` under $1: the binary, what it links, a CA bundle, the user.
assemble_rootfs() {
  local root=$1 name=$2 target=${CARGO_TARGET_DIR:-target}/release
  local bin=$target/${binary[$name]}
  # Debug sections stripped (a tenth of the size; symbols stay, so backtraces name functions).
  install -d "$root/usr/local/bin"
  strip --strip-debug -o "$root/usr/local/bin/${binary[$name]}" "$bin"
  chmod 0755 "$root/usr/local/bin/${binary[$name]}"
  local libs=("$bin")
  if [[ $name == limiter ]]; then
    install -d "$root/usr/lib/screenlimit"
    strip --strip-debug -o "$root/usr/lib/screenlimit/screenlimit_redis_module.so" \
      "$target/libscreenlimit_redis_module.so"
    chmod 0755 "$root/usr/lib/screenlimit/screenlimit_redis_module.so"
  fi
  # Shared libraries (and the dynamic loader) by their real paths, symlinks resolved.
  local lib
  for lib in $(ldd "${libs[@]}" | grep -oE '/[^ ]+\.so[^ ]*' | sort -u); do
    mkdir -p "$root$(dirname "$lib")"
    cp -L "$lib" "$root$lib"
  done
  install -D -m 0644 /etc/ssl/certs/ca-certificates.crt "$root/etc/ssl/certs/ca-certificates.crt"
  install -d -m 0755 "$root/etc"
  echo "screenlimit:x:65532:65532:screenlimit:/nonexistent:/sbin/nologin" > "$root/etc/passwd"
  echo "screenlimit:x:65532:" > "$root/etc/group"
  chmod 0644 "$root/etc/passwd" "$root/etc/group"
}

build_with_buildah() {
  [[ -r /etc/ssl/certs/ca-certificates.crt ]] || {
    echo "build-images: /etc/ssl/certs/ca-certificates.crt missing (apt-get install ca-certificates)" >&2
    exit 1
  }
  echo "== cargo build --release (the three programs and the Redis module)"
  cargo build --release --locked -p screenlimit-limiter -p screenlimit-admin-ui \
    -p screenlimit-operator -p screenlimit-redis-module \
    --bin screenlimit-limiter --bin screenlimit-admin-ui --bin screenlimit-operator --lib
  # A storage of this run's own, gone at exit: nothing left in /var/lib/containers.
  local work
  work=$(mktemp -d)
  trap 'rm -rf "$work"' RETURN
  local bah=(buildah --root "$work/storage" --runroot "$work/run" --storage-driver vfs)
  local name ref ctr
  for name in "${IMAGE_NAMES[@]}"; do
    ref=$IMAGE_REPOSITORY_PREFIX/$name:$version
    assemble_rootfs "$work/rootfs-$name" "$name"
    ctr=$("${bah[@]}" from --name "screenlimit-$name" scratch)
    "${bah[@]}" copy "$ctr" "$work/rootfs-$name/" / >/dev/null
    "${bah[@]}" config \
      --entrypoint "[\"/usr/local/bin/${binary[$name]}\"]" --cmd '' \
      --user 65532:65532 --port "${port[$name]}/tcp" --workingdir / \
      --os linux --arch "$(go_arch)" \
      --label "org.opencontainers.image.title=${title[$name]}" \
      --label "org.opencontainers.image.source=$source_url" \
      --label "org.opencontainers.image.version=$version" \
      --label "org.opencontainers.image.revision=$revision" \
      --label "org.opencontainers.image.licenses=Apache-2.0" \
      "$ctr"
    rm -f "$(archive_of "$name")"
    "${bah[@]}" commit --quiet --format oci --rm "$ctr" \
      "oci-archive:$(archive_of "$name"):$ref" >/dev/null
    echo "  $ref -> $(archive_of "$name") ($(du -h "$(archive_of "$name")" | cut -f1))"
  done
}

go_arch() {
  case $(uname -m) in
    x86_64) echo amd64 ;;
    aarch64) echo arm64 ;;
    *) uname -m ;;
  esac
}

case $builder in
  docker|podman) build_with_engine "$builder" ;;
  buildah) build_with_buildah ;;
  *) echo "build-images: --builder must be auto, docker, podman or buildah, not $builder" >&2; exit 2 ;;
esac
