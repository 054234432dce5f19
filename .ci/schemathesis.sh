#!/usr/bin/env bash
# Property-based API check (docs/api.md): schemathesis reads GET /openapi.json from a live debug
# server and sends generated requests to every operation, with a bearer token of a registered
# user. It passes when no answer is a 5xx and every answer matches the document (status code,
# content type, headers and body schema). Bounded in examples per operation and in time; uses
# the binary that `cargo nextest run` built. One worker: hypothesis 6 on Python 3.11 can fail
# with "AST constructor recursion depth mismatch" when schemathesis draws in several threads.
set -euo pipefail
cd "$(dirname "$0")/.."
SCHEMATHESIS_VERSION=4.32.5
BIN=target/debug/pfm
[ -x "$BIN" ] || cargo build --locked --bin pfm

work=$(mktemp -d)
pid=""
cleanup() {
  if [ -n "$pid" ]; then kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; fi
  rm -rf "$work"
}
trap cleanup EXIT

# SCHEMATHESIS_BIN: an already installed schemathesis of the pinned version (local runs).
st=${SCHEMATHESIS_BIN:-}
if [ -z "$st" ]; then
  python3 -m venv "$work/venv"
  "$work/venv/bin/pip" install --quiet --disable-pip-version-check "schemathesis==$SCHEMATHESIS_VERSION"
  st="$work/venv/bin/schemathesis"
fi

port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
base="http://127.0.0.1:$port"
# Webhooks the fuzzer registers may only name this machine: nothing leaves 127.0.0.1.
WEBHOOKS_ALLOWED_HOSTS=127.0.0.1 WEBHOOKS_ALLOW_PRIVATE=true RUST_LOG=warn "$BIN" --host 127.0.0.1 --port "$port" --data-dir "$work/data" >"$work/server.log" 2>&1 &
pid=$!
for _ in $(seq 1 100); do
  curl -fsS "$base/healthz" >/dev/null 2>&1 && break
  sleep 0.1
done
curl -fsS "$base/healthz" >/dev/null

# A user with a small tree (main, a child, a grandchild, some transactions), so generated
# requests meet real state.
post() { curl -fsS -H 'Content-Type: application/json' -H "Authorization: Bearer ${token:-}" -d "$2" "$base$1"; }
field() { python3 -c "import json,sys; print(json.load(sys.stdin)['$1'])"; }
curl -fsS -H 'Content-Type: application/json' \
  -d '{"user_id":"schemathesis","password":"schemathesis-pw","initial_balance":"1000"}' \
  "$base/register" | field uuid >"$work/main"
token=$(curl -fsS -H 'Content-Type: application/json' \
  -d '{"user_id":"schemathesis","password":"schemathesis-pw"}' "$base/login" | field token)
main=$(cat "$work/main")
child=$(post /add_sub_account "{\"parent_uuid\":\"$main\",\"name\":\"Needs\",\"allocation\":0.5}" | field uuid)
grand=$(post /add_sub_account "{\"parent_uuid\":\"$child\",\"name\":\"Rent\",\"allocation\":1,\"fixed_amount\":100,\"due_date\":\"2030-01-01\",\"freq\":30}" | field uuid)
post /deposit "{\"uuid\":\"$main\",\"amount\":500,\"channel\":\"ABSA\"}" >/dev/null
post /withdraw "{\"uuid\":\"$grand\",\"amount\":10,\"channel\":\"mpesa\"}" >/dev/null

# The served document, with these accounts as examples of the account parameters, so that
# examples and coverage cases reach the success answers and their schemas are checked too.
# /delete gets none: deleting the main account would end the run's state.
curl -fsS "$base/openapi.json" | MAIN="$main" CHILD="$child" GRAND="$grand" python3 -c '
import json, os, sys
doc = json.load(sys.stdin)
ids = [os.environ["MAIN"], os.environ["CHILD"], os.environ["GRAND"]]
names = {"uuid", "parent_uuid", "from_uuid", "to_uuid"}
for path, item in doc["paths"].items():
    if path == "/delete":
        continue
    for op in item.values():
        for p in op.get("parameters", []):
            if p["name"] in names:
                p["examples"] = {f"account{i}": {"value": v} for i, v in enumerate(ids)}
        for media in op.get("requestBody", {}).get("content", {}).values():
            for name, sch in media["schema"].get("properties", {}).items():
                if name in names:
                    sch["examples"] = ids
json.dump(doc, sys.stdout)
' >"$work/openapi.json"

status=0
# Run from the temp dir: schemathesis keeps a .schemathesis/ cache in its working directory.
(cd "$work" && timeout 240 "$st" run "$work/openapi.json" \
  --url "$base" \
  --header "Authorization: Bearer $token" \
  --checks not_a_server_error,response_schema_conformance,status_code_conformance,content_type_conformance,response_headers_conformance \
  --phases examples,coverage,fuzzing \
  --max-examples 25 \
  --max-time 60 \
  --request-timeout 10 \
  --seed 8 \
  --workers 1 \
  --no-color) || status=$?
if [ "$status" -ne 0 ]; then
  echo "schemathesis failed (exit $status); server log tail:" >&2
  tail -n 50 "$work/server.log" >&2
fi
# The server must still be alive and ready after the run.
curl -fsS "$base/readyz" >/dev/null || { echo "server not ready after the run" >&2; status=1; }
exit "$status"
