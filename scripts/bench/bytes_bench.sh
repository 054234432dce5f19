#!/usr/bin/env bash
# Bytes that reach the disk per deposit, counted by the block device itself (docs/benchmarks.md,
# "Bytes written"). pfm's data directory is an ext4 file system of its own on a loop device, so
# /sys/block/loopN/stat counts every sector the file system sent down for pfm alone: journal
# appends, segment zero-filling, checkpoints into sled, sled's log and page rewrites, and the file
# system's own metadata, and nothing any other process wrote. (/proc/<pid>/io `write_bytes` is no
# measure on kernels with large folios: it counts a whole folio, up to 1 MiB, for each small write
# into a zero-filled file.)
#
# One server (embedded engine, shipped defaults: checkpoints every 5 s), N users (main + 2
# children each); for each concurrency in CONNS, DUR seconds of deposits over the users with wrk,
# then SETTLE seconds so the checkpoint the run caused lands in the window. Prints, per run, the
# deposits made (counted from the money), deposits/s, the device's bytes per deposit, and the
# journal's own bytes per deposit (what the journal thread passed to write calls: the records).
# Needs root (losetup, mount). Loopback only; every wrk run is bounded in time.
# Usage: scripts/bench/bytes_bench.sh   Env: USERS (256), CONNS ("1 32 128"), DUR (20),
# SETTLE (8), PFM_BIN (default: a release build), IMAGE_MB (4096).
set -euo pipefail
cd "$(dirname "$0")/../.."
USERS=${USERS:-256}
CONNS=${CONNS:-1 32 128}
DUR=${DUR:-20}
SETTLE=${SETTLE:-8}
IMAGE_MB=${IMAGE_MB:-4096}
[ "$(id -u)" = 0 ] || { echo "bytes_bench.sh needs root (losetup, mount)" >&2; exit 2; }
command -v wrk >/dev/null || { apt-get update -qq && apt-get install -y -qq wrk; }
if [ -z "${PFM_BIN:-}" ]; then
  cargo build --release --bin pfm >/dev/null
  PFM_BIN=./target/release/pfm
fi
mkdir -p target/bench-tmp
WORK=$(mktemp -d -p "$PWD/target/bench-tmp" bytes.XXXXXX)
SECRET=bytes-bench-secret-bytes-bench-secret-00
# Two file systems: the journal's directory is one of its own, so its bytes are told apart from
# sled's (the rest of the data directory).
truncate -s "${IMAGE_MB}M" "$WORK/fs.img" "$WORK/journal.img"
mkfs.ext4 -q -F "$WORK/fs.img"
mkfs.ext4 -q -F "$WORK/journal.img"
LOOP=$(losetup --find --show "$WORK/fs.img")
JLOOP=$(losetup --find --show "$WORK/journal.img")
DEV=$(basename "$LOOP")
JDEV=$(basename "$JLOOP")
mkdir "$WORK/mnt"
mount "$LOOP" "$WORK/mnt"
mkdir -p "$WORK/mnt/pfm/journal"
mount "$JLOOP" "$WORK/mnt/pfm/journal"
rmdir "$WORK/mnt/pfm/journal/lost+found"
PID=
cleanup() {
  [ -n "$PID" ] && { kill "$PID" 2>/dev/null; wait "$PID" 2>/dev/null || true; }
  umount "$WORK/mnt/pfm/journal" 2>/dev/null || true
  umount "$WORK/mnt" 2>/dev/null || true
  losetup -d "$LOOP" "$JLOOP" 2>/dev/null || true
  rm -rf "$WORK"
}
trap cleanup EXIT
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
JWT_SECRET=$SECRET MAX_REQUESTS=1000000000 RUST_LOG=warn \
  "$PFM_BIN" --host 127.0.0.1 --port "$PORT" --data-dir "$WORK/mnt/pfm" & PID=$!
for _ in $(seq 100); do curl -s -o /dev/null "http://127.0.0.1:$PORT/__ping__" && break; sleep 0.1; done
python3 scripts/bench/pfm_bench.py setup "$PORT" "$SECRET" "$USERS" u tree3 "$WORK/users.json"
python3 scripts/bench/pfm_bench.py lua "$WORK/users.json" "$USERS" "$WORK/deposits.lua"
# Sectors written by the device (field 7 of its stat, 512-byte units).
sectors() { awk '{print $7}' "/sys/block/$1/stat"; }
# Bytes the journal thread passed to write calls.
journal_wchar() {
  for t in /proc/"$PID"/task/*; do
    if [ "$(cat "$t/comm")" = pfm-journal ]; then awk '/^wchar/{print $2}' "$t/io"; fi
  done | awk '{s += $1} END {print s + 0}'
}
count() { python3 scripts/bench/webhook_bench.py deposits "$PORT" "$WORK/users.json"; }
# Warm-up, unmeasured: the first segments and sled's first pages.
wrk -t1 -c32 -d5s -s "$WORK/deposits.lua" "http://127.0.0.1:$PORT/deposit" >/dev/null
sleep "$SETTLE"
echo "pfm: $PFM_BIN; $USERS users; $DUR s per run, then $SETTLE s to settle; ext4 on loop devices, $JDEV the journal, $DEV the rest"
for c in $CONNS; do
  s0=$(sectors "$DEV"); q0=$(sectors "$JDEV"); j0=$(journal_wchar); d0=$(count)
  rps=$(wrk -t1 -c"$c" -d"$DUR"s --timeout 10s -s "$WORK/deposits.lua" "http://127.0.0.1:$PORT/deposit" \
    | awk '/^RESULT/ { for (i = 2; i <= NF; i++) { split($i, kv, "="); if (kv[1] == "rps") print kv[2] } }')
  sleep "$SETTLE"
  s1=$(sectors "$DEV"); q1=$(sectors "$JDEV"); j1=$(journal_wchar); d1=$(count)
  n=$((d1 - d0))
  awk -v c="$c" -v n="$n" -v r="$rps" -v b=$(((s1 - s0) * 512)) -v q=$(((q1 - q0) * 512)) -v j=$((j1 - j0)) 'BEGIN {
    printf "conns %4d: %7d deposits, %7.0f/s; bytes per deposit reaching the devices %6.0f: journal %6.0f (its records %4.0f), sled %6.0f\n",
      c, n, r, (b + q) / n, q / n, j / n, b / n }'
done
