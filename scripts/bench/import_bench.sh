#!/usr/bin/env bash
# A 20,000-line statement import (preview, commit, the same file again) against the same lines as
# 20,000 single /deposit requests over 64 connections, on the release binary with its embedded
# default storage. Goal (docs/import.md): preview under 0.2 s, commit under 1 s, never slower
# than the singles. Loopback only; stops by itself.
# Usage: scripts/bench/import_bench.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
cargo build --release --bin pfm >/dev/null
mkdir -p target/bench-tmp
WORK=$(mktemp -d -p target/bench-tmp import.XXXXXX)
SECRET=import-bench-secret-import-bench-0000
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
JWT_SECRET=$SECRET MAX_REQUESTS=1000000000 RUST_LOG=warn ./target/release/pfm --host 127.0.0.1 --port "$PORT" \
  --data-dir "$WORK/pfm" >/dev/null 2>&1 & PFM=$!
trap 'kill $PFM 2>/dev/null; wait $PFM 2>/dev/null; rm -rf "$WORK"' EXIT
for _ in $(seq 100); do curl -sf "http://127.0.0.1:$PORT/healthz" >/dev/null && break; sleep 0.1; done
timeout 600 python3 scripts/bench/import_bench.py "$PORT" "$SECRET"
