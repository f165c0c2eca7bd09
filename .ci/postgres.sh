#!/usr/bin/env bash
# A throwaway PostgreSQL server for the storage tests (CI runs it; so can a developer):
#
#     dir=$(mktemp -d)
#     export GLUON_TEST_POSTGRES_URL=$(.ci/postgres.sh start "$dir")   # prints postgresql://gluon@127.0.0.1:PORT/gluon_test
#     python3 -m pytest -q tests/test_storage.py tests/test_storage_processes.py
#     .ci/postgres.sh stop "$dir"                                      # stops it, deletes what start made
#
# `start` installs Debian's `postgresql` package when no server binaries are found (as root, with apt-get),
# makes a cluster in DIR/data (trust authentication, listening on 127.0.0.1 only, on a free port, no
# fsync: it holds test data only), starts it and creates the database. PostgreSQL refuses to run as root,
# so under root the server runs as the `postgres` user (`nobody` where there is none). Everything but
# the URL goes to stderr.
set -euo pipefail

say() { echo "postgres.sh: $*" >&2; }

# The directory holding initdb, pg_ctl and createdb: pg_ctl's on PATH (links followed: Debian's
# binaries are linked from elsewhere at times), else where Debian puts them (the newest version).
server_bin() {
    if command -v initdb >/dev/null && command -v pg_ctl >/dev/null; then
        dirname "$(readlink -f "$(command -v pg_ctl)")"
        return
    fi
    local d
    for d in $(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V -r); do
        if [ -x "$d/initdb" ] && [ -x "$d/pg_ctl" ] && [ -x "$d/createdb" ]; then
            echo "$d"
            return
        fi
    done
    return 1
}

install_server() {
    if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
        say "no PostgreSQL server binaries found; install Debian's 'postgresql' package (or put initdb on PATH)"
        exit 1
    fi
    say "installing Debian's postgresql package (apt-get)"
    export DEBIAN_FRONTEND=noninteractive
    # -q keeps one line per step (no progress bars), so a slow mirror still shows progress in the log
    apt-get update -q -o Dpkg::Use-Pty=0 >&2
    apt-get install -y -q --no-install-recommends -o Dpkg::Use-Pty=0 postgresql >&2
}

# Who runs the server: ourselves, or under root the postgres user (nobody where there is none).
server_user() {
    if [ "$(id -u)" != 0 ]; then
        id -un
    elif id -u postgres >/dev/null 2>&1; then
        echo postgres
    else
        echo nobody
    fi
}

# Run a server command as the cluster's owner ($owner), from a directory it can read.
as_owner() {
    if [ "$owner" = "$(id -un)" ]; then
        (cd "$dir" && "$@")
    else
        (cd "$dir" && runuser -u "$owner" -- "$@")
    fi
}

free_port() {
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

start() {
    local bin
    dir=$1
    bin=$(server_bin) || { install_server; bin=$(server_bin); }
    owner=$(server_user)
    mkdir -p "$dir"
    chown "$owner" "$dir"
    say "initdb with $bin/initdb in $dir/data"
    as_owner "$bin/initdb" -D "$dir/data" -U gluon --auth=trust --no-sync -E UTF8 >"$dir/initdb.log" 2>&1 || {
        cat "$dir/initdb.log" >&2
        exit 1
    }
    local port tries
    for tries in 1 2 3; do
        port=$(free_port)
        # -w waits until the server accepts connections; the socket lives in $dir, not /var/run/postgresql
        if as_owner "$bin/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 60 -o \
            "-c listen_addresses=127.0.0.1 -p $port -k '$dir' -c fsync=off -c synchronous_commit=off -c full_page_writes=off" \
            start >&2; then
            break
        fi
        tail -n 20 "$dir/server.log" >&2 || true
        if [ "$tries" = 3 ]; then
            say "the server did not start"
            exit 1
        fi
    done
    "$bin/createdb" -h 127.0.0.1 -p "$port" -U gluon gluon_test
    echo "postgresql://gluon@127.0.0.1:$port/gluon_test" | tee "$dir/url"
    say "server up: $(cat "$dir/url") (log: $dir/server.log)"
}

stop() {
    local bin
    dir=$1
    if [ -f "$dir/data/postmaster.pid" ] && bin=$(server_bin); then
        owner=$(stat -c %U "$dir/data")
        as_owner "$bin/pg_ctl" -D "$dir/data" -m immediate -w stop >&2 || true
    fi
    # only what start made: DIR may be a folder of the caller's
    rm -rf "$dir/data" "$dir/initdb.log" "$dir/server.log" "$dir/url" "$dir"/.s.PGSQL.*
    rmdir "$dir" 2>/dev/null || true
}

dir="" owner=""
case "${1:-}" in
    start) start "${2:?usage: postgres.sh start DIR}" ;;
    stop) stop "${2:?usage: postgres.sh stop DIR}" ;;
    *) echo "usage: postgres.sh start DIR | stop DIR" >&2; exit 2 ;;
esac
