#!/usr/bin/env bash
# Failover of the PostgreSQL engine (docs/failover.md): a primary and a synchronous standby
# (streaming replication; loopback only, as the postgres user, in a temp dir), then
# tests/pg_failover.rs: a pfm node on the multi-host URL, the primary killed (-9, every process
# of it) under load, the standby promoted, every acknowledged write checked. Stops the servers at
# the end. Uses the build nextest already made when there is one.
set -euo pipefail
cd "$(dirname "$0")/.."

pg_bin() { ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1; }
if [ -z "$(pg_bin)" ] || ! command -v ps >/dev/null; then
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive timeout 600 apt-get install -y -qq postgresql procps >/dev/null
fi
PGBIN=$(pg_bin)
[ -n "$PGBIN" ] || { echo "PostgreSQL binaries not found" >&2; exit 1; }

# The server refuses to run as root: run its tools as the postgres user when we are root.
as_pg() {
  if [ "$(id -u)" = 0 ]; then su postgres -s /bin/sh -c "$*"; else sh -c "$*"; fi
}
as_pg_cmd() {
  if [ "$(id -u)" = 0 ]; then echo "su postgres -s /bin/sh -c '$*'"; else echo "$*"; fi
}
PGUSER_NAME=$( [ "$(id -u)" = 0 ] && echo postgres || id -un )

DIR=$(mktemp -d /tmp/pfm-failover.XXXXXX)
chmod 755 "$DIR"
[ "$(id -u)" = 0 ] && chown postgres "$DIR"
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
P1=$(free_port)
P2=$(free_port)
while [ "$P2" = "$P1" ]; do P2=$(free_port); done
stop() {
  for d in primary standby; do
    as_pg "$PGBIN/pg_ctl -D $DIR/$d -m immediate stop" >/dev/null 2>&1 || true
  done
  rm -rf "$DIR"
}
trap stop EXIT

COMMON="-k $DIR -c listen_addresses=127.0.0.1 -c max_connections=200"
as_pg "$PGBIN/initdb -D $DIR/primary --auth=trust -U $PGUSER_NAME" >/dev/null
# A commit is acknowledged once the standby named standby1 has it on disk too
# (synchronous_commit=on is the default).
as_pg "$PGBIN/pg_ctl -D $DIR/primary -l $DIR/primary.log -w -t 60 \
  -o \"-p $P1 $COMMON -c synchronous_standby_names=standby1\" start" >/dev/null
as_pg "$PGBIN/pg_basebackup -h 127.0.0.1 -p $P1 -U $PGUSER_NAME -D $DIR/standby -X stream -R" >/dev/null
# cluster_name is the name the standby's WAL receiver gives the primary. The standby's own
# synchronous_standby_names stays empty: once promoted it has no standby of its own to wait for.
as_pg "$PGBIN/pg_ctl -D $DIR/standby -l $DIR/standby.log -w -t 60 \
  -o \"-p $P2 $COMMON -c cluster_name=standby1\" start" >/dev/null
for _ in $(seq 1 300); do
  state=$(as_pg "$PGBIN/psql -h 127.0.0.1 -p $P1 -U $PGUSER_NAME -d postgres -Atc \
    \"SELECT sync_state FROM pg_stat_replication WHERE application_name = 'standby1'\"")
  [ "$state" = sync ] && break
  sleep 0.1
done
[ "$state" = sync ] || { echo "the standby did not become synchronous" >&2; cat "$DIR/standby.log" >&2; exit 1; }
as_pg "$PGBIN/createdb -h 127.0.0.1 -p $P1 -U $PGUSER_NAME pfm"
echo "PostgreSQL $("$PGBIN/postgres" --version | awk '{print $3}'): primary 127.0.0.1:$P1, synchronous standby 127.0.0.1:$P2"

PM=$(head -n 1 "$DIR/primary/postmaster.pid")
export PFM_TEST_FAILOVER=1
export PFM_TEST_FAILOVER_URL="postgres://$PGUSER_NAME@127.0.0.1:$P1,127.0.0.1:$P2/pfm?target_session_attrs=read-write"
export PFM_TEST_FAILOVER_STANDBY_URL="postgres://$PGUSER_NAME@127.0.0.1:$P2/pfm"
# The machine dies: the postmaster and every process it started, at once.
export PFM_TEST_FAILOVER_KILL="kill -9 $PM \$(ps -o pid= --ppid $PM)"
export PFM_TEST_FAILOVER_PROMOTE="$(as_pg_cmd "$PGBIN/pg_ctl -D $DIR/standby -w -t 60 promote") >/dev/null"

timeout 300 cargo nextest run --locked --no-fail-fast --no-capture -E 'binary(pg_failover)'
