#!/usr/bin/env bash
# Start a PostgreSQL (Debian's postgresql, 15) for the HA store tests on 127.0.0.1:PORT, data in
# DIR/data, trust auth on loopback only, one role+database `minutiae`. Run as root it runs the
# server as the `postgres` user (PostgreSQL refuses root). Prints the DSN into DIR/dsn.
#   postgres-up.sh DIR [PORT]        -> MINUTIAE_PG_DSN=postgresql://minutiae@127.0.0.1:PORT/minutiae
set -euo pipefail
DIR=${1:?usage: postgres-up.sh DIR [PORT]}; PORT=${2:-15432}
BIN=$(dirname "$(readlink -f "$(command -v pg_ctl || echo /usr/lib/postgresql/15/bin/pg_ctl)")")
[ -x "$BIN/pg_ctl" ] || { echo "postgres-up: pg_ctl not found (apt-get install postgresql)" >&2; exit 1; }
mkdir -p "$DIR"; DIR=$(cd "$DIR" && pwd)
as() { if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi; }
[ "$(id -u)" = 0 ] && chown postgres "$DIR"
if [ ! -f "$DIR/data/PG_VERSION" ]; then
  as "$BIN/initdb" -D "$DIR/data" -U postgres -A trust --no-sync -E UTF8 >"$DIR/initdb.log" 2>&1 \
    || { cat "$DIR/initdb.log" >&2; exit 1; }
fi
as "$BIN/pg_ctl" -D "$DIR/data" -l "$DIR/postgres.log" -w -t 60 start -o \
  "-c listen_addresses=127.0.0.1 -c port=$PORT -c unix_socket_directories=$DIR -c max_connections=200 -c fsync=off -c synchronous_commit=off -c full_page_writes=off" >/dev/null
head -1 "$DIR/data/postmaster.pid" > "$DIR/postgres.pid"
psql() { as "$BIN/psql" -h 127.0.0.1 -p "$PORT" -U postgres -qAt "$@"; }
[ "$(psql -c "SELECT 1 FROM pg_roles WHERE rolname='minutiae'")" = 1 ] || psql -c "CREATE ROLE minutiae LOGIN"
[ "$(psql -c "SELECT 1 FROM pg_database WHERE datname='minutiae'")" = 1 ] || psql -c "CREATE DATABASE minutiae OWNER minutiae"
echo "postgresql://minutiae@127.0.0.1:$PORT/minutiae" > "$DIR/dsn"
