#!/usr/bin/env bash
# HTTP load figures for pfm, as ratios against a bare hyper endpoint measured in the same run.
# Loopback only; every wrk run is bounded in time. Usage: scripts/bench/loadtest.sh [seconds] [connections]
set -euo pipefail
cd "$(dirname "$0")/../.."
DUR=${1:-5}
CONNS=${2:-64}
command -v wrk >/dev/null || { apt-get update -qq && apt-get install -y -qq wrk; }
# The baselines are examples, built apart (target/examples): an example turns on the tests'
# feature (test-hooks) for every target built with it, and the measured pfm must be the
# release binary as shipped.
cargo build --release --bin pfm >/dev/null
CARGO_TARGET_DIR=target/examples cargo build --release --example bare_hyper >/dev/null
DATA=$(mktemp -d)
SECRET=loadtest-secret-loadtest-secret-000
BARE_PORT=18001
PFM_PORT=18002
./target/examples/release/examples/bare_hyper $BARE_PORT & BARE=$!
JWT_SECRET=$SECRET MAX_REQUESTS=1000000000 RUST_LOG=warn ./target/release/pfm --port $PFM_PORT --data-dir "$DATA" & PFM=$!
# The data directory goes once pfm has stopped (it flushes on SIGTERM).
trap 'kill $BARE $PFM 2>/dev/null; wait $BARE $PFM 2>/dev/null; rm -rf "$DATA"' EXIT
sleep 1
TOKEN=$(python3 scripts/bench/pfm_bench.py token "$SECRET" load)
B=http://127.0.0.1:$PFM_PORT
AUTH="Authorization: Bearer $TOKEN"
MAIN=$(curl -s -XPOST "$B/register" -H "$AUTH" -d 'user_id=load&initial_balance=1000' | python3 -c 'import sys,json;print(json.load(sys.stdin)["uuid"])')
for n in Needs Savings; do
  curl -s -XPOST "$B/add_sub_account" -H "$AUTH" -d "parent_uuid=$MAIN&name=$n&allocation=0.5" >/dev/null
done
curl -s -XPOST "$B/deposit" -H "$AUTH" -d "uuid=$MAIN&amount=100&channel=seed" >/dev/null
cat > "$DATA/deposit.lua" <<LUA
wrk.method = "POST"
wrk.body = "uuid=$MAIN&amount=1.01&channel=load"
wrk.headers["Content-Type"] = "application/x-www-form-urlencoded"
LUA
rps() { wrk -t2 -c"$CONNS" -d"${DUR}s" "$@" 2>/dev/null | awk '/Requests\/sec/ {print $2}'; }
# The machine is shared with wrk itself, so the baseline is taken before and after the pfm runs
# and averaged; ratios are against that average.
base1=$(rps "http://127.0.0.1:$BARE_PORT/")
ROWS=$(mktemp)
row() { local name=$1; shift; echo "$name|$(rps "$@")" >> "$ROWS"; }
row "GET /__ping__" "$B/__ping__"
row "GET /get_balance" -H "$AUTH" "$B/get_balance?uuid=$MAIN"
row "GET /compute_total_balance" -H "$AUTH" "$B/compute_total_balance?uuid=$MAIN"
row "GET /spending" -H "$AUTH" "$B/spending?uuid=$MAIN"
row "GET /find_account_by_uuid" -H "$AUTH" "$B/find_account_by_uuid?uuid=$MAIN"
row "POST /deposit (fsync per group)" -H "$AUTH" -s "$DATA/deposit.lua" "$B/deposit"
base2=$(rps "http://127.0.0.1:$BARE_PORT/")
python3 - "$base1" "$base2" "$ROWS" <<'PY'
import sys
b1, b2 = float(sys.argv[1]), float(sys.argv[2])
base = (b1 + b2) / 2
print(f"{'endpoint':<34} {'req/s':>12} {'ratio':>8}")
print(f"{'bare hyper (baseline, mean of 2)':<34} {base:>12.0f} {1:>8.2f}   (runs: {b1:.0f}, {b2:.0f})")
for line in open(sys.argv[3]):
    name, r = line.rstrip("\n").split("|")
    print(f"{name:<34} {float(r):>12.0f} {float(r) / base:>8.2f}")
PY
