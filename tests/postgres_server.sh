#!/usr/bin/env bash
# Runs a command with a throwaway PostgreSQL server beside it:
#
#     tests/postgres_server.sh python -m pytest
#
# The server lives in a temporary directory, listens on a free port on
# 127.0.0.1 only, and is stopped (and its directory removed) when the command
# ends, whether it passed or failed. The command sees the server's address in
# TOOLSCHED_TEST_POSTGRES_DSN and exits with the command's own status.
#
# PostgreSQL comes from Debian's `postgresql` package, installed here when no
# `initdb` is found. The server refuses to run as root, so when this script runs
# as root the server runs as the `postgres` user the package creates.
set -euo pipefail

if [ "$#" -eq 0 ]; then
    echo "usage: $0 COMMAND [ARG...]" >&2
    exit 2
fi

find_bindir() {
    local candidate
    for candidate in /usr/lib/postgresql/*/bin; do
        if [ -x "$candidate/initdb" ] && [ -x "$candidate/pg_ctl" ]; then
            echo "$candidate"
        fi
    done | sort -V | tail -n 1
}

bindir="$(find_bindir)"
if [ -z "$bindir" ]; then
    as_root=()
    if [ "$(id -u)" -ne 0 ]; then
        if ! sudo -n true 2>/dev/null; then
            echo "PostgreSQL is not installed and installing it needs root: apt-get install postgresql" >&2
            exit 1
        fi
        as_root=(sudo -n)
    fi
    echo "installing PostgreSQL (Debian package postgresql) for the journal tests" >&2
    "${as_root[@]}" apt-get update -qq
    "${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null
    bindir="$(find_bindir)"
    if [ -z "$bindir" ]; then
        echo "the postgresql package installed no initdb under /usr/lib/postgresql/*/bin" >&2
        exit 1
    fi
fi

as_server_user=()
if [ "$(id -u)" -eq 0 ]; then
    as_server_user=(runuser -u postgres --)
fi

workdir="$(mktemp -d "${TMPDIR:-/tmp}/toolsched-pg.XXXXXX")"
chmod 755 "$workdir"
datadir="$workdir/data"
mkdir "$datadir"
if [ "$(id -u)" -eq 0 ]; then
    chown postgres: "$workdir" "$datadir"
fi

stop_server() {
    "${as_server_user[@]}" "$bindir/pg_ctl" -D "$datadir" -m immediate -w stop >/dev/null 2>&1 || true
    rm -rf "$workdir"
}
trap stop_server EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

port="$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"

"${as_server_user[@]}" "$bindir/initdb" -D "$datadir" -U toolsched --auth=trust -E UTF8 --no-locale \
    --no-sync >"$workdir/initdb.log" 2>&1 || { cat "$workdir/initdb.log" >&2; exit 1; }

# fsync stays on: the journal tests are about durability.
"${as_server_user[@]}" "$bindir/pg_ctl" -D "$datadir" -l "$workdir/server.log" -w -t 30 \
    -o "-c listen_addresses=127.0.0.1 -c port=$port -c unix_socket_directories=$workdir -c max_connections=60" \
    start >/dev/null || { cat "$workdir/server.log" >&2; exit 1; }

export TOOLSCHED_TEST_POSTGRES_DSN="host=127.0.0.1 port=$port user=toolsched dbname=postgres"
status=0
"$@" || status=$?
exit "$status"
