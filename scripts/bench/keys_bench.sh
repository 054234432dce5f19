#!/usr/bin/env bash
# Bounded key tables: throughput of failed authentications stays flat (>= 0.8x of its start) after
# half a million distinct invalid tokens, because key tables hold bounded hashes and evict in O(1).
# Loopback only, in-process server; bounded by the request count.
# Usage: scripts/bench/keys_bench.sh [total_requests] [slice] [threads] [rounds]  (PROFILE=debug: quicker build)
set -euo pipefail
cd "$(dirname "$0")/../.."
PROFILE=${PROFILE:-release}
if [ "$PROFILE" = release ]; then
  cargo build --release --example keys_bench
  BIN=target/release/examples/keys_bench
else
  cargo build --example keys_bench
  BIN=target/debug/examples/keys_bench
fi
RUST_LOG=warn timeout 900 "$BIN" "${1:-500000}" "${2:-20000}" "${3:-4}" "${4:-5}"
