#!/usr/bin/env bash
# Makes sure PostgreSQL answers at DATABASE_URL's host: uses a running server if
# there is one, else starts the local cluster, else installs Debian's postgresql
# (trust auth on 127.0.0.1 for local development) and starts it.
set -euo pipefail
source "$(dirname "$0")/env.sh"
host=127.0.0.1; port=5432
ready() { pg_isready -q -h "$host" -p "$port" 2>/dev/null; }
if command -v pg_isready >/dev/null && ready; then exit 0; fi
if ! command -v pg_ctlcluster >/dev/null; then
  log "PostgreSQL not found: installing Debian's postgresql"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq && apt-get install -y -qq postgresql postgresql-client >/dev/null
fi
ver=$(ls /etc/postgresql | sort -n | tail -1)
conf=/etc/postgresql/$ver/main
if ! grep -q '^host all all 127.0.0.1/32 trust' "$conf/pg_hba.conf" 2>/dev/null; then
  log "allowing trust auth from 127.0.0.1 for local development ($conf/pg_hba.conf)"
  sed -i '1i host all all 127.0.0.1/32 trust\nhost all all ::1/128 trust' "$conf/pg_hba.conf"
fi
log "starting PostgreSQL $ver"
pg_ctlcluster --skip-systemctl-redirect "$ver" main start 2>/dev/null || pg_ctlcluster --skip-systemctl-redirect "$ver" main reload || true
for _ in $(seq 1 30); do ready && exit 0; sleep 1; done
log "PostgreSQL did not become ready on $host:$port"; exit 1
