#!/usr/bin/env bash
# Deposits with one webhook subscribed against deposits without, in one run (docs/benchmarks.md,
# "Webhooks"). One pfm per binary (embedded engine, fresh data directory, webhooks to loopback
# allowed), N users (main + 2 children each) and a local receiver (examples/hook_receiver.rs)
# that answers 200 at once. Each round measures, on each server, DUR seconds of deposits at 128
# connections over the users (a) with no webhook and (b) with one webhook per user subscribed to
# transaction.recorded, the order of a and b swapped every round. After every (b) it waits until
# the receiver has one event per deposit made (counted from the money, exact) and fails if one is
# missing. Prints each rate, p99, pfm's and the receiver's CPU per deposit, and the ratio b/a.
# Loopback only; every wrk run is bounded in time.
# Usage: scripts/bench/webhook_bench.sh [rounds=4]
# Env: BINS (space-separated pfm binaries, default the release build), USERS (256), CONNS (128),
# DUR (10), WARM (10, unmeasured deposits first), WRK_CPU (core wrk is pinned to, default 1).
set -euo pipefail
cd "$(dirname "$0")/../.."
ROUNDS=${1:-4}
USERS=${USERS:-256}
CONNS=${CONNS:-128}
DUR=${DUR:-10}
WARM=${WARM:-10}
WRK_CPU=${WRK_CPU:-1}
T=${CARGO_TARGET_DIR:-target}
command -v wrk >/dev/null || { apt-get update -qq && apt-get install -y -qq wrk; }
# The receiver is an example, built apart: an example turns on the tests' feature (test-hooks)
# for every target built with it, and the measured pfm must be the release binary as shipped.
cargo build --release --bin pfm >/dev/null
CARGO_TARGET_DIR=$T/examples cargo build --release --example hook_receiver >/dev/null
BINS=${BINS:-$T/release/pfm}
mkdir -p target/bench-tmp
WORK=$(mktemp -d -p target/bench-tmp hook.XXXXXX)
SECRET=webhook-bench-secret-webhook-bench-00
H="python3 scripts/bench/webhook_bench.py"
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
RPORT=$(free_port)
"$T/examples/release/examples/hook_receiver" "$RPORT" & RECV=$!
PIDS=()
trap 'kill $RECV "${PIDS[@]}" 2>/dev/null; wait $RECV "${PIDS[@]}" 2>/dev/null; rm -rf "$WORK"' EXIT
TICK=$(getconf CLK_TCK)
cpu() { awk '{print $14+$15}' "/proc/$1/stat"; }
# run I: one wrk run on server I; prints "req/s p99_ms requests non2xx pfm_ticks receiver_ticks".
run() {
  local c0 r0 out
  c0=$(cpu "${PIDS[$1]}"); r0=$(cpu $RECV)
  out=$(taskset -c "$WRK_CPU" wrk -t1 -c"$CONNS" -d"$DUR"s --timeout 10s -s "$WORK/deposits$1.lua" \
    "http://127.0.0.1:${PORTS[$1]}/deposit" 2>&1 | grep '^RESULT') || { echo "wrk failed" >&2; exit 1; }
  echo "$out" | awk -v c=$(($(cpu "${PIDS[$1]}") - c0)) -v r=$(($(cpu $RECV) - r0)) '{
    for (i = 2; i <= NF; i++) { split($i, kv, "="); d[kv[1]] = kv[2] }
    printf "%.0f %.2f %d %d %d %d\n", d["rps"], d["p99"] / 1000, d["requests"], d["non2xx"], c, r }'
}
PORTS=()
i=0
for bin in $BINS; do
  PORTS[$i]=$(free_port)
  JWT_SECRET=$SECRET MAX_REQUESTS=1000000000 RUST_LOG=warn WEBHOOKS_ALLOW_PRIVATE=true \
    "$bin" --host 127.0.0.1 --port "${PORTS[$i]}" --data-dir "$WORK/pfm$i" & PIDS[$i]=$!
  for _ in $(seq 100); do curl -s -o /dev/null "http://127.0.0.1:${PORTS[$i]}/__ping__" && break; sleep 0.1; done
  python3 scripts/bench/pfm_bench.py setup "${PORTS[$i]}" "$SECRET" "$USERS" u tree3 "$WORK/users$i.json"
  python3 scripts/bench/pfm_bench.py lua "$WORK/users$i.json" "$USERS" "$WORK/deposits$i.lua"
  i=$((i + 1))
done
for i in "${!PIDS[@]}"; do
  DUR=$WARM run "$i" >/dev/null
done
echo "pfm: $BINS; $USERS users, $CONNS connections, $DUR s per run, wrk on core $WRK_CPU"
want=0
declare -A A B
for r in $(seq "$ROUNDS"); do
  for i in "${!PIDS[@]}"; do
    modes="a b"
    [ $((r % 2)) = 0 ] && modes="b a"
    for m in $modes; do
      if [ "$m" = a ]; then
        A[$r.$i]=$(run "$i")
        continue
      fi
      $H create "${PORTS[$i]}" "$WORK/users$i.json" "http://127.0.0.1:$RPORT/hook" "$WORK/hooks$i.json"
      d0=$($H deposits "${PORTS[$i]}" "$WORK/users$i.json")
      B[$r.$i]=$(run "$i")
      d1=$($H deposits "${PORTS[$i]}" "$WORK/users$i.json")
      want=$((want + d1 - d0))
      got=$($H wait "$RPORT" "$want") || { echo "round $r: the receiver has $got of $want events" >&2; exit 1; }
      B[$r.$i]="${B[$r.$i]} $((d1 - d0)) $got"
      $H delete "${PORTS[$i]}" "$WORK/users$i.json" "$WORK/hooks$i.json"
    done
    python3 - "$r" "$i" "$TICK" "${A[$r.$i]}" "${B[$r.$i]}" "$WORK/rounds" <<'PY'
import sys
r, i, tick, a, b = sys.argv[1:6]
a, b = a.split(), b.split()
us = lambda ticks, n: int(ticks) * 1e6 / int(tick) / max(int(n), 1)
print(f"round {r} pfm{i}: a {float(a[0]):6.0f}/s p99 {float(a[1]):6.2f} ms cpu {us(a[4], a[2]):5.1f} us | "
      f"b {float(b[0]):6.0f}/s p99 {float(b[1]):6.2f} ms cpu {us(b[4], b[2]):5.1f} us, receiver {us(b[5], b[2]):4.1f} us"
      f" | b/a {float(b[0]) / float(a[0]):.2f} | non2xx {a[3]} {b[3]} | deposits {b[6]}, receiver has {b[7]} "
      f"(sent {b[8]}), all in {b[9]} s after the run")
open(sys.argv[6], "a").write(f"{i} {a[0]} {b[0]} {a[1]} {b[1]}\n")
PY
  done
done
python3 - "$WORK/rounds" $BINS <<'PY'
import statistics as st, sys
rows = [l.split() for l in open(sys.argv[1])]
for i, bin in enumerate(sys.argv[2:]):
    a = [float(x[1]) for x in rows if x[0] == str(i)]
    b = [float(x[2]) for x in rows if x[0] == str(i)]
    rs = [y / x for x, y in zip(a, b)]
    p99a = [float(x[3]) for x in rows if x[0] == str(i)]
    p99b = [float(x[4]) for x in rows if x[0] == str(i)]
    print(f"pfm{i} ({bin}): b/a " + " ".join(f"{x:.2f}" for x in rs) + f"; median {st.median(rs):.2f}, "
          f"range {min(rs):.2f}-{max(rs):.2f}; a {min(a):.0f}-{max(a):.0f}/s, b {min(b):.0f}-{max(b):.0f}/s; "
          f"p99 a {min(p99a):.1f}-{max(p99a):.1f} ms, b {min(p99b):.1f}-{max(p99b):.1f} ms")
PY
