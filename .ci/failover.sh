#!/usr/bin/env bash
# Failover of the PostgreSQL engine (docs/failover.md), twice: each time a primary and a
# synchronous standby (streaming replication; loopback only, as the postgres user, in a temp
# dir), then tests/pg_failover.rs: a pfm node on the multi-host URL, the primary killed under
# load, the standby promoted, every acknowledged write checked. First kill -9 of the postmaster
# alone (its backends left to notice), then of the postmaster and every process it started at
# once (the machine dies). Stops the servers at the end. Uses the build nextest already made when
# there is one.
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
stop() {
  for d in "$DIR"/*/primary "$DIR"/*/standby; do
    [ -d "$d" ] || continue
    as_pg "$PGBIN/pg_ctl -D $d -m immediate stop" >/dev/null 2>&1 || true
  done
  rm -rf "$DIR"
}
trap stop EXIT

# A primary on $P1 and its synchronous standby on $P2, in $D, with a database pfm; $PM is the
# primary's postmaster.
pair() {
  D=$DIR/$1
  mkdir "$D"
  [ "$(id -u)" = 0 ] && chown postgres "$D"
  P1=$(free_port)
  P2=$(free_port)
  while [ "$P2" = "$P1" ]; do P2=$(free_port); done
  local common="-k $D -c listen_addresses=127.0.0.1 -c max_connections=200"
  as_pg "$PGBIN/initdb -D $D/primary --auth=trust -U $PGUSER_NAME" >/dev/null
  # A commit is acknowledged once the standby named standby1 has it on disk too
  # (synchronous_commit=on is the default).
  as_pg "$PGBIN/pg_ctl -D $D/primary -l $D/primary.log -w -t 60 \
    -o \"-p $P1 $common -c synchronous_standby_names=standby1\" start" >/dev/null
  as_pg "$PGBIN/pg_basebackup -h 127.0.0.1 -p $P1 -U $PGUSER_NAME -D $D/standby -X stream -R" >/dev/null
  # cluster_name is the name the standby's WAL receiver gives the primary. The standby's own
  # synchronous_standby_names stays empty: once promoted it has no standby of its own to wait for.
  as_pg "$PGBIN/pg_ctl -D $D/standby -l $D/standby.log -w -t 60 \
    -o \"-p $P2 $common -c cluster_name=standby1\" start" >/dev/null
  local state=
  for _ in $(seq 1 300); do
    state=$(as_pg "$PGBIN/psql -h 127.0.0.1 -p $P1 -U $PGUSER_NAME -d postgres -Atc \
      \"SELECT sync_state FROM pg_stat_replication WHERE application_name = 'standby1'\"")
    [ "$state" = sync ] && break
    sleep 0.1
  done
  [ "$state" = sync ] || { echo "the standby did not become synchronous" >&2; cat "$D/standby.log" >&2; exit 1; }
  as_pg "$PGBIN/createdb -h 127.0.0.1 -p $P1 -U $PGUSER_NAME pfm"
  PM=$(head -n 1 "$D/primary/postmaster.pid")
  echo "PostgreSQL $("$PGBIN/postgres" --version | awk '{print $3}'): primary 127.0.0.1:$P1, synchronous standby 127.0.0.1:$P2"
}

# Runs the test on the pair in $D with kill command $2, named $1.
failover() {
  export PFM_TEST_FAILOVER=1
  export PFM_TEST_FAILOVER_NAME=$1
  export PFM_TEST_FAILOVER_KILL=$2
  export PFM_TEST_FAILOVER_URL="postgres://$PGUSER_NAME@127.0.0.1:$P1,127.0.0.1:$P2/pfm?target_session_attrs=read-write"
  export PFM_TEST_FAILOVER_STANDBY_URL="postgres://$PGUSER_NAME@127.0.0.1:$P2/pfm"
  PFM_TEST_FAILOVER_PROMOTE="$(as_pg_cmd "$PGBIN/pg_ctl -D $D/standby -w -t 60 promote") >/dev/null"
  export PFM_TEST_FAILOVER_PROMOTE
  timeout 300 cargo nextest run --locked --no-fail-fast --no-capture -E 'binary(pg_failover)'
}

pair postmaster
failover "kill -9 of the postmaster" "kill -9 $PM"
pair machine
failover "kill -9 of the postmaster and all its processes" "kill -9 $PM \$(ps -o pid= --ppid $PM)"
