#!/bin/sh
# The start of the postgres image, for what compose.yaml and compose.ha.yaml give it: on an empty
# PGDATA, a cluster whose superuser is POSTGRES_USER with POSTGRES_PASSWORD, a database
# POSTGRES_DB, password (scram-sha-256) connections from the other containers, and the scripts
# of /docker-entrypoint-initdb.d run; then the server in the foreground as PID 1, as user
# postgres, with the command's settings (`postgres -c name=value ...`). Any other command (a
# standby's bash, which copies the primary first) runs as it is.
set -eu
: "${PGDATA:=/var/lib/postgresql/data}"

case "${1:-}" in
    -*) set -- postgres "$@" ;;  # settings alone, as the postgres image takes them
esac
if [ "${1:-}" != postgres ]; then
    exec "$@"
fi

if [ "$(id -u)" = 0 ]; then
    mkdir -p "$PGDATA" /run/postgresql
    chown postgres:postgres "$PGDATA" /run/postgresql
    chmod 700 "$PGDATA"
    exec setpriv --reuid=postgres --regid=postgres --init-groups "$0" "$@"
fi
shift

# As the postgres image runs them, once, on a new cluster: *.sh run (sourced when not
# executable), *.sql given to psql, in the order of their names, while the server listens on
# its socket only.
init_scripts() {
    [ -n "$(ls -A /docker-entrypoint-initdb.d 2>/dev/null)" ] || return 0
    pg_ctl -D "$PGDATA" -o "-c listen_addresses=''" -w start >/dev/null
    for script in /docker-entrypoint-initdb.d/*; do
        case $script in
            *.sh)
                echo "running $script"
                if [ -x "$script" ]; then "$script"; else . "$script"; fi
                ;;
            *.sql)
                echo "running $script"
                psql -v ON_ERROR_STOP=1 --no-psqlrc -U "$1" -d "$2" -f "$script"
                ;;
            *) echo "ignoring $script" ;;
        esac
    done
    pg_ctl -D "$PGDATA" -m fast -w stop >/dev/null
}

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
    init_scripts "$user" "$database"
    echo "initialised $PGDATA: user $user, database $database"
fi

# listen_addresses: a cluster made by an older image has 'localhost' in its postgresql.conf
exec postgres -D "$PGDATA" -c listen_addresses='*' "$@"
