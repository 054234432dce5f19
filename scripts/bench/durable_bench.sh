#!/usr/bin/env bash
# Durable-write figures for pfm as ratios against the raw baseline (examples/raw_append.rs: hyper +
# a ~400-byte append to one file + one fdatasync shared by every writer waiting), measured in the
# same run: POST /deposit rotating over 256 users (each a tree of main + 2 children at 0.5) at 32
# and 128 connections, then one user's deposits from 1 and from 32 connections; then a check that
# every tree answers 200 and adds up and that the money matches what wrk saw acknowledged.
# Loopback only; every wrk run is bounded in time. Usage: scripts/bench/durable_bench.sh [seconds=10]
# Env: WRK_CPU (core wrk is pinned to, default 1; empty = not pinned), SERVER_CPU (core the
# servers are pinned to, default empty = not pinned), USERS (default 256).
set -euo pipefail
cd "$(dirname "$0")/../.."
DUR=${1:-10}
USERS=${USERS:-256}
WRK_CPU=${WRK_CPU-1}
SERVER_CPU=${SERVER_CPU-}
command -v wrk >/dev/null || { apt-get update -qq && apt-get install -y -qq wrk; }
# The baselines are examples, built apart (target/examples): an example turns on the tests'
# feature (test-hooks) for every target built with it, and the measured pfm must be the
# release binary as shipped.
cargo build --release --bin pfm >/dev/null
CARGO_TARGET_DIR=target/examples cargo build --release --example raw_append >/dev/null
# Both data directories on the disk the project is on (not a tmpfs), so fdatasync is real.
mkdir -p target/bench-tmp
WORK=$(mktemp -d -p target/bench-tmp durable.XXXXXX)
SECRET=durable-bench-secret-durable-bench-000
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
RAW_PORT=$(free_port)
PFM_PORT=$(free_port)
pin_server=()
[ -n "$SERVER_CPU" ] && pin_server=(taskset -c "$SERVER_CPU")
pin_wrk=()
[ -n "$WRK_CPU" ] && pin_wrk=(taskset -c "$WRK_CPU")
"${pin_server[@]}" ./target/examples/release/examples/raw_append "$RAW_PORT" "$WORK/raw" & RAW=$!
JWT_SECRET=$SECRET MAX_REQUESTS=1000000000 RUST_LOG=warn \
  "${pin_server[@]}" ./target/release/pfm --host 127.0.0.1 --port "$PFM_PORT" --data-dir "$WORK/pfm" & PFM=$!
trap 'kill $RAW $PFM 2>/dev/null; wait $RAW $PFM 2>/dev/null; rm -rf "$WORK"' EXIT
for port in "$RAW_PORT" "$PFM_PORT"; do
  for _ in $(seq 100); do curl -s -o /dev/null "http://127.0.0.1:$port/__ping__" && break; sleep 0.1; done
done
PY="python3 scripts/bench/pfm_bench.py"
t0=$(date +%s.%N)
$PY setup "$PFM_PORT" "$SECRET" "$USERS" u tree3 "$WORK/users.json"
echo "setup: $USERS users, 3 accounts each, in $(python3 -c "print(round($(date +%s.%N) - $t0, 1))")s" >&2
$PY lua "$WORK/users.json" "$USERS" "$WORK/many.lua"
$PY lua "$WORK/users.json" 1 "$WORK/one.lua"
$PY raw-lua "$WORK/raw.lua"

ROWS=$WORK/rows
ACKED=0
INFLIGHT=0
TICK=$(getconf CLK_TCK)
# run NAME CONNS URL LUA: one wrk run; appends "name conns rps p50 p99 non2xx sockerr cpu_us" to
# ROWS, cpu_us being the server's CPU (user + system, /proc/PID/stat) per request: steadier than
# req/s when this VM's neighbours are busy.
run() {
  local name=$1 conns=$2 url=$3 script=$4 out pid c0 c1
  pid=$PFM
  [ "$name" = raw ] && pid=$RAW
  c0=$(awk '{print $14+$15}' "/proc/$pid/stat")
  out=$("${pin_wrk[@]}" wrk -t1 -c"$conns" -d"${DUR}s" --timeout 10s -s "$script" "$url" 2>&1)
  c1=$(awk '{print $14+$15}' "/proc/$pid/stat")
  local res
  res=$(grep '^RESULT' <<<"$out") || { echo "wrk failed: $out" >&2; exit 1; }
  local rps p50 p99 requests non2xx sockerr
  read -r rps p50 p99 requests non2xx sockerr <<<"$(sed -E 's/^RESULT //; s/[a-z0-9]+=//g' <<<"$res")"
  local cpu
  cpu=$(python3 -c "print(round(($c1 - $c0) * 1e6 / $TICK / max($requests, 1), 1))")
  echo "$name $conns $rps $p50 $p99 $non2xx $sockerr $cpu" >> "$ROWS"
  if [ "$name" != raw ]; then
    ACKED=$((ACKED + requests - non2xx))
    INFLIGHT=$((INFLIGHT + conns))
  fi
  [ "$non2xx" = 0 ] || echo "warning: $name at $conns connections: $non2xx answers were not 2xx" >&2
}
sleep 1
# The machine is shared with wrk itself, so each raw baseline is taken before and after the pfm
# runs it is compared with; ratios are against the mean of the two.
for c in 32 128; do
  run raw "$c" "http://127.0.0.1:$RAW_PORT/" "$WORK/raw.lua"
  run "deposit/${USERS}users" "$c" "http://127.0.0.1:$PFM_PORT/deposit" "$WORK/many.lua"
  if [ "$c" = 32 ]; then run "deposit/1user" 32 "http://127.0.0.1:$PFM_PORT/deposit" "$WORK/one.lua"; fi
  run raw "$c" "http://127.0.0.1:$RAW_PORT/" "$WORK/raw.lua"
done
run raw 1 "http://127.0.0.1:$RAW_PORT/" "$WORK/raw.lua"
run "deposit/1user" 1 "http://127.0.0.1:$PFM_PORT/deposit" "$WORK/one.lua"
run raw 1 "http://127.0.0.1:$RAW_PORT/" "$WORK/raw.lua"
python3 - "$ROWS" "$DUR" "$WRK_CPU" "$SERVER_CPU" <<'PY'
import sys
rows = [l.split() for l in open(sys.argv[1])]
raw = {}
for r in rows:
    if r[0] == "raw":
        raw.setdefault(r[1], []).append(r)
# Baseline per connection count: mean req/s, p99 and CPU per request of its runs.
mean = lambda rs, i: sum(float(r[i]) for r in rs) / len(rs)
raw = {c: {"rps": mean(rs, 2), "p99": mean(rs, 4), "cpu": mean(rs, 7)} for c, rs in raw.items()}
print(f"durable writes, wrk -t1 -d{sys.argv[2]}s (wrk on core {sys.argv[3] or 'any'}, "
      f"servers on core {sys.argv[4] or 'any'}); ratios against the mean of the raw runs at the same connections; "
      f"cpu: the server's CPU per request")
print(f"{'endpoint':<22} {'conns':>5} {'req/s':>9} {'p50 ms':>8} {'p99 ms':>8} {'req/s:raw':>9} {'p99:raw':>8} "
      f"{'cpu us':>7} {'cpu:raw':>7} {'errors':>7}")
for name, c, rps, p50, p99, non2xx, sockerr, cpu in rows:
    b = raw.get(c)
    r1 = f"{float(rps) / b['rps']:.2f}" if b else "-"
    r2 = f"{float(p99) / b['p99']:.2f}" if b else "-"
    r3 = f"{float(cpu) / b['cpu']:.2f}" if b and b["cpu"] > 0 else "-"
    print(f"{name:<22} {c:>5} {float(rps):>9.0f} {int(p50) / 1e3:>8.2f} {int(p99) / 1e3:>8.2f} {r1:>9} {r2:>8} "
          f"{float(cpu):>7.1f} {r3:>7} {int(non2xx) + int(sockerr):>7}")
print("goal: deposit over the users at 128 connections req/s:raw >= 0.5 and p99:raw <= 3")
PY
$PY check3 "$PFM_PORT" "$WORK/users.json" "$ACKED" "$INFLIGHT"
