#!/bin/sh
# compose.ha.yaml's primary lets the standby connect for replication (the postgres image's own
# pg_hba.conf does not): run once, by the image's entrypoint, when the data folder is made.
echo "host replication ${POSTGRES_USER:-postgres} all scram-sha-256" >>"$PGDATA/pg_hba.conf"
