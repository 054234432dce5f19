#!/usr/bin/env bash
# Read-path figure of issue 6: authenticated GET /get_balance (and /__ping__) as a ratio of the
# bare hyper example's throughput, measured in the same run, wrk -t1 -c32 pinned to core 1 (the
# servers are not pinned). The baseline is taken before and after and averaged; each run also
# gives the server's CPU time per request. Loopback only;
# every run is bounded in time. Usage: scripts/read_bench.sh [seconds=5] [rounds=3]
set -euo pipefail
cd "$(dirname "$0")/.."
DUR=${1:-5}
ROUNDS=${2:-3}
command -v wrk >/dev/null || { apt-get update -qq && apt-get install -y -qq wrk; }
cargo build --release --bin pfm --example bare_hyper >/dev/null
mkdir -p target/bench-tmp
W=$(mktemp -d -p target/bench-tmp read.XXXXXX)
SECRET=read-bench-secret-read-bench-secret-00
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
BP=$(free_port); PP=$(free_port)
./target/release/examples/bare_hyper "$BP" & BARE=$!
JWT_SECRET=$SECRET MAX_REQUESTS=1000000000 RUST_LOG=warn ./target/release/pfm --port "$PP" --data-dir "$W/d" >/dev/null 2>&1 & PFM=$!
trap 'kill $BARE $PFM 2>/dev/null; wait $BARE $PFM 2>/dev/null; rm -rf "$W"' EXIT
for port in "$BP" "$PP"; do
  for _ in $(seq 100); do curl -s -o /dev/null "http://127.0.0.1:$port/__ping__" && break; sleep 0.1; done
done
TOKEN=$(python3 - "$SECRET" <<'PY'
import base64, hmac, hashlib, json, sys
b = lambda d: base64.urlsafe_b64encode(d).rstrip(b"=").decode()
h = b(json.dumps({"alg": "HS256", "typ": "JWT"}).encode())
p = b(json.dumps({"user_id": "load", "role": "user", "iat": 1}).encode())
s = b(hmac.new(sys.argv[1].encode(), f"{h}.{p}".encode(), hashlib.sha256).digest())
print(f"{h}.{p}.{s}")
PY
)
MAIN=$(curl -s -XPOST "http://127.0.0.1:$PP/register" -H "Authorization: Bearer $TOKEN" -d 'user_id=load&initial_balance=1000' | python3 -c 'import sys,json;print(json.load(sys.stdin)["uuid"])')
# One wrk run: prints "req/s cpu_us_per_request" where the CPU is the server's (user + system,
# from /proc/PID/stat). CPU per request barely moves when the machine's neighbours do, so it is
# the steadier figure on a shared VM; req/s is what the issue's ratio is defined on.
TICK=$(getconf CLK_TCK)
r() {
  local pid=$1; shift
  local c0 c1 out
  c0=$(awk '{print $14+$15}' "/proc/$pid/stat")
  out=$(taskset -c 1 wrk -t1 -c32 -d"${DUR}s" "$@" 2>/dev/null)
  c1=$(awk '{print $14+$15}' "/proc/$pid/stat")
  echo "$out" | awk -v c0="$c0" -v c1="$c1" -v tick="$TICK" \
    '/requests in/ {n=$1} /Requests\/sec/ {rps=$2} END {printf "%s %.1f\n", rps, (c1-c0)*1e6/tick/n}'
}
printf '%-6s %10s %10s %6s %10s %6s %8s %8s %8s\n' round bare ping ratio balance ratio bare_us ping_us bal_us
for i in $(seq "$ROUNDS"); do
  read -r b1 cb1 < <(r "$BARE" "http://127.0.0.1:$BP/")
  read -r p cp < <(r "$PFM" "http://127.0.0.1:$PP/__ping__")
  read -r g cg < <(r "$PFM" -H "Authorization: Bearer $TOKEN" "http://127.0.0.1:$PP/get_balance?uuid=$MAIN")
  read -r b2 cb2 < <(r "$BARE" "http://127.0.0.1:$BP/")
  python3 -c "
b=($b1+$b2)/2
print(f'{$i:<6} {b:>10.0f} {$p:>10.0f} {$p/b:>6.2f} {$g:>10.0f} {$g/b:>6.2f} {($cb1+$cb2)/2:>8.1f} {$cp:>8.1f} {$cg:>8.1f}')"
done
