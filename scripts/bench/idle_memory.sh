#!/usr/bin/env bash
# Memory given back after a burst of writes (docs/storage.md, "The allocator"): 256 users'
# deposits at 128 connections for 10 s, then the server's resident memory every 5 s of quiet.
# Loopback only; bounded in time. Usage: scripts/bench/idle_memory.sh [quiet_seconds=30]
# Env: MIMALLOC_PURGE_DELAY (milliseconds) to compare another purge delay.
set -euo pipefail
cd "$(dirname "$0")/../.."
QUIET=${1:-30}
command -v wrk >/dev/null || { apt-get update -qq && apt-get install -y -qq wrk; }
cargo build --release --bin pfm >/dev/null
mkdir -p target/bench-tmp
W=$(mktemp -d -p target/bench-tmp idle.XXXXXX)
SECRET=idle-memory-secret-idle-memory-secret-0
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
JWT_SECRET=$SECRET MAX_REQUESTS=1000000000 RUST_LOG=warn \
  ./target/release/pfm --host 127.0.0.1 --port "$PORT" --data-dir "$W/d" & PFM=$!
trap 'kill $PFM 2>/dev/null; wait $PFM 2>/dev/null; rm -rf "$W"' EXIT
for _ in $(seq 100); do curl -s -o /dev/null "http://127.0.0.1:$PORT/__ping__" && break; sleep 0.1; done
python3 scripts/bench/pfm_bench.py setup "$PORT" "$SECRET" 256 u tree3 "$W/users.json" 2>/dev/null
python3 scripts/bench/pfm_bench.py lua "$W/users.json" 256 "$W/many.lua"
rss() { awk '/VmRSS/ {print int($2 / 1024)}' "/proc/$PFM/status"; }
wrk -t1 -c128 -d10s --timeout 10s -s "$W/many.lua" "http://127.0.0.1:$PORT/deposit" | grep '^RESULT'
echo "peak $(awk '/VmHWM/ {print int($2 / 1024)}' "/proc/$PFM/status") MB"
for t in $(seq 0 5 "$QUIET"); do
  echo "quiet ${t}s: $(rss) MB resident"
  if [ "$t" -lt "$QUIET" ]; then sleep 5; fi
done
