#!/usr/bin/env bash
# Start a throwaway PostgreSQL server for the store tests on 127.0.0.1 and print its URL (last
# line of stdout). Idempotent: installs Debian's postgresql if missing, reuses a running server.
#   export AL_TEST_POSTGRES_URL="$(bash .ci/postgres.sh | tail -n1)"
# Settings (env): AL_PG_PORT (5433), AL_PG_DATA (/var/tmp/al-postgres), AL_PG_DB (al_test).
set -euo pipefail
port="${AL_PG_PORT:-5433}"
data="${AL_PG_DATA:-/var/tmp/al-postgres}"
dbname="${AL_PG_DB:-al_test}"

if ! ls /usr/lib/postgresql/*/bin/pg_ctl >/dev/null 2>&1; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -q >/dev/null
  apt-get install -y -q --no-install-recommends postgresql >/dev/null
fi
bin="$(dirname "$(ls -d /usr/lib/postgresql/*/bin/pg_ctl | sort -V | tail -n1)")"
as_pg() { runuser -u postgres -- "$@"; }

if [ ! -s "$data/PG_VERSION" ]; then
  install -d -o postgres -g postgres -m 0700 "$data"
  as_pg "$bin/initdb" -D "$data" -U postgres --auth=trust -E UTF8 --locale=C.UTF-8 >/dev/null
fi
if ! as_pg "$bin/pg_ctl" -D "$data" status >/dev/null 2>&1; then
  as_pg "$bin/pg_ctl" -D "$data" -l "$data/server.log" -w -t 60 \
    -o "-k /tmp -p $port -c listen_addresses=127.0.0.1 -c max_connections=200" \
    start >/dev/null
fi
if ! as_pg "$bin/psql" -h 127.0.0.1 -p "$port" -Atqc "SELECT 1 FROM pg_database WHERE datname = '$dbname'" | grep -q 1; then
  as_pg "$bin/createdb" -h 127.0.0.1 -p "$port" "$dbname"
fi
echo "postgresql://postgres@127.0.0.1:$port/$dbname"
