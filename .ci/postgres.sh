#!/usr/bin/env bash
# Start a throw-away PostgreSQL server on loopback for the distributed-study tests and print its URL.
# Installs Debian's postgresql if absent. PostgreSQL refuses to run as root: the server runs as `postgres`.
# Usage: eval "$(bash .ci/postgres.sh)"   -> exports DSE_TEST_POSTGRES;  bash .ci/postgres.sh --stop
set -euo pipefail
PORT="${DSE_PG_PORT:-55432}"
DATA="${DSE_PG_DATA:-/tmp/dse-ci-pg}"
if ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then
  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql) >&2
fi
BIN="$(dirname "$(ls -d /usr/lib/postgresql/*/bin/initdb | sort -V | tail -n 1)")"
if [[ "$(id -u)" == 0 ]]; then AS=(runuser -u postgres --); else AS=(); fi
if "${AS[@]}" "$BIN/pg_ctl" -D "$DATA" status >/dev/null 2>&1; then
  "${AS[@]}" "$BIN/pg_ctl" -D "$DATA" -m fast stop >&2 || true
fi
if [[ "${1:-}" == "--stop" ]]; then exit 0; fi
rm -rf "$DATA"
mkdir -p "$DATA"
[[ "$(id -u)" == 0 ]] && chown postgres:postgres "$DATA"
"${AS[@]}" "$BIN/initdb" -D "$DATA" -U postgres --auth=trust >/dev/null
"${AS[@]}" "$BIN/pg_ctl" -D "$DATA" -l "$DATA/server.log" -w \
  -o "-c listen_addresses=127.0.0.1 -p $PORT -k /tmp -c max_connections=200" start >&2
"${AS[@]}" "$BIN/psql" -h 127.0.0.1 -p "$PORT" -U postgres -q -c "CREATE ROLE dse LOGIN PASSWORD 's3cret';" >&2
"${AS[@]}" "$BIN/psql" -h 127.0.0.1 -p "$PORT" -U postgres -q -c "CREATE DATABASE dse OWNER dse;" >&2
echo "export DSE_TEST_POSTGRES='postgresql://dse:s3cret@127.0.0.1:$PORT/dse'"
