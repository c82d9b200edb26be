#!/bin/sh
# The start of the postgres image, for the variables compose.yaml gives it: on an empty PGDATA,
# a cluster whose superuser is POSTGRES_USER with POSTGRES_PASSWORD, a database POSTGRES_DB, and
# password (scram-sha-256) connections from the other containers; then the server in the
# foreground as PID 1, as user postgres.
set -eu
: "${PGDATA:=/var/lib/postgresql/data}"

if [ "$(id -u)" = 0 ]; then
    mkdir -p "$PGDATA" /run/postgresql
    chown postgres:postgres "$PGDATA" /run/postgresql
    chmod 700 "$PGDATA"
    exec setpriv --reuid=postgres --regid=postgres --init-groups "$0" "$@"
fi

if [ "${1:-}" != postgres ]; then
    exec "$@"
fi
shift

if [ ! -s "$PGDATA/PG_VERSION" ]; then
    user=${POSTGRES_USER:-postgres}
    database=${POSTGRES_DB:-$user}
    password_file=$(mktemp)
    printf '%s\n' "${POSTGRES_PASSWORD:?POSTGRES_PASSWORD is not set}" >"$password_file"
    initdb --pgdata="$PGDATA" --username="$user" --pwfile="$password_file" --encoding=UTF8 \
        --locale=C.UTF-8 --auth-local=trust --auth-host=scram-sha-256 >/dev/null
    rm -f "$password_file"
    echo "host all all all scram-sha-256" >>"$PGDATA/pg_hba.conf"
    if [ "$database" != postgres ]; then
        echo "CREATE DATABASE \"$database\" OWNER \"$user\";" \
            | postgres --single -D "$PGDATA" -c log_min_messages=warning postgres >/dev/null
    fi
    echo "initialised $PGDATA: user $user, database $database"
fi

exec postgres -D "$PGDATA" -c listen_addresses='*' "$@"
