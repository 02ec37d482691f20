#!/usr/bin/env bash
# A throwaway PostgreSQL server for the ledger's tests and benchmarks (tests/privacy/test_accountant.py
# runs on SQLite and on this server; benchmarks/ledger_throughput.py measures both): a new cluster in
# a fresh directory, listening on a free loopback port only, with a login role `dpdist` (a random
# password kept in a pgpass file of the caller's, never printed) owning a database `dpdist`; it may
# create roles, so the tests can make the analysts' role of docs/team-ledger.md and charge as it.
#
# Usage:
#   eval "$(bash scripts/postgres-throwaway.sh start [DIR])"   # exports DPDIST_TEST_POSTGRES(_DIR)
#   bash scripts/postgres-throwaway.sh stop DIR                 # stops the server, removes DIR
#
# `start` prints two export lines: DPDIST_TEST_POSTGRES, the ledger URL (the password is read from
# DIR/pgpass through the URL's `passfile`), and DPDIST_TEST_POSTGRES_DIR. The server uses TLS with a
# self-signed certificate when openssl is there (so `sslmode=prefer`, the ledger's default, takes it).
# As root (CI: .ci/run) the server runs as the `postgres` user (initdb refuses root), so DIR is made
# under /tmp where that user can reach it; as any other user it runs as that user. The binaries are
# Debian's (/usr/lib/postgresql/<version>/bin, $PG_BIN to choose); as root, the `postgresql` package
# is installed when missing.
set -euo pipefail

find_bin() {
    if [ -n "${PG_BIN:-}" ]; then
        echo "$PG_BIN"
        return
    fi
    ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1
}

as_server() {  # run a server command as the user the server runs as
    if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}

start() {
    local bin dir port password
    bin=$(find_bin)
    if [ -z "$bin" ] && [ "$(id -u)" = 0 ]; then
        # no default cluster: only the binaries are wanted (the throwaway one is made below)
        mkdir -p /etc/postgresql-common
        [ -f /etc/postgresql-common/createcluster.conf ] || echo "create_main_cluster = false" >/etc/postgresql-common/createcluster.conf
        { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
            -o Dpkg::Options::=--force-confold postgresql >/dev/null; } >&2
        bin=$(find_bin)
    fi
    if [ -z "$bin" ] || [ ! -x "$bin/initdb" ]; then
        echo "postgres-throwaway: no PostgreSQL server binaries (Debian's postgresql package, or \$PG_BIN)" >&2
        exit 1
    fi
    dir=${1:-$(mktemp -d /tmp/dpdist-postgres.XXXXXX)}
    mkdir -p "$dir"
    dir=$(cd "$dir" && pwd)
    if [ "$(id -u)" = 0 ]; then chown postgres: "$dir"; fi
    chmod 0711 "$dir"  # the caller reaches its pgpass file inside; nobody lists the directory
    port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
    password=$(od -An -tx1 -N24 /dev/urandom | tr -d ' \n')
    as_server "$bin/initdb" -D "$dir/data" -U postgres --auth-local=trust --auth-host=scram-sha-256 \
        -E UTF8 --locale=C.UTF-8 >"$dir/initdb.log" 2>&1 ||
        { cat "$dir/initdb.log" >&2; exit 1; }
    local ssl=off
    if command -v openssl >/dev/null; then
        as_server openssl req -new -x509 -days 2 -nodes -subj "/CN=127.0.0.1" -keyout "$dir/data/server.key" \
            -out "$dir/data/server.crt" >/dev/null 2>&1 && as_server chmod 0600 "$dir/data/server.key" && ssl=on
    fi
    as_server "$bin/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 60 \
        -o "-c listen_addresses=127.0.0.1 -c port=$port -c unix_socket_directories=$dir -c max_connections=200 -c ssl=$ssl" \
        start >/dev/null || { cat "$dir/server.log" >&2; exit 1; }
    # the role's password goes to psql on its standard input, never on a command line
    printf "CREATE ROLE dpdist LOGIN CREATEROLE PASSWORD '%s';\nCREATE DATABASE dpdist OWNER dpdist;\n" "$password" |
        as_server "$bin/psql" -q -X -v ON_ERROR_STOP=1 -h "$dir" -p "$port" -U postgres -d postgres >/dev/null
    (umask 077 && printf '127.0.0.1:%s:*:dpdist:%s\n' "$port" "$password" >"$dir/pgpass")
    echo "export DPDIST_TEST_POSTGRES='postgresql://dpdist@127.0.0.1:$port/dpdist?passfile=$dir/pgpass'"
    echo "export DPDIST_TEST_POSTGRES_DIR='$dir'"
    echo "postgres-throwaway: PostgreSQL $("$bin/postgres" -V | awk '{print $3}') on 127.0.0.1:$port (ssl=$ssl), in $dir" >&2
}

stop() {
    local dir=${1:?usage: postgres-throwaway.sh stop DIR}
    local bin
    bin=$(find_bin)
    if [ -f "$dir/data/postmaster.pid" ]; then
        as_server "$bin/pg_ctl" -D "$dir/data" -m fast -w stop >/dev/null || true
    fi
    rm -rf "$dir"
}

case "${1:-}" in
    start) start "${2:-}" ;;
    stop) stop "${2:-}" ;;
    *) echo "usage: $0 start [DIR] | stop DIR" >&2; exit 2 ;;
esac
