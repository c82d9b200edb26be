#!/usr/bin/env bash
# Base images from Debian's packages, for a build host that reaches Debian's package repositories
# but no container registry: a Python 3.11 image with pip and venv (standing in for
# python:3.11-slim), a PostgreSQL image (standing in for the postgres image of compose.yaml and
# compose.ha.yaml), an nginx image (standing in for compose.ha.yaml's load balancer) and a
# mosquitto image (the MQTT broker of compose.wis2.yaml, from Debian's package). Each is
# a `debootstrap --variant=minbase` root file system imported with `podman import`, carrying this
# host's CA certificates (pip then verifies TLS as the host does).
#
#   deploy/containers/base-images.sh            # build the images that are missing or stale
#   deploy/containers/base-images.sh python     # only the Python one (or: postgres, nginx, mosquitto)
#   REBUILD=1 deploy/containers/base-images.sh  # build them again
#
# Then: podman build --build-arg PYTHON_IMAGE=localhost/wiscat-base/python:3.11-bookworm ...
# and POSTGRES_IMAGE=localhost/wiscat-base/postgres:15-bookworm,
# LB_IMAGE=localhost/wiscat-base/nginx:1.22-bookworm for compose (docs/deploy.md), and
# MOSQUITTO_IMAGE=localhost/wiscat-base/mosquitto:2-bookworm for compose.wis2.yaml.
set -euo pipefail

SUITE=${DEBIAN_SUITE:-bookworm}
MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
PYTHON_BASE=${PYTHON_BASE:-localhost/wiscat-base/python:3.11-$SUITE}
POSTGRES_BASE=${POSTGRES_BASE:-localhost/wiscat-base/postgres:15-$SUITE}
NGINX_BASE=${NGINX_BASE:-localhost/wiscat-base/nginx:1.22-$SUITE}
MOSQUITTO_BASE=${MOSQUITTO_BASE:-localhost/wiscat-base/mosquitto:2-$SUITE}
HERE=$(cd "$(dirname "$0")" && pwd)

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# An image made by an older recipe (this script or the entrypoint since changed) is made again.
RECIPE_LABEL=org.wiscat.base-recipe
recipe() {
    { declare -f rootfs "${1}_base"; [ "$1" != postgres ] || cat "$HERE/postgres-entrypoint.sh"; } \
        | sha256sum | cut -c1-16
}

current() {
    local found
    found=$(podman image inspect --format "{{index .Config.Labels \"$RECIPE_LABEL\"}}" "$2" 2>/dev/null) \
        || return 1
    [ "$found" = "$(recipe "$1")" ]
}

# rootfs NAME PACKAGES: a minbase root file system with PACKAGES and this host's CA certificates
rootfs() {
    local root=$work/$1
    echo "debootstrap $SUITE ($2) into $root" >&2
    debootstrap --variant=minbase --include="$2" "$SUITE" "$root" "$MIRROR" >"$work/$1.log" 2>&1 \
        || { tail -20 "$work/$1.log" >&2; return 1; }
    # The host's own CAs (a private or intercepting proxy's among them) join Debian's.
    if compgen -G "/usr/local/share/ca-certificates/*.crt" >/dev/null; then
        cp /usr/local/share/ca-certificates/*.crt "$root/usr/local/share/ca-certificates/"
    fi
    chroot "$root" update-ca-certificates >/dev/null 2>&1
    rm -rf "$root"/var/lib/apt/lists/* "$root"/var/cache/apt/*.bin "$root"/var/cache/apt/archives/*.deb
}

python_base() {
    rootfs python python3,python3-venv,ca-certificates
    tar -C "$work/python" -c . | podman import --quiet \
        --change 'ENV PIP_CERT=/etc/ssl/certs/ca-certificates.crt' \
        --change 'ENV LANG=C.UTF-8' \
        --change 'CMD ["python3"]' \
        --change "LABEL $RECIPE_LABEL=$(recipe python)" \
        - "$PYTHON_BASE" >/dev/null
    echo "$PYTHON_BASE"
}

postgres_base() {
    rootfs postgres postgresql,ca-certificates
    local root=$work/postgres bin share
    bin=$(echo "$root"/usr/lib/postgresql/*/bin)
    share=$(echo "$root"/usr/share/postgresql/*)
    # The package's own cluster (created by its postinst) is not used: the entrypoint makes one
    # in PGDATA, as the postgres image does. As there, PGDATA is a folder any user may fill (a
    # service run as `user: postgres`, a standby copied by pg_basebackup), the socket's folder
    # is the postgres user's, and a new cluster listens on every address: a copy of it (a
    # standby) too.
    rm -rf "$root"/var/lib/postgresql/* "$root"/etc/postgresql/*/
    chroot "$root" install -d -o postgres -g postgres -m 1777 /var/lib/postgresql/data
    chroot "$root" install -d -o postgres -g postgres -m 2775 /run/postgresql
    sed -ri "s!^#?(listen_addresses)\s*=\s*\S+.*!\1 = '*'!" "$share/postgresql.conf.sample"
    grep -q "^listen_addresses = '\*'" "$share/postgresql.conf.sample"
    install -m 0755 "$HERE/postgres-entrypoint.sh" "$root/usr/local/bin/docker-entrypoint.sh"
    mkdir -p "$root/docker-entrypoint-initdb.d"
    tar -C "$root" -c . | podman import --quiet \
        --change "ENV PATH=${bin#"$root"}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin" \
        --change 'ENV PGDATA=/var/lib/postgresql/data' \
        --change 'ENV LANG=C.UTF-8' \
        --change 'ENTRYPOINT ["docker-entrypoint.sh"]' \
        --change 'CMD ["postgres"]' \
        --change 'STOPSIGNAL SIGINT' \
        --change 'EXPOSE 5432' \
        --change "LABEL $RECIPE_LABEL=$(recipe postgres)" \
        - "$POSTGRES_BASE" >/dev/null
    echo "$POSTGRES_BASE"
}

nginx_base() {
    rootfs nginx nginx,ca-certificates
    local root=$work/nginx
    # As the nginx image: the sites of /etc/nginx/conf.d/*.conf only (Debian's default site,
    # which listens on port 80, removed), the logs on the container's output.
    rm -f "$root"/etc/nginx/sites-enabled/*
    ln -sf /dev/stdout "$root/var/log/nginx/access.log"
    ln -sf /dev/stderr "$root/var/log/nginx/error.log"
    tar -C "$root" -c . | podman import --quiet \
        --change 'ENV LANG=C.UTF-8' \
        --change 'CMD ["nginx", "-g", "daemon off;"]' \
        --change 'STOPSIGNAL SIGQUIT' \
        --change 'EXPOSE 80' \
        --change "LABEL $RECIPE_LABEL=$(recipe nginx)" \
        - "$NGINX_BASE" >/dev/null
    echo "$NGINX_BASE"
}

mosquitto_base() {
    rootfs mosquitto mosquitto,ca-certificates
    local root=$work/mosquitto
    # As the eclipse-mosquitto image: its configuration in /mosquitto/config (compose mounts
    # it), its persistence in /mosquitto/data, written by the mosquitto user the broker drops to.
    chroot "$root" install -d -o mosquitto -g mosquitto -m 0755 /mosquitto/data
    install -d "$root/mosquitto/config"
    tar -C "$root" -c . | podman import --quiet \
        --change 'ENV LANG=C.UTF-8' \
        --change 'CMD ["mosquitto", "-c", "/mosquitto/config/mosquitto.conf"]' \
        --change 'EXPOSE 1883' \
        --change "LABEL $RECIPE_LABEL=$(recipe mosquitto)" \
        - "$MOSQUITTO_BASE" >/dev/null
    echo "$MOSQUITTO_BASE"
}

# Built once and kept in podman's storage; at the same time when several are missing.
[ $# -gt 0 ] || set -- python postgres nginx mosquitto
pids=()
for which in "$@"; do
    case $which in
        python) image=$PYTHON_BASE ;;
        postgres) image=$POSTGRES_BASE ;;
        nginx) image=$NGINX_BASE ;;
        mosquitto) image=$MOSQUITTO_BASE ;;
        *) echo "usage: $0 [python] [postgres] [nginx] [mosquitto]" >&2; exit 2 ;;
    esac
    if [ -n "${REBUILD:-}" ] || ! current "$which" "$image"; then
        "${which}_base" &
        pids+=($!)
    else
        echo "$image"
    fi
done
for pid in "${pids[@]}"; do wait "$pid"; done
