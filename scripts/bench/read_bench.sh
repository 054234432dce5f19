#!/usr/bin/env bash
# Read-path figure: authenticated GET /get_balance (and /__ping__) as a ratio of the
# bare hyper example's throughput, measured in the same run, wrk -t1 -c32 pinned to core 1 (the
# servers are not pinned). The baseline is taken before and after and averaged; each run also
# gives the server's CPU time per request. Loopback only;
# every run is bounded in time. Usage: scripts/bench/read_bench.sh [seconds=5] [rounds=3]
# Env: SERVER_CPU (core both servers are pinned to; default empty = not pinned), PFM_BIN
# (default: a release build). The last column, like_pfm, is bare hyper answering pfm's very bytes
# (`bare_hyper <port> like-pfm`): the cost of pfm's answer to the client without pfm's work.
set -euo pipefail
cd "$(dirname "$0")/../.."
DUR=${1:-5}
ROUNDS=${2:-3}
command -v wrk >/dev/null || { apt-get update -qq && apt-get install -y -qq wrk; }
# The baseline is an example, built apart (target/examples): an example turns on the tests'
# feature (test-hooks) for every target built with it, and the measured pfm must be the release
# binary as shipped.
if [ -z "${PFM_BIN:-}" ]; then
  cargo build --release --bin pfm >/dev/null
  PFM_BIN=./target/release/pfm
fi
CARGO_TARGET_DIR=target/examples cargo build --release --example bare_hyper >/dev/null
BARE_BIN=./target/examples/release/examples/bare_hyper
mkdir -p target/bench-tmp
W=$(mktemp -d -p target/bench-tmp read.XXXXXX)
SECRET=read-bench-secret-read-bench-secret-00
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
BP=$(free_port); PP=$(free_port); LP=$(free_port)
pin=()
[ -n "${SERVER_CPU:-}" ] && pin=(taskset -c "$SERVER_CPU")
"${pin[@]}" "$BARE_BIN" "$BP" & BARE=$!
"${pin[@]}" "$BARE_BIN" "$LP" like-pfm & LIKE=$!
JWT_SECRET=$SECRET MAX_REQUESTS=1000000000 RUST_LOG=warn "${pin[@]}" "$PFM_BIN" --port "$PP" --data-dir "$W/d" >/dev/null 2>&1 & PFM=$!
trap 'kill $BARE $LIKE $PFM 2>/dev/null; wait $BARE $LIKE $PFM 2>/dev/null; rm -rf "$W"' EXIT
for port in "$BP" "$PP" "$LP"; do
  for _ in $(seq 100); do curl -s -o /dev/null "http://127.0.0.1:$port/__ping__" && break; sleep 0.1; done
done
TOKEN=$(python3 scripts/bench/pfm_bench.py token "$SECRET" load)
MAIN=$(curl -s -XPOST "http://127.0.0.1:$PP/register" -H "Authorization: Bearer $TOKEN" -d 'user_id=load&initial_balance=1000' | python3 -c 'import sys,json;print(json.load(sys.stdin)["uuid"])')
. scripts/bench/wrk_cpu.sh
printf '%-6s %10s %10s %6s %10s %6s %8s %8s %8s %8s %6s\n' round bare ping ratio balance ratio bare_us ping_us bal_us like_pfm ratio
for i in $(seq "$ROUNDS"); do
  read -r b1 cb1 < <(wrk_cpu "$BARE" "http://127.0.0.1:$BP/")
  read -r p cp < <(wrk_cpu "$PFM" "http://127.0.0.1:$PP/__ping__")
  read -r g cg < <(wrk_cpu "$PFM" -H "Authorization: Bearer $TOKEN" "http://127.0.0.1:$PP/get_balance?uuid=$MAIN")
  read -r l cl < <(wrk_cpu "$LIKE" -H "Authorization: Bearer $TOKEN" "http://127.0.0.1:$LP/get_balance?uuid=$MAIN")
  read -r b2 cb2 < <(wrk_cpu "$BARE" "http://127.0.0.1:$BP/")
  python3 -c "
b=($b1+$b2)/2
print(f'{$i:<6} {b:>10.0f} {$p:>10.0f} {$p/b:>6.2f} {$g:>10.0f} {$g/b:>6.2f} {($cb1+$cb2)/2:>8.1f} {$cp:>8.1f} {$cg:>8.1f} {$l:>8.0f} {$l/b:>6.2f}')"
done
