#!/usr/bin/env bash
# Power cuts against the real binary: ../shared/tools/powercut/ (a FUSE file system that keeps
# only what was synced) runs deposits, kills pfm, cuts the power, restarts it and checks every
# acknowledged write, in five modes: a fresh data directory, a used one, torn tails, reordered
# pages and failed fsyncs. Needs root, /dev/fuse, fuse3 and mfusepy (.ci/powercut.sh installs
# them). Usage: scripts/check/powercut.sh [SECONDS_PER_MODE] [MAX_CYCLES_PER_MODE]
# Exits non-zero if any mode lost a write, needed a person to restart, broke an invariant, or
# acknowledged a write after a failed fsync. Loopback only; each mode stops by itself.
set -euo pipefail
cd "$(dirname "$0")/../.."
SECS=${1:-120}
CYCLES=${2:-1000}
TOOL=../shared/tools/powercut/powercut.py
BIN=${PFM_BIN:-target/release/pfm}
[ -f "$TOOL" ] || { echo "powercut.sh: $TOOL is missing" >&2; exit 1; }
[ -x "$BIN" ] || { echo "powercut.sh: $BIN is missing (cargo build --release)" >&2; exit 1; }
WORK=$(mktemp -d /tmp/pfm-powercut.XXXXXX)
trap 'fusermount3 -u "$WORK"/*/mnt 2>/dev/null || true; rm -rf "$WORK"' EXIT
# Checkpoints every 700 ms so that every cut meets the checkpoint protocol, not only the journal.
CKPT=--service-arg=--checkpoint-interval-ms=700
status=0
run() {
  local name=$1; shift
  local log="$WORK/$name.log" port
  port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  PFM_BIN=$BIN timeout $((SECS * 3 + 300)) python3 "$TOOL" --time-budget "$SECS" --cycles "$CYCLES" \
    --port "$port" --workdir "$WORK/$name" "$CKPT" "$@" >"$log" 2>&1 || status=1
  local summary json
  summary=$(grep '^power cuts' "$log" || echo "power cuts: no summary (see below)")
  json=$(grep '^{"cuts"' "$log" || echo '{}')
  printf '%-10s %s | acks after EIO: %s\n' "$name" "$summary" \
    "$(python3 -c 'import json,sys; print(json.loads(sys.argv[1]).get("acks_after_eio", "-"))' "$json")"
  if ! grep -q '^power cuts' "$log" || grep -q '"acks_after_eio": [1-9]' "$log"; then
    status=1
  fi
  [ "$status" = 0 ] || tail -n 30 "$log"
}
run fresh   --seed 1
run used    --seed 2 --init-outside
run torn    --seed 3 --init-outside --tear 1.0
run reorder --seed 4 --reorder 1.0
run eio     --seed 5 --init-outside --fail-fsync 1.0
exit $status
