#!/usr/bin/env bash
# Runs README.md's curl session and its per-group endpoint examples, in the order written,
# against a fresh debug server on a free loopback port; fails unless every answer succeeds.
set -euo pipefail
cd "$(dirname "$0")/../.."
cargo build --bin pfm
WORK=$(mktemp -d)
PORT=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
RUST_LOG=warn target/debug/pfm --port "$PORT" --data-dir "$WORK/data" & SRV=$!
trap 'kill $SRV 2>/dev/null; wait $SRV 2>/dev/null; rm -rf "$WORK"' EXIT
sleep 1
python3 - "$PORT" >"$WORK/session.sh" <<'PY'
import re, sys
s = open("README.md", encoding="utf-8").read()
out = ["set -euo pipefail"]
for sec in ["## A curl session", "## Endpoints, one example per group"]:
    out.append(re.search(r"```sh\n(.*?)```", s[s.index(sec):], re.S).group(1))
print("\n".join(out).replace("http://127.0.0.1:8000", f"http://127.0.0.1:{sys.argv[1]}"))
PY
bash "$WORK/session.sh" | tee "$WORK/out" | sed 's/}{/}\n{/g'
echo
python3 - "$WORK/out" <<'PY'
import json, sys
text = open(sys.argv[1], encoding="utf-8").read()
answers, dec, i = [], json.JSONDecoder(), 0
while i < len(text):
    v, i = dec.raw_decode(text, i)
    answers.append(v)
bad = [a for a in answers if not (a.get("success") is True or a == {"status": "ok"})]
if bad or len(answers) < 9:
    sys.exit(f"README session failed: {len(answers)} answers, failing: {bad}")
print(f"README session OK: {len(answers)} answers, all successful")
PY
