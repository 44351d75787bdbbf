# Sourced by .ci/run: a private PostgreSQL server for the tests, on
# 127.0.0.1 only, on a free port, in a temporary directory; stopped by its
# PID when the script exits, also on failure.

pg_bin() {
  ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1
}

pg_install() {
  # PgBouncer too: the failover tests run one in transaction mode.
  local have_pg="" have_bouncer=""
  if [ -n "$(pg_bin)" ] && [ -x "$(pg_bin)/initdb" ]; then have_pg=1; fi
  if command -v pgbouncer >/dev/null 2>&1 || [ -x /usr/sbin/pgbouncer ]; then have_bouncer=1; fi
  if [ -n "$have_pg" ] && [ -n "$have_bouncer" ]; then
    return
  fi
  if [ "$(id -u)" != 0 ]; then
    if [ -n "$have_pg" ]; then
      echo "== PgBouncer is not installed and this is not root: its test will skip (apt-get install pgbouncer)" >&2
      return 0
    fi
    echo "PostgreSQL is not installed and this is not root: apt-get install postgresql pgbouncer, or set DATABASE_URL" >&2
    return 1
  fi
  echo "== installing PostgreSQL and PgBouncer from Debian packages"
  export DEBIAN_FRONTEND=noninteractive
  # The package would start a cluster of its own; forbid service starts
  # while it installs, as container images do.
  local prc=/usr/sbin/policy-rc.d created=""
  if [ ! -e "$prc" ]; then
    printf '#!/bin/sh\nexit 101\n' >"$prc"
    chmod +x "$prc"
    created=1
  fi
  local rc=0
  apt-get update -qq && apt-get install -y -qq --no-install-recommends postgresql pgbouncer >/dev/null || rc=$?
  [ -z "$created" ] || rm -f "$prc"
  return "$rc"
}

pg_free_port() {
  local port
  for port in $(seq 25432 25532); do
    if ! (exec 3<>/dev/tcp/127.0.0.1/"$port") 2>/dev/null; then
      echo "$port"
      return
    fi
  done
  echo "no free port in 25432-25532" >&2
  return 1
}

pg_start() {
  pg_install
  PG_BIN=$(pg_bin)
  PG_DIR=$(mktemp -d /tmp/retrysafe-ci-pg.XXXXXX)
  chmod 755 "$PG_DIR"
  local as=()
  if [ "$(id -u)" = 0 ]; then
    chown postgres: "$PG_DIR"
    as=(runuser -u postgres --)
  fi
  PG_PORT=$(pg_free_port)
  "${as[@]}" "$PG_BIN/initdb" -D "$PG_DIR/data" -A trust -U retrysafe -E UTF8 --no-sync >/dev/null
  "${as[@]}" "$PG_BIN/pg_ctl" -D "$PG_DIR/data" -l "$PG_DIR/server.log" -w -t 60 \
    -o "-c listen_addresses=127.0.0.1 -p $PG_PORT -k $PG_DIR -c max_connections=300" start >/dev/null
  PG_PID=$(head -n 1 "$PG_DIR/data/postmaster.pid")
  export DATABASE_URL="postgres://retrysafe@127.0.0.1:$PG_PORT/postgres?sslmode=disable"
  export RETRYSAFE_PG_BIN="$PG_BIN"
  echo "== PostgreSQL $("$PG_BIN/postgres" --version | awk '{print $3}') on 127.0.0.1:$PG_PORT (pid $PG_PID)"
}

pg_stop() {
  [ -n "${PG_PID:-}" ] || return 0
  kill -INT "$PG_PID" 2>/dev/null || true # fast shutdown
  for _ in $(seq 1 100); do
    kill -0 "$PG_PID" 2>/dev/null || break
    sleep 0.1
  done
  kill -KILL "$PG_PID" 2>/dev/null || true
  rm -rf "$PG_DIR"
  PG_PID=
}
