#!/usr/bin/env bash
# Memory as users grow (docs/benchmarks.md, "Memory"): N users, each a main account with one
# child account and two deposits, on the release binary with a fresh data directory.
#   1. resident memory once the writes are checkpointed and freed memory is given back, and per
#      cached user;
#   2. after a clean restart (nothing cached): get_balance of every user in turn (the miss path,
#      users loaded from storage), then of 1,000 users over and over (cached), with wrk; resident
#      memory before and after, per user the reads brought into the cache;
#   3. kill -9, restart: milliseconds until /readyz answers 200, and until a user's balance does.
# Loopback only; bounded in time. Extra server settings pass through the environment (e.g.
# CACHE_MB=8). Usage: scripts/bench/memory_bench.sh [users=60000] [read_seconds=10]
set -euo pipefail
cd "$(dirname "$0")/../.."
N=${1:-60000}
SECS=${2:-10}
SETTLE=${SETTLE:-20}
command -v wrk >/dev/null || { apt-get update -qq && apt-get install -y -qq wrk; }
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-target}
cargo build --release --bin pfm >/dev/null
mkdir -p target/bench-tmp
W=$(mktemp -d -p target/bench-tmp mem.XXXXXX)
SECRET=memory-bench-secret-memory-bench-secret
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
B=http://127.0.0.1:$PORT
PFM=
start() {
  JWT_SECRET=$SECRET MAX_REQUESTS=1000000000000 RUST_LOG=warn \
    "$CARGO_TARGET_DIR/release/pfm" --host 127.0.0.1 --port "$PORT" --data-dir "$W/d" & PFM=$!
}
trap '[ -n "$PFM" ] && kill $PFM 2>/dev/null; wait 2>/dev/null; rm -rf "$W"' EXIT
ready() { for _ in $(seq 30000); do curl -sf -o /dev/null "$B/readyz" && return 0; sleep 0.01; done; return 1; }
rss() { awk '/VmRSS/ {print int($2 / 1024)}' "/proc/$PFM/status"; }
cache() { python3 scripts/bench/memory_bench.py metrics "$PORT"; }
gauge() { cache | tr ' ' '\n' | awk -F= -v k="$1" '$1 == k {print $2}'; }
per_user() { python3 -c "import sys; a, b, n = map(float, sys.argv[1:]); print(f'{(b - a) * 1024 / max(n, 1):.2f}')" "$@"; }

start
ready
echo "== $N users: a main account, one child, two deposits each (${CACHE_MB:+CACHE_MB=$CACHE_MB})"
echo "fresh server: $(rss) MB resident"
python3 scripts/bench/memory_bench.py create "$PORT" "$SECRET" "$N" "$W/uuids"
echo "right after: $(rss) MB resident; $(cache)"
sleep "$SETTLE"
R=$(rss)
echo "after ${SETTLE}s quiet: $R MB resident; $(cache); $(per_user 0 "$R" "$(gauge user_cache_resident_users)") KB per cached user (all of it)"

kill "$PFM"
wait "$PFM" || true
start
ready
sleep "$SETTLE"
R0=$(rss)
echo "== clean restart, ${SETTLE}s quiet: $R0 MB resident; $(cache)"
python3 scripts/bench/memory_bench.py lua "$SECRET" "$W/uuids" "$W/all.lua"
python3 scripts/bench/memory_bench.py lua "$SECRET" "$W/uuids" "$W/hot.lua" --n 1000
echo "miss path, get_balance of each user in turn, 16 connections, ${SECS}s:"
M0=$(gauge user_cache_misses_total)
wrk -t1 -c16 -d"${SECS}s" --timeout 10s -s "$W/all.lua" "$B/" | grep '^RESULT'
echo "  $(cache); misses in this pass: $(( $(gauge user_cache_misses_total) - M0 ))"
R1=$(rss)
echo "  $R1 MB resident right after"
echo "cached path, get_balance of 1,000 users over and over, 16 connections, ${SECS}s:"
wrk -t1 -c16 -d2s --timeout 10s -s "$W/hot.lua" "$B/" >/dev/null
wrk -t1 -c16 -d"${SECS}s" --timeout 10s -s "$W/hot.lua" "$B/" | grep '^RESULT'
echo "  $(cache)"
sleep "$SETTLE"
R2=$(rss)
C=$(gauge user_cache_resident_users)
echo "after ${SETTLE}s quiet: $R2 MB resident, $C users cached: $(per_user "$R0" "$R2" "$C") KB per cached user above the restarted server's"

TOK=$(python3 -c "import sys; sys.path.insert(0, 'scripts/bench'); import memory_bench as m; print(m.token('$SECRET', m.PREFIX + '0'))")
kill -9 "$PFM"
wait "$PFM" 2>/dev/null || true
T0=$(date +%s%N)
start
ready
T1=$(date +%s%N)
curl -sf -o /dev/null -H "Authorization: Bearer $TOK" "$B/get_balance?uuid=$(head -1 "$W/uuids")"
T2=$(date +%s%N)
echo "== kill -9, restart with $N users: /readyz 200 after $(( (T1 - T0) / 1000000 )) ms, a balance after $(( (T2 - T0) / 1000000 )) ms; $(rss) MB resident"
echo "data directory: $(du -sm "$W/d" | cut -f1) MB"
