#!/usr/bin/env bash
# Runs a command with a throwaway Redis server beside it:
#
#     tests/redis_server.sh python -m pytest
#     tests/postgres_server.sh tests/redis_server.sh python -m pytest   # composes with the PostgreSQL one
#
# The server keeps nothing on disk, listens on a free port on 127.0.0.1 only, and
# is stopped (and its directory removed) when the command ends, whether it passed
# or failed. The command sees the server's address in TOOLSCHED_TEST_REDIS_URL
# and exits with the command's own status.
#
# Redis comes from Debian's `redis-server` package, installed here when no
# `redis-server` is found.
set -euo pipefail

if [ "$#" -eq 0 ]; then
    echo "usage: $0 COMMAND [ARG...]" >&2
    exit 2
fi

server="$(command -v redis-server || true)"
if [ -z "$server" ]; then
    as_root=()
    if [ "$(id -u)" -ne 0 ]; then
        if ! sudo -n true 2>/dev/null; then
            echo "Redis is not installed and installing it needs root: apt-get install redis-server" >&2
            exit 1
        fi
        as_root=(sudo -n)
    fi
    echo "installing Redis (Debian package redis-server) for the fleet tests" >&2
    "${as_root[@]}" apt-get update -qq
    "${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server >/dev/null
    server="$(command -v redis-server || true)"
    if [ -z "$server" ]; then
        echo "the redis-server package installed no redis-server" >&2
        exit 1
    fi
fi

workdir="$(mktemp -d "${TMPDIR:-/tmp}/toolsched-redis.XXXXXX")"
pid=""
stop_server() {
    if [ -n "$pid" ]; then
        kill "$pid" 2>/dev/null || true
        wait "$pid" 2>/dev/null || true
    fi
    rm -rf "$workdir"
}
trap stop_server EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

port="$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"

"$server" --bind 127.0.0.1 --port "$port" --dir "$workdir" --save "" --appendonly no \
    --daemonize no --logfile "$workdir/server.log" &
pid=$!

for _ in $(seq 1 100); do
    if python3 -c "import socket; socket.create_connection(('127.0.0.1', $port), 0.1).close()" 2>/dev/null; then
        break
    fi
    if ! kill -0 "$pid" 2>/dev/null; then
        cat "$workdir/server.log" >&2
        exit 1
    fi
    sleep 0.05
done

export TOOLSCHED_TEST_REDIS_URL="redis://127.0.0.1:$port/0"
# Tests that stop the server mid-run start their own with this binary.
export TOOLSCHED_TEST_REDIS_SERVER="$server"
status=0
"$@" || status=$?
exit "$status"
