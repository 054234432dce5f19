#!/usr/bin/env bash
# The reference project's own load-test client (../shared/reference/locust_script.py,
# unmodified except that its StepLoadShape class is dropped at run time) runs headless for about
# 30 s with 10 users against target/debug/pfm in reference response style. Passes when there is
# no client exception and every failed request is one of the SPEC business-rule answers listed in
# .ci/locust_check.py. Loopback only; bounded in time.
set -euo pipefail
cd "$(dirname "$0")/.."
SCRIPT=../shared/reference/locust_script.py
LOCUST_VERSION=2.47.0
[ -f "$SCRIPT" ] || { echo "locust.sh: $SCRIPT is missing" >&2; exit 1; }
BIN=target/debug/pfm
[ -x "$BIN" ] || cargo build --locked --bin pfm
WORK=$(mktemp -d)
SRV=
cleanup() {
  if [ -n "$SRV" ]; then kill "$SRV" 2>/dev/null || true; wait "$SRV" 2>/dev/null || true; fi
  rm -rf "$WORK"
}
trap cleanup EXIT
# LOCUST_VENV: reuse a virtualenv that already has this locust (local runs); CI makes a fresh one.
# Without the venv module (some distributions package it apart) locust goes to a private dir.
VENV=${LOCUST_VENV:-$WORK/venv}
if "$VENV/bin/python" -m locust --version 2>/dev/null | grep -q "locust $LOCUST_VERSION "; then
  PY=("$VENV/bin/python")
elif python3 -m venv "$VENV" 2>/dev/null; then
  "$VENV/bin/pip" install -q --disable-pip-version-check "locust==$LOCUST_VERSION"
  PY=("$VENV/bin/python")
else
  python3 -m pip install -q --disable-pip-version-check --target "$WORK/pylib" "locust==$LOCUST_VERSION"
  PY=(env "PYTHONPATH=$WORK/pylib" python3)
fi
python3 .ci/locust_check.py strip "$SCRIPT" "$WORK/locustfile.py"
PORT=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
# STYLE=plain shows the check failing: the script then trips over unboxed uuids.
TOKEN_ENDPOINT_ENABLED=true RESPONSE_STYLE=${STYLE:-reference} RUST_LOG=warn \
  "$BIN" --host 127.0.0.1 --port "$PORT" --data-dir "$WORK/data" >"$WORK/server.log" 2>&1 &
SRV=$!
for _ in $(seq 50); do
  python3 -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:$PORT/__ping__', timeout=1)" \
    2>/dev/null && break
  sleep 0.2
done
# 50 users for 40 s run about 1000 tasks: a task of weight 1 in 86 (/distribute) is then missed
# with odds near 1e-5, where 10 users for 30 s (about 100 tasks) missed it one run in three.
# locust exits non-zero whenever any request failed; the check below judges the failures.
FAILURE_LOG="$WORK/failures.jsonl" timeout 150 "${PY[@]}" -m locust \
  -f "$WORK/locustfile.py,.ci/locust_hook.py" --headless -u 50 -r 25 -t 40s --stop-timeout 5 \
  --host "http://127.0.0.1:$PORT" --csv "$WORK/stats" --only-summary >"$WORK/locust.log" 2>&1 || true
if ! python3 .ci/locust_check.py check "$WORK"; then
  echo "--- locust output (tail)" >&2; tail -40 "$WORK/locust.log" >&2
  echo "--- server log (tail)" >&2; tail -20 "$WORK/server.log" >&2
  exit 1
fi
