#!/usr/bin/env bash
# Crash safety at length: runs tests/crash.rs (kill -9 of the release binary during concurrent
# writes from several users, restart, check every acknowledged write and per-user money) for
# many cycles on one data directory. Loopback only; each cycle lasts a few seconds.
# Usage: scripts/check/crash_cycles.sh [cycles=20]. Replay a failure with PFM_CRASH_SEED=<printed seed>.
set -euo pipefail
cd "$(dirname "$0")/../.."
export PFM_CRASH_CYCLES=${1:-20}
cargo test --release --test crash -- --nocapture
