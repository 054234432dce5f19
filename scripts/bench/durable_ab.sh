#!/usr/bin/env bash
# Two builds of pfm, alternating, on the 128-connection deposit figure of scripts/bench/durable_bench.sh
# after the checkpoint has started (the state that script's 128-connection run measures): for each
# round and each build, a fresh server, 256 users (main + 2 children each), WARM seconds of
# deposits at 128 connections unmeasured, then raw (examples/raw_append.rs) for DUR seconds, pfm
# for DUR seconds, raw again. Prints pfm's rate, p99 and CPU per deposit, and its ratios against
# the mean of the two raw runs around it. Loopback only; every wrk run is bounded in time.
# Usage: scripts/bench/durable_ab.sh [rounds=4]
# Env: BIN_A, BIN_B (default: target/release/pfm for both), WARM (default 25), DUR (default 10),
# WRK_CPU (core wrk is pinned to, default 1).
set -euo pipefail
cd "$(dirname "$0")/../.."
ROUNDS=${1:-4}
WARM=${WARM:-25}
DUR=${DUR:-10}
WRK_CPU=${WRK_CPU:-1}
command -v wrk >/dev/null || { apt-get update -qq && apt-get install -y -qq wrk; }
# The baselines are examples, built apart (target/examples): an example turns on the tests'
# feature (test-hooks) for every target built with it, and the measured pfm must be the
# release binary as shipped.
cargo build --release --bin pfm >/dev/null
CARGO_TARGET_DIR=target/examples cargo build --release --example raw_append >/dev/null
BIN_A=${BIN_A:-target/release/pfm}
BIN_B=${BIN_B:-$BIN_A}
mkdir -p target/bench-tmp
WORK=$(mktemp -d -p target/bench-tmp ab.XXXXXX)
SECRET=durable-bench-secret-durable-bench-000
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
RAW_PORT=$(free_port)
./target/examples/release/examples/raw_append "$RAW_PORT" "$WORK/raw" & RAW=$!
PFM=
trap 'kill $RAW $PFM 2>/dev/null; wait $RAW $PFM 2>/dev/null; rm -rf "$WORK"' EXIT
python3 scripts/bench/pfm_bench.py raw-lua "$WORK/raw.lua"
TICK=$(getconf CLK_TCK)
# one URL LUA PID DURATION: "req/s p99_ms cpu_us_per_request non2xx" of one wrk run.
one() {
  local c0 c1 out
  c0=$(awk '{print $14+$15}' "/proc/$3/stat")
  out=$(taskset -c "$WRK_CPU" wrk -t1 -c128 -d"$4"s --timeout 10s -s "$2" "$1" 2>&1 | grep '^RESULT') || {
    echo "wrk failed" >&2
    exit 1
  }
  c1=$(awk '{print $14+$15}' "/proc/$3/stat")
  python3 - "$out" "$c0" "$c1" "$TICK" <<'PY'
import sys
d = dict(kv.split("=") for kv in sys.argv[1].split()[1:])
n = max(int(d["requests"]), 1)
cpu = (int(sys.argv[3]) - int(sys.argv[2])) * 1e6 / int(sys.argv[4]) / n
print(f"{float(d['rps']):.0f} {int(d['p99']) / 1000:.2f} {cpu:.1f} {d['non2xx']}")
PY
}
for r in $(seq "$ROUNDS"); do
  for v in A B; do
    bin=$BIN_A
    [ "$v" = B ] && bin=$BIN_B
    port=$(free_port)
    rm -rf "$WORK/pfm"
    JWT_SECRET=$SECRET MAX_REQUESTS=1000000000 RUST_LOG=warn \
      "$bin" --host 127.0.0.1 --port "$port" --data-dir "$WORK/pfm" & PFM=$!
    for _ in $(seq 100); do curl -s -o /dev/null "http://127.0.0.1:$port/__ping__" && break; sleep 0.1; done
    python3 scripts/bench/pfm_bench.py setup "$port" "$SECRET" 256 u tree3 "$WORK/users.json" 2>/dev/null
    python3 scripts/bench/pfm_bench.py lua "$WORK/users.json" 256 "$WORK/many.lua"
    one "http://127.0.0.1:$port/deposit" "$WORK/many.lua" "$PFM" "$WARM" >/dev/null
    a=$(one "http://127.0.0.1:$RAW_PORT/" "$WORK/raw.lua" "$RAW" "$DUR")
    b=$(one "http://127.0.0.1:$port/deposit" "$WORK/many.lua" "$PFM" "$DUR")
    c=$(one "http://127.0.0.1:$RAW_PORT/" "$WORK/raw.lua" "$RAW" "$DUR")
    kill "$PFM"
    wait "$PFM" 2>/dev/null || true
    PFM=
    python3 - "$r" "$v" "$a" "$b" "$c" <<'PY'
import sys
r, v, a, b, c = sys.argv[1:]
a, b, c = ([float(x) for x in s.split()] for s in (a, b, c))
rps, p99 = (a[0] + c[0]) / 2, (a[1] + c[1]) / 2
print(f"round {r} {v}: pfm {b[0]:6.0f}/s p99 {b[1]:6.2f} ms cpu {b[2]:5.1f} us | raw {a[0]:6.0f} {c[0]:6.0f}/s "
      f"p99 {a[1]:.2f} {c[1]:.2f} ms | req/s:raw {b[0] / rps:.2f} p99:raw {b[1] / p99:.2f} non2xx {b[3]:.0f}")
PY
  done
done
