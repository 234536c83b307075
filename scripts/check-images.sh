#!/usr/bin/env bash
# Checks each image scripts/build-images.sh wrote under target/images/, from outside:
#  - its config: entrypoint, the non-root user, the exposed port, the OCI labels, its tag;
#  - its files: the binary, its shared libraries, a CA bundle, /etc/passwd and /etc/group (and, in
#    the limiter image, the Redis module), nothing else: no shell, no package manager;
#  - that it runs as a pod would run it: unpacked, its entrypoint started as the image's user on a
#    read-only root in a mount namespace of its own; the limiter answers /readyz, the dashboard
#    its sign-in page, the operator --help.
# And that the chart and the CRD name exactly these images.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=lib/version.sh
source scripts/lib/version.sh
version=$(product_version)
dir=${1:-target/images}
for tool in skopeo umoci unshare curl redis-server redis-cli; do
  command -v "$tool" >/dev/null || { echo "check-images: $tool missing (scripts/install-test-deps.sh)" >&2; exit 1; }
done
work=$(mktemp -d)
pids=()
# Stops a process started here and, for an image's run, the entrypoint under it: `unshare
# --fork` ignores SIGTERM while it waits for its child, so the child is stopped first.
stop() {
  pkill -TERM -P "$1" 2>/dev/null || true
  kill "$1" 2>/dev/null || true
}
cleanup() {
  local pid
  for pid in "${pids[@]}"; do stop "$pid"; done
  rm -rf "$work"
}
trap cleanup EXIT
fail() { echo "check-images: $*" >&2; exit 1; }

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# Starts the image's entrypoint from its unpacked root `rootfs`, read-only, as uid/gid 65532,
# with `args` after it; the process id goes in `pids`.
run_image() {
  local rootfs=$1; shift
  local entrypoint=$1; shift
  # shellcheck disable=SC2016 # the inner shell expands its own arguments
  unshare --mount --fork -- sh -c '
    root=$1; shift
    mount --bind "$root" "$root" && mount -o remount,bind,ro "$root" || exit 97
    if [ -n "${WRITABLE:-}" ]; then mount --bind "${WRITABLE%%:*}" "$root${WRITABLE#*:}" || exit 98; fi
    mount -t proc proc "$root/proc" 2>/dev/null || true
    exec chroot --userspec=65532:65532 "$root" "$@"
  ' run-image "$rootfs" "$entrypoint" "$@" >"$work/run.log" 2>&1 &
  pids+=($!)
}

# The running entrypoint is uid 65532 and its root is mounted read-only, as the kernel says.
check_process() {
  local binary=$1 pid uid
  pid=$(pgrep -n -f "^/usr/local/bin/$binary") || fail "no $binary process"
  uid=$(awk '/^Uid:/ {print $2}' "/proc/$pid/status")
  [[ $uid == 65532 ]] || fail "$binary runs as uid $uid, not 65532"
  awk '$5 == "/" {print $6}' "/proc/$pid/mountinfo" | grep -qE '(^|,)ro(,|$)' \
    || fail "$binary's root is not read-only: $(awk '$5 == "/"' "/proc/$pid/mountinfo")"
}

wait_for_http() {
  local url=$1 pattern=$2 deadline=$((SECONDS + 20)) body
  while ((SECONDS < deadline)); do
    if body=$(curl -fsS --max-time 2 "$url" 2>/dev/null) && [[ $body == *"$pattern"* ]]; then
      return 0
    fi
    sleep 0.2
  done
  echo "--- its output:" >&2; cat "$work/run.log" >&2
  fail "$url never answered with '$pattern'"
}

for name in "${IMAGE_NAMES[@]}"; do
  archive=$dir/$name-$version.oci.tar
  ref=$IMAGE_REPOSITORY_PREFIX/$name:$version
  [[ -f $archive ]] || fail "$archive missing: run scripts/build-images.sh"
  echo "== image $ref"

  skopeo inspect --config "oci-archive:$archive" > "$work/$name.config.json"
  skopeo inspect "oci-archive:$archive" > "$work/$name.inspect.json"
  python3 - "$name" "$version" "$work/$name.config.json" <<'PY'
import json, sys
name, version, path = sys.argv[1:]
binary = {"limiter": "screenlimit-limiter", "admin-ui": "screenlimit-admin-ui", "operator": "screenlimit-operator"}[name]
port = {"limiter": "8080/tcp", "admin-ui": "8081/tcp", "operator": "8080/tcp"}[name]
config = json.load(open(path))["config"]
problems = []
if config.get("Entrypoint") != [f"/usr/local/bin/{binary}"]:
    problems.append(f"entrypoint {config.get('Entrypoint')}")
if config.get("User") != "65532:65532":
    problems.append(f"user {config.get('User')!r} (want the non-root 65532:65532)")
if port not in (config.get("ExposedPorts") or {}):
    problems.append(f"exposed ports {config.get('ExposedPorts')} (want {port})")
labels = config.get("Labels") or {}
for key, want in [("org.opencontainers.image.version", version),
                  ("org.opencontainers.image.source", "https://github.com/screenlimit/screenlimit"),
                  ("org.opencontainers.image.licenses", "Apache-2.0")]:
    if labels.get(key) != want:
        problems.append(f"label {key}={labels.get(key)!r} (want {want!r})")
for key in ("org.opencontainers.image.title", "org.opencontainers.image.revision"):
    if not labels.get(key):
        problems.append(f"label {key} missing")
if problems:
    sys.exit(f"{name}: " + "; ".join(problems))
PY

  # Its files: unpack the one layer set as a runtime would.
  skopeo copy --quiet "oci-archive:$archive" "oci:$work/layout-$name:$version"
  umoci unpack --image "$work/layout-$name:$version" "$work/bundle-$name" >/dev/null
  rootfs=$work/bundle-$name/rootfs
  (cd "$rootfs" && find . -mindepth 1 \( -type f -o -type l \) | sed 's|^\.||' | sort) > "$work/$name.files"
  python3 - "$name" "$work/$name.files" <<'PY'
import re, sys
name, path = sys.argv[1:]
binary = {"limiter": "screenlimit-limiter", "admin-ui": "screenlimit-admin-ui", "operator": "screenlimit-operator"}[name]
files = [line.strip() for line in open(path) if line.strip()]
allowed = [
    re.escape(f"/usr/local/bin/{binary}"),
    r"/etc/passwd", r"/etc/group", r"/etc/ssl/certs/ca-certificates\.crt",
    # shared libraries and the dynamic loader, as ldd names them
    r"/(usr/)?lib(64|32)?(/[a-z0-9_-]+-linux-gnu)?/(ld-linux[^/]*|lib[^/]+\.so(\.[0-9]+)*)",
]
if name == "limiter":
    allowed.append(r"/usr/lib/screenlimit/screenlimit_redis_module\.so")
stray = [f for f in files if not any(re.fullmatch(a, f) for a in allowed)]
missing = [f for f in (f"/usr/local/bin/{binary}", "/etc/passwd", "/etc/ssl/certs/ca-certificates.crt") if f not in files]
if name == "limiter" and "/usr/lib/screenlimit/screenlimit_redis_module.so" not in files:
    missing.append("/usr/lib/screenlimit/screenlimit_redis_module.so")
shells = [f for f in files if re.search(r"/(sh|bash|dash|busybox|apt|dpkg)$", f)]
if stray or missing or shells:
    sys.exit(f"{name}: stray {stray}, missing {missing}, shells {shells}")
print(f"  {len(files)} files: the binary, {sum('.so' in f for f in files)} shared objects, CA bundle, passwd/group")
PY
  mkdir -p "$rootfs/proc"

  # It runs, as the image says, on a read-only root.
  entrypoint=/usr/local/bin/$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["config"]["Entrypoint"][0].rsplit("/",1)[1])' "$work/$name.config.json")
  case $name in
    limiter)
      p=$(free_port)
      SCREENLIMIT_LISTEN=127.0.0.1:$p run_image "$rootfs" "$entrypoint"
      wait_for_http "http://127.0.0.1:$p/readyz" ""
      check_process screenlimit-limiter
      echo "  runs: /readyz answered as uid 65532 on a read-only root"
      stop "${pids[-1]}"
      # The operator's init container: copy-module into a writable directory (an emptyDir
      # there), then the copy loads into redis-server and answers SL.VERSION.
      mkdir -p "$rootfs/opt/screenlimit" "$work/module-out"
      chmod 0777 "$work/module-out"
      WRITABLE="$work/module-out:/opt/screenlimit" run_image "$rootfs" "$entrypoint" copy-module /opt/screenlimit
      wait "${pids[-1]}" || { cat "$work/run.log" >&2; fail "copy-module failed"; }
      module=$work/module-out/screenlimit_redis_module.so
      [[ -s $module ]] || fail "copy-module wrote no $module"
      p=$(free_port)
      redis-server --port "$p" --bind 127.0.0.1 --save '' --appendonly no --dir "$work" \
        --loadmodule "$module" > "$work/redis.log" 2>&1 &
      pids+=($!)
      deadline=$((SECONDS + 10))
      until answer=$(redis-cli -p "$p" SL.VERSION 2>/dev/null) && [[ -n $answer ]]; do
        ((SECONDS < deadline)) || { cat "$work/redis.log" >&2; fail "redis-server did not load the image's module"; }
        sleep 0.1
      done
      [[ $answer =~ ^[0-9]+$ ]] || fail "SL.VERSION answered '$answer'"
      echo "  copy-module: the image's module loads into redis-server (SL.VERSION $answer)"
      ;;
    admin-ui)
      p=$(free_port); q=$(free_port)
      run_image "$rootfs" "$entrypoint" --dev --listen "127.0.0.1:$p" --dev-limiter-listen "127.0.0.1:$q"
      wait_for_http "http://127.0.0.1:$p/sign-in" "password"
      check_process screenlimit-admin-ui
      echo "  runs: the sign-in page answered as uid 65532 on a read-only root"
      ;;
    operator)
      run_image "$rootfs" "$entrypoint" --help
      wait "${pids[-1]}" || { cat "$work/run.log" >&2; fail "operator --help failed"; }
      grep -q -- "--http" "$work/run.log" || { cat "$work/run.log" >&2; fail "operator --help printed no usage"; }
      echo "  runs: --help as uid 65532 on a read-only root"
      ;;
  esac
  for pid in "${pids[@]}"; do stop "$pid"; done
  pids=()
done

echo "== the CRD and the chart name these images"
for name in limiter admin-ui; do
  grep -q "default: $IMAGE_REPOSITORY_PREFIX/$name:$version" crds/streamlimiter.yaml \
    || fail "crds/streamlimiter.yaml's default $name image is not $IMAGE_REPOSITORY_PREFIX/$name:$version"
done
grep -q "^  repository: $IMAGE_REPOSITORY_PREFIX/operator$" charts/screenlimit/values.yaml \
  || fail "charts/screenlimit/values.yaml's image.repository is not $IMAGE_REPOSITORY_PREFIX/operator"
grep -q "^appVersion: \"$version\"" charts/screenlimit/Chart.yaml \
  || fail "the chart's appVersion (the operator's default tag) is not $version"
echo "check-images: all three images as built, run and named"
