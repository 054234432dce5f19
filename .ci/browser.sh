#!/usr/bin/env bash
# Browser test of the web page (docs/web.md): headless Chromium driven by selenium against the debug
# binary that `cargo nextest run` built, or $PFM_BIN. Installs what it needs, picks a free port, uses
# a temp data directory, stops the server at the end. Screenshots go to browser-screenshots/ (ignored).
set -euo pipefail
cd "$(dirname "$0")/.."
SELENIUM_VERSION=4.45.0

if ! command -v chromium >/dev/null || ! command -v chromedriver >/dev/null; then
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver >/dev/null
fi
if [ "$(python3 -c 'import selenium; print(selenium.__version__)' 2>/dev/null)" != "$SELENIUM_VERSION" ]; then
  python3 -m pip install -q "selenium==$SELENIUM_VERSION"
fi
# PFM_BIN: another build of the server (a release build, another target directory).
bin=${PFM_BIN:-target/debug/pfm}
[ -n "${PFM_BIN:-}" ] || [ -x "$bin" ] || cargo build --locked --bin pfm

data=$(mktemp -d)
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()')
log="$data/pfm.log"
# The walk's webhook receiver listens on 127.0.0.1, which pfm refuses by default (docs/webhooks.md).
JWT_SECRET=browser-test-secret-browser-test-secret RUST_LOG="info,pfm=debug" WEBHOOKS_ALLOW_PRIVATE=true WEBHOOKS_ALLOWED_HOSTS=127.0.0.1 \
  "$bin" --host 127.0.0.1 --port "$port" --data-dir "$data/db" >"$log" 2>&1 &
pid=$!
cleanup() {
  kill "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
  rm -rf "$data"
}
trap cleanup EXIT

for _ in $(seq 1 100); do
  if python3 -c "import urllib.request,sys; urllib.request.urlopen('http://127.0.0.1:$port/__ping__', timeout=1)" 2>/dev/null; then
    break
  fi
  kill -0 "$pid" 2>/dev/null || { echo "pfm exited early:" >&2; cat "$log" >&2; exit 1; }
  sleep 0.1
done

status=0
PFM_URL="http://127.0.0.1:$port" PFM_SHOTS="${PFM_SHOTS:-browser-screenshots}" \
  timeout 210 python3 tests/browser/test_web.py || status=$?
# Tokens (JWTs start with eyJ, access tokens with pfm_pat_), webhook secrets and the test
# password must never reach the server log.
if [ "$status" -eq 0 ] && grep -q -e 'eyJ' -e 'pfm_pat_' -e 'whsec_' -e 'correct horse' "$log"; then
  echo "a token, secret or password appears in the server log" >&2
  status=1
fi
if [ "$status" -ne 0 ]; then
  echo "browser test failed (exit $status); server log:" >&2
  tail -n 50 "$log" >&2
fi
exit "$status"
