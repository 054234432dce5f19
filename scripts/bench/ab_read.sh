#!/usr/bin/env bash
# A/B of the read path: two pfm binaries (say, a `git worktree` build of the previous commit and
# the current one) and the bare hyper baseline, rotated in one run: GET /get_balance with wrk
# -t1 -c32 pinned to core 1, as scripts/bench/read_bench.sh. Prints req/s, the ratio to bare hyper
# (mean of the runs before and after) and the server's CPU per request. Loopback only; every
# run is bounded in time. Usage: scripts/bench/ab_read.sh BASE_BIN NEW_BIN [seconds=5] [rounds=3]
# NEW_ENV (say "WORKER_THREADS=1"): variables set for the second server only, to compare one
# binary under two configurations.
set -euo pipefail
BASE=$(realpath "$1"); NEW=$(realpath "$2")
cd "$(dirname "$0")/../.."
DUR=${3:-5}; ROUNDS=${4:-3}
command -v wrk >/dev/null || { apt-get update -qq && apt-get install -y -qq wrk; }
# The baselines are examples, built apart (target/examples): an example turns on the tests'
# feature (test-hooks) for every target built with it, and the measured pfm must be the
# release binary as shipped.
CARGO_TARGET_DIR=target/examples cargo build --release --example bare_hyper >/dev/null
mkdir -p target/bench-tmp
W=$(mktemp -d -p target/bench-tmp ab.XXXXXX)
SECRET=read-bench-secret-read-bench-secret-00
fp() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
BP=$(fp); AP=$(fp); NP=$(fp)
./target/examples/release/examples/bare_hyper $BP & BARE=$!
JWT_SECRET=$SECRET MAX_REQUESTS=1000000000 RUST_LOG=warn "$BASE" --port $AP --data-dir $W/a >/dev/null 2>&1 & A=$!
env ${NEW_ENV:-} JWT_SECRET=$SECRET MAX_REQUESTS=1000000000 RUST_LOG=warn "$NEW" --port $NP --data-dir $W/n >/dev/null 2>&1 & N=$!
trap 'kill $BARE $A $N 2>/dev/null; wait $BARE $A $N 2>/dev/null; rm -rf "$W"' EXIT
for p in $BP $AP $NP; do for _ in $(seq 100); do curl -s -o /dev/null "http://127.0.0.1:$p/__ping__" && break; sleep 0.1; done; done
TOKEN=$(python3 scripts/bench/pfm_bench.py token "$SECRET" load)
reg() { curl -s -XPOST "http://127.0.0.1:$1/register" -H "Authorization: Bearer $TOKEN" -d 'user_id=load&initial_balance=1000' | python3 -c 'import sys,json;print(json.load(sys.stdin)["uuid"])'; }
MA=$(reg $AP); MN=$(reg $NP)
. scripts/bench/wrk_cpu.sh
for i in $(seq $ROUNDS); do
  read -r b1 cb1 < <(wrk_cpu $BARE "http://127.0.0.1:$BP/")
  read -r a ca < <(wrk_cpu $A -H "Authorization: Bearer $TOKEN" "http://127.0.0.1:$AP/get_balance?uuid=$MA")
  read -r n cn < <(wrk_cpu $N -H "Authorization: Bearer $TOKEN" "http://127.0.0.1:$NP/get_balance?uuid=$MN")
  read -r b2 cb2 < <(wrk_cpu $BARE "http://127.0.0.1:$BP/")
  python3 -c "
b=($b1+$b2)/2
print(f'round $i bare {b:.0f} ({($cb1+$cb2)/2:.1f}us)  base {$a:.0f} {$a/b:.2f}x ({$ca}us)  new {$n:.0f} {$n/b:.2f}x ({$cn}us)')"
done
