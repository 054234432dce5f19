#!/usr/bin/env bash
# The PostgreSQL engine's CI run: installs PostgreSQL when missing, starts a throwaway server
# (as the postgres user, in a temp dir, loopback only), runs the HTTP suite against it and the
# multi-node tests, and stops the server at the end. Uses the build nextest already made.
set -euo pipefail
cd "$(dirname "$0")/.."

pg_bin() { ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1; }
if [ -z "$(pg_bin)" ]; then
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null
fi
PGBIN=$(pg_bin)
[ -n "$PGBIN" ] || { echo "PostgreSQL binaries not found" >&2; exit 1; }

# The server refuses to run as root: run its tools as the postgres user when we are root.
as_pg() {
  if [ "$(id -u)" = 0 ]; then su postgres -s /bin/sh -c "$*"; else sh -c "$*"; fi
}
PGUSER_NAME=$( [ "$(id -u)" = 0 ] && echo postgres || id -un )

DIR=$(mktemp -d /tmp/pfm-pg.XXXXXX)
chmod 755 "$DIR"
[ "$(id -u)" = 0 ] && chown postgres "$DIR"
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
stop() {
  as_pg "$PGBIN/pg_ctl -D $DIR/data -m immediate stop" >/dev/null 2>&1 || true
  rm -rf "$DIR"
}
trap stop EXIT

as_pg "$PGBIN/initdb -D $DIR/data --auth=trust --no-sync -U $PGUSER_NAME" >/dev/null
# fsync off: the tests kill pfm processes, never the database, and CI time is short.
as_pg "$PGBIN/pg_ctl -D $DIR/data -l $DIR/log -w -t 60 \
  -o \"-p $PORT -k $DIR -c listen_addresses=127.0.0.1 -c max_connections=400 -c fsync=off \
  -c synchronous_commit=off -c full_page_writes=off\" start" >/dev/null
export PFM_TEST_DATABASE_URL="postgres://$PGUSER_NAME@127.0.0.1:$PORT/postgres"
echo "PostgreSQL $("$PGBIN/postgres" --version | awk '{print $3}') on 127.0.0.1:$PORT"

# Every HTTP test binary against PostgreSQL (the ones that only drive the embedded engine's
# files, journal or real-binary restarts on a data dir are left out), plus the multi-node tests.
timeout 900 cargo nextest run --locked --no-fail-fast \
  -E 'kind(test) and not binary(crash) and not binary(journal) and not binary(format_v1) and not binary(process) and not binary(properties)'
