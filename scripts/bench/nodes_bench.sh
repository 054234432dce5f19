#!/usr/bin/env bash
# Several nodes: deposits/s and get_balance/s on the embedded engine (one node, sled + journal)
# against the PostgreSQL engine on 1 and on 2 nodes sharing one database, in one run. Starts its
# own PostgreSQL (durable defaults: fsync on, synchronous_commit on) in a temp dir on the
# project's disk, loopback only; every wrk run is bounded in time; ends with a money check on
# every user of the shared database. In the same run, pgbench on the same server at the same
# concurrency measures the commit ceiling (a one-row insert per transaction), reported with pfm's
# PostgreSQL deposits/s as a ratio of it; pg_stat_statements counts the statements and
# transactions the database ran per deposit.
# Usage: scripts/bench/nodes_bench.sh [seconds=10]   Env: USERS (default 64), CONNS (default 32),
# PFM_BIN (default: a release build of pfm).
set -euo pipefail
cd "$(dirname "$0")/../.."
DUR=${1:-10}
USERS=${USERS:-64}
CONNS=${CONNS:-32}
command -v wrk >/dev/null || { apt-get update -qq && apt-get install -y -qq wrk; }
PGBIN=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1 || true)
if [ -z "$PGBIN" ]; then
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null
  PGBIN=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -n 1)
fi
if [ -z "${PFM_BIN:-}" ]; then
  cargo build --release --bin pfm >/dev/null
  PFM_BIN=./target/release/pfm
fi
mkdir -p target/bench-tmp
WORK=$(mktemp -d -p "$PWD/target/bench-tmp" nodes.XXXXXX)
chmod 755 "$WORK"
SECRET=nodes-bench-secret-nodes-bench-secret-00
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
as_pg() { if [ "$(id -u)" = 0 ]; then su postgres -s /bin/sh -c "$*"; else sh -c "$*"; fi; }
PGUSER_NAME=$( [ "$(id -u)" = 0 ] && echo postgres || id -un )
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  as_pg "$PGBIN/pg_ctl -D $WORK/pg/data -m fast stop" >/dev/null 2>&1 || true
  rm -rf "$WORK"
}
trap cleanup EXIT

mkdir -p "$WORK/pg"
[ "$(id -u)" = 0 ] && chown postgres "$WORK/pg"
PG_PORT=$(free_port)
as_pg "$PGBIN/initdb -D $WORK/pg/data --auth=trust -U $PGUSER_NAME" >/dev/null
as_pg "$PGBIN/pg_ctl -D $WORK/pg/data -l $WORK/pg/log -w -t 60 \
  -o \"-p $PG_PORT -k $WORK/pg -c listen_addresses=127.0.0.1 -c max_connections=200 \
  -c shared_preload_libraries=pg_stat_statements\" start" >/dev/null
ADMIN="postgres://$PGUSER_NAME@127.0.0.1:$PG_PORT/postgres"
"$PGBIN/psql" -q "$ADMIN" -c "CREATE DATABASE pfm_bench"
DB="postgres://$PGUSER_NAME@127.0.0.1:$PG_PORT/pfm_bench"
"$PGBIN/psql" -q "$DB" -c "CREATE EXTENSION pg_stat_statements"
"$PGBIN/psql" -q "$ADMIN" -c "CREATE DATABASE ceiling"
CEIL="postgres://$PGUSER_NAME@127.0.0.1:$PG_PORT/ceiling"
"$PGBIN/psql" -q "$CEIL" -c "CREATE TABLE one_row (id bigserial PRIMARY KEY, v int NOT NULL)"
echo "INSERT INTO one_row (v) VALUES (1);" >"$WORK/ceiling.sql"

# start NAME ARGS...: one pfm node; its port in $PORT.
start() {
  PORT=$(free_port)
  JWT_SECRET=$SECRET MAX_REQUESTS=1000000000 RUST_LOG=warn \
    "$PFM_BIN" --host 127.0.0.1 --port "$PORT" "$@" & PIDS+=($!)
  for _ in $(seq 100); do curl -s -o /dev/null "http://127.0.0.1:$PORT/__ping__" && return; sleep 0.1; done
  echo "pfm did not start: $*" >&2; exit 1
}
start --data-dir "$WORK/sled"; SLED=$PORT
start --data-dir "$WORK/n1" --database-url "$DB"; PG1=$PORT
start --data-dir "$WORK/n2" --database-url "$DB"; PG2=$PORT

PY="python3 scripts/bench/pfm_bench.py"
$PY setup "$SLED" "$SECRET" "$USERS" u tree3 "$WORK/sled.json"
$PY setup "$PG1" "$SECRET" "$USERS" u tree3 "$WORK/pg.json"
python3 - "$WORK" "$USERS" <<'PY'
import json, sys
sys.path.insert(0, "scripts/bench")
import pfm_bench as b
work, n = sys.argv[1], int(sys.argv[2])
for engine in ("sled", "pg"):
    users = json.load(open(f"{work}/{engine}.json"))[:n]
    dep, bal = ["local reqs = {}"], ["local reqs = {}"]
    for u in users:
        auth = '["Authorization"] = "Bearer %s"' % u["token"]
        body = f"uuid={u['accounts']['Main']}&amount=1.01&channel=load"
        dep.append('reqs[#reqs + 1] = wrk.format("POST", "/deposit", {%s, '
                   '["Content-Type"] = "application/x-www-form-urlencoded"}, "%s")' % (auth, body))
        bal.append('reqs[#reqs + 1] = wrk.format("GET", "/get_balance?uuid=%s", {%s})'
                   % (u["accounts"]["Needs"], auth))
    open(f"{work}/{engine}-deposit.lua", "w").write("\n".join(dep + [b.LUA_TAIL]))
    open(f"{work}/{engine}-balance.lua", "w").write("\n".join(bal + [b.LUA_TAIL]))
PY

ROWS=$WORK/rows
# run NAME LUA PORT...: wrk on every port at once (CONNS split between them); one summed row.
run() {
  local name=$1 lua=$2; shift 2
  local n=$# per=$((CONNS / $#)) outs=() i=0
  for port in "$@"; do
    wrk -t1 -c"$per" -d"${DUR}s" --timeout 10s -s "$lua" "http://127.0.0.1:$port/" >"$WORK/wrk.$i" 2>&1 &
    outs+=($!); i=$((i + 1))
  done
  wait "${outs[@]}"
  python3 - "$name" "$n" "$CONNS" "$WORK" >>"$ROWS" <<'PY'
import re, sys
name, n, conns, work = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
rps = reqs = bad = 0.0
p99 = 0
for i in range(n):
    m = dict(re.findall(r"(\w+)=([\d.]+)", next(l for l in open(f"{work}/wrk.{i}") if l.startswith("RESULT"))))
    rps += float(m["rps"]); bad += int(m["non2xx"]) + int(m["sockerr"]); p99 = max(p99, int(m["p99"]))
print(name, n, conns, f"{rps:.0f}", p99, int(bad))
PY
}
# ceiling: pgbench's one-row insert transactions/s at CONNS clients, a row like run's.
ceiling() {
  local tps
  tps=$("$PGBIN/pgbench" -n -M prepared -c "$CONNS" -j 2 -T "$DUR" -f "$WORK/ceiling.sql" "$CEIL" 2>&1 |
    awk '/^tps = /{printf "%.0f", $3}')
  echo "pgbench one-row-insert 1 $CONNS ${tps:-0} 0 0" >>"$ROWS"
  CEILING_TPS=${tps:-0}
}
# pg_counts: statements and committed transactions pfm's database has run so far.
pg_counts() {
  "$PGBIN/psql" -qAt "$DB" -c "SELECT (SELECT coalesce(sum(calls), 0) FROM pg_stat_statements s \
    JOIN pg_database d ON d.oid = s.dbid WHERE d.datname = 'pfm_bench'), \
    (SELECT xact_commit FROM pg_stat_database WHERE datname = 'pfm_bench')"
}
sleep 1
run "deposit sled" "$WORK/sled-deposit.lua" "$SLED"
ceiling
"$PGBIN/psql" -qAt "$DB" -c "SELECT pg_stat_statements_reset()" >/dev/null
BEFORE=$(pg_counts)
run "deposit postgres" "$WORK/pg-deposit.lua" "$PG1"
AFTER=$(pg_counts)
DEPOSITS=$(awk '/^RESULT/{for (i = 1; i <= NF; i++) if ($i ~ /^requests=/) {sub("requests=", "", $i); print $i}}' "$WORK/wrk.0")
PG1_RPS=$(tail -n 1 "$ROWS" | awk '{print $5}')
run "deposit postgres" "$WORK/pg-deposit.lua" "$PG1" "$PG2"
PG2_RPS=$(tail -n 1 "$ROWS" | awk '{print $5}')
run "get_balance sled" "$WORK/sled-balance.lua" "$SLED"
run "get_balance postgres" "$WORK/pg-balance.lua" "$PG1"
run "get_balance postgres" "$WORK/pg-balance.lua" "$PG1" "$PG2"
echo "pfm nodes benchmark: wrk -d${DUR}s, $USERS users rotated, $CONNS connections in all (split over the nodes)"
printf '%-22s %5s %5s %9s %8s %7s\n' endpoint/engine nodes conns req/s p99ms errors
while read -r a b n c rps p99 bad; do
  printf '%-22s %5s %5s %9s %8s %7s\n' "$a $b" "$n" "$c" "$rps" "$(awk "BEGIN{printf \"%.1f\", $p99 / 1000}")" "$bad"
done <"$ROWS"
python3 - "$CEILING_TPS" "$PG1_RPS" "$PG2_RPS" "$BEFORE" "$AFTER" "$DEPOSITS" <<'PY'
import sys
ceil, one, two = (float(x) for x in sys.argv[1:4])
(s0, x0), (s1, x1) = (map(int, v.split("|")) for v in sys.argv[4:6])
n = max(int(sys.argv[6]), 1)
if ceil > 0:
    print(f"postgres deposits / pgbench one-row insert: 1 node {one / ceil:.2f}x, 2 nodes {two / ceil:.2f}x")
print(f"per deposit (1 node, pg_stat_statements): {(s1 - s0) / n:.2f} statements, "
      f"{(x1 - x0) / n:.2f} transactions")
PY
# Money check: every user on the shared database adds up the same on both nodes.
python3 - "$PG1" "$PG2" "$WORK/pg.json" <<'PY'
import json, sys
sys.path.insert(0, "scripts/bench")
import pfm_bench as b
p1, p2, users = int(sys.argv[1]), int(sys.argv[2]), json.load(open(sys.argv[3]))
for u in users:
    vals = []
    for port in (p1, p2):
        c = b.Client(port, u["token"])
        t = c.ok("GET", "/compute_total_balance", {"uuid": u["accounts"]["Main"]})["total_balance"]
        kids = sum(b.cents(c.ok("GET", "/get_balance", {"uuid": u["accounts"][k]})["balance"]) for k in ("Main", "Needs", "Savings"))
        if b.cents(t) != kids:
            raise SystemExit(f"{u['user']}: total {t} != sum of balances {kids / 100}")
        vals.append(b.cents(t))
    if vals[0] != vals[1]:
        raise SystemExit(f"{u['user']}: nodes disagree {vals}")
print(f"money check: {len(users)} users add up and read the same on both nodes")
PY
