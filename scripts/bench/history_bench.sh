#!/usr/bin/env bash
# Write cost against history: two users with the same 9-account tree (main, 2 children, 6
# grandchildren, two of them fixed-amount envelopes), one fresh and one with DAYS days of
# back-dated writes (every day: PER_DAY deposits into each of the 9 accounts dated that day, and a
# withdrawal). Then N deposits dated today into each user's main account, from one connection and
# from 32, measuring deposits/s and the bytes the server wrote per deposit (/proc/PID/io
# write_bytes: what reached the block layer, and wchar: what went through write calls, read
# SETTLE seconds before and after so background flushes are counted).
# Goal: history/fresh <= 1.2x bytes and >= 0.9x throughput.
# Loopback only, bounded. Usage: scripts/bench/history_bench.sh [N=2000]
# Env: DAYS (default 700), PER_DAY (default 2), SETTLE (seconds, default 2), ROUNDS (default 4),
# CHECKPOINT_INTERVAL_MS (default 500),
# MAIN_ONLY=1 (back-date
# deposits into main only: the other accounts' records are then all dated today, as internal flows
# are, so only main's per-day history grows).
set -euo pipefail
cd "$(dirname "$0")/../.."
N=${1:-2000}
DAYS=${DAYS:-700}
PER_DAY=${PER_DAY:-2}
SETTLE=${SETTLE:-2}
ROUNDS=${ROUNDS:-4}
# The baselines are examples, built apart (target/examples): an example turns on the tests'
# feature (test-hooks) for every target built with it, and the measured pfm must be the
# release binary as shipped.
cargo build --release --bin pfm >/dev/null
CARGO_TARGET_DIR=target/examples cargo build --release --example raw_append >/dev/null
mkdir -p target/bench-tmp
WORK=$(mktemp -d -p target/bench-tmp history.XXXXXX)
SECRET=history-bench-secret-history-bench-000
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
# Checkpoints (the memtable written into sled) every 500 ms, well inside SETTLE: the bytes a
# checkpoint writes then land in the window of the deposits that made them, not in a later one.
JWT_SECRET=$SECRET MAX_REQUESTS=1000000000 RUST_LOG=warn CHECKPOINT_INTERVAL_MS=${CHECKPOINT_INTERVAL_MS:-500} \
  ./target/release/pfm --host 127.0.0.1 --port "$PORT" --data-dir "$WORK/pfm" & PFM=$!
trap 'kill $PFM 2>/dev/null; wait $PFM 2>/dev/null; rm -rf "$WORK"' EXIT
for _ in $(seq 100); do curl -s -o /dev/null "http://127.0.0.1:$PORT/__ping__" && break; sleep 0.1; done
PY="python3 scripts/bench/pfm_bench.py"
# User 0 (h0) stays fresh; user 1 (h1) gets the history.
$PY setup "$PORT" "$SECRET" 2 h tree9 "$WORK/users.json"
$PY history "$PORT" "$WORK/users.json" 1 --days "$DAYS" --per-day "$PER_DAY" ${MAIN_ONLY:+--main-only}
: > "$WORK/rows"
# The machine is shared, so each measurement is taken in ROUNDS chunks, alternating the two users
# (and who goes first), and the chunks are added up.
for conns in 1 32; do
  for r in $(seq "$ROUNDS"); do
    order="0 1"
    [ $((r % 2)) = 0 ] && order="1 0"
    for u in $order; do
      $PY deposits "$PORT" "$PFM" "$WORK/users.json" "$u" $((N / ROUNDS)) "$conns" --settle "$SETTLE" >> "$WORK/rows"
    done
  done
done
python3 - "$WORK/rows" "$N" "$DAYS" "$PER_DAY" "${MAIN_ONLY:-}" <<'PY'
import json, sys
chunks = [json.loads(l) for l in open(sys.argv[1])]
rows = {}
for c in chunks:
    r = rows.setdefault((c["conns"], c["user"]), {"user": c["user"], "conns": c["conns"], "n": 0, "secs": 0,
                                                  "write_bytes": 0, "wchar": 0, "lat": []})
    for k in ("n", "secs", "write_bytes", "wchar"):
        r[k] += c[k]
    r["lat"] += c["lat_ms"]
rows = [rows[k] for k in sorted(rows)]
for r in rows:
    r["lat"].sort()
    r["rps"] = r["n"] / r["secs"]
    r["p50_ms"], r["p99_ms"] = r["lat"][len(r["lat"]) // 2], r["lat"][int(len(r["lat"]) * 0.99)]
    r["mean_ms"], r["max_ms"] = sum(r["lat"]) / len(r["lat"]), r["lat"][-1]
    r["write_bytes"] /= r["n"]
    r["wchar"] /= r["n"]
print(f"history run: {sys.argv[2]} deposits dated today into main of a 9-account tree; "
      f"h0 fresh, h1 after {sys.argv[3]} days x ({sys.argv[4]} deposits per account{' (main only)' if sys.argv[5] else ''} + 1 withdrawal)")
print(f"{'user':<6} {'conns':>5} {'dep/s':>8} {'mean ms':>8} {'p50 ms':>7} {'p99 ms':>7} {'max ms':>7} "
      f"{'write_bytes/dep':>16} {'wchar/dep':>10}")
for r in rows:
    print(f"{r['user']:<6} {r['conns']:>5} {r['rps']:>8.0f} {r['mean_ms']:>8.2f} {r['p50_ms']:>7.2f} "
          f"{r['p99_ms']:>7.2f} {r['max_ms']:>7.1f} {r['write_bytes']:>16.0f} {r['wchar']:>10.0f}")
print("ratios history/fresh (goal: bytes <= 1.2, throughput >= 0.9):")
for fresh, hist in zip(rows[0::2], rows[1::2]):
    div = lambda a, b: f"{a / b:.2f}" if b else "-"
    print(f"  {fresh['conns']:>3} conns: write_bytes {div(hist['write_bytes'], fresh['write_bytes'])}, "
          f"wchar {div(hist['wchar'], fresh['wchar'])}, deposits/s {div(hist['rps'], fresh['rps'])}")
PY
