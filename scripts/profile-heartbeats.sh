#!/usr/bin/env bash
# profile-heartbeats.sh: where a loaded limiter's CPU goes per heartbeat.
# One limiter lane (`threads: 1`) against its own throwaway Redis, heartbeats open loop at RATE/s
# (HTTP/1.1 keep-alive, the default renewal window), `perf record` of the limiter for 10 s of the
# measured window; then the stacks folded, a flame graph (SVG) and the share of each part of the
# work. Needs perf; installs inferno (`cargo install inferno`) when it is missing.
# Environment: RATE (20000), SECS (40: the measured window), OUT (target/bench-runs/profile-<time>).
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
RATE=${RATE:-20000}
SECS=${SECS:-40}
OUT=${OUT:-target/bench-runs/profile-$(date -u +%Y%m%dT%H%M%SZ)}
mkdir -p "$OUT"
command -v perf >/dev/null || { echo "profile-heartbeats: perf is not installed" >&2; exit 1; }
command -v inferno-flamegraph >/dev/null || cargo install --locked inferno
cargo build --release -q -p screenlimit-limiter -p screenlimit-bench

# Ten seconds of heartbeats per lease: RATE/s needs RATE × 10 leases.
target/release/screenlimit-loadgen steady --spawn --leases $((RATE * 10)) \
  --heartbeat-interval 10s --ttl 30s --play-rate 0 --checks-per-sec 0 --duration "${SECS}s" \
  --connections 512 --load-in-flight 32 --limiter-threads 1 --no-progress \
  --json "$OUT/steady.json" >"$OUT/steady.txt" 2>&1 &
GEN=$!
trap 'kill $GEN 2>/dev/null || true' EXIT
# The population loads at about 25,000 plays/s; record from about ten seconds into the window.
sleep $((RATE * 10 / 25000 + 12))
LPID=$(pgrep -n -f 'target/release/screenlimit-limiter')
perf record -F 999 -g --call-graph dwarf,16384 -p "$LPID" -o "$OUT/perf.data" -- sleep 10 \
  2>"$OUT/perf.log"
wait "$GEN" || true
trap - EXIT
grep -E '^heartbeat|costs' "$OUT/steady.txt"

perf script -i "$OUT/perf.data" 2>/dev/null | inferno-collapse-perf >"$OUT/stacks.folded"
inferno-flamegraph --minwidth 0.4 --width 1400 \
  --title "screenlimit-limiter: one lane at $RATE heartbeats/s, open loop (HTTP/1.1 keep-alive, renewal window 20 ms)" \
  <"$OUT/stacks.folded" >"$OUT/flamegraph.svg"

# Each sample goes to the part of the work its innermost recognised frame belongs to.
python3 - "$OUT/stacks.folded" <<'EOF' | tee "$OUT/parts.txt"
import sys
parts = [
    ("write the answer: writev (kernel; on loopback also the receiver's TCP work)", ["writev"]),
    ("read requests: read (kernel)", ["__libc_read", "__GI___libc_read", "recvfrom"]),
    ("wait and wake: epoll_wait, the scheduler", ["epoll_wait", "schedule_hrtimeout", "finish_task_switch"]),
    ("Redis client: redis-rs connection driver and reply parser", ["redis::"]),
    ("hyper: request parse, response encode", ["Http1Transaction>::parse", "Http1Transaction>::encode"]),
    ("allocation (mimalloc)", ["_mi_", "mi_free", "mi_malloc"]),
    ("the limiter's own code: API, service, store queue, ids, overload, metrics",
     ["screenlimit_limiter::api", "screenlimit_limiter::service", "screenlimit_limiter::store",
      "screenlimit_limiter::ids", "screenlimit_limiter::overload", "screenlimit_limiter::metrics"]),
]
rest = "the rest: Tokio, axum's routing and layers, tower-http's trace, futures"
total, shares = 0, {name: 0 for name, _ in parts} | {rest: 0}
for line in open(sys.argv[1]):
    stack, n = line.rsplit(" ", 1)
    total += int(n)
    hit = next((name for frame in reversed(stack.split(";"))
                for name, keys in parts if any(k in frame for k in keys)), rest)
    shares[hit] += int(n)
for name, n in shares.items():
    print(f"{100 * n / max(total, 1):5.1f} %  {name}")
EOF
echo "flame graph: $OUT/flamegraph.svg"
