#!/usr/bin/env bash
# Power cuts in CI: a few cycles of each mode of scripts/check/powercut.sh against the debug binary
# that nextest built. Installs the FUSE tools it needs. /dev/fuse is part of this project's
# machines; a machine without it cannot run the check, which is said loudly.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ ! -c /dev/fuse ]; then
  echo "powercut.sh: /dev/fuse is missing on this machine: POWER-CUT CHECK NOT RUN" >&2
  exit 0
fi
if ! command -v fusermount3 >/dev/null || [ ! -e /usr/include/fuse3/fuse.h ]; then
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq fuse3 libfuse3-dev >/dev/null
fi
python3 -c 'import mfusepy' 2>/dev/null || python3 -m pip install -q mfusepy
[ -x target/debug/pfm ] || cargo build --locked --bin pfm
PFM_BIN=target/debug/pfm bash scripts/check/powercut.sh 12 3
