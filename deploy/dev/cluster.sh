#!/usr/bin/env bash
# Temporal on PostgreSQL: the pinned Temporal server (deploy/dev/ensure-temporal-server.sh)
# with every service in one process, configured by deploy/temporal/cluster.yaml
# (4 history shards), its state in the databases temporal and
# temporal_visibility of the local PostgreSQL.
#
#   cluster.sh setup       create the two databases (if missing) and bring their
#                          schemas to the server's version (temporal-sql-tool;
#                          the schemas are embedded in it)
#   cluster.sh start       setup, then start the server in the background unless one
#                          answers at TEMPORAL_ADDRESS, wait for it, register, and start the
#                          Temporal UI on TEMPORAL_UI_PORT (deploy/temporal/ui.yaml; built by
#                          deploy/dev/ensure-temporal-ui.sh) unless something answers there
#                          (logs .gpugov/temporal-cluster.log and temporal-ui.log, pids beside)
#   cluster.sh register    create the namespace default and gpugov's search attributes
#                          (GPUGOV_SEARCH_ATTRIBUTES of deploy/dev/env.sh), each if missing
#   cluster.sh foreground  setup, register once the server answers, and run the server
#                          in the foreground (the compose stack's temporal service)
#   cluster.sh stop        stop the server and the UI `start` started
#
# Settings (environment; cluster.yaml reads the GPUGOV_TEMPORAL_* ones):
#   GPUGOV_TEMPORAL_PG_HOST, _PG_PORT, _PG_USER, _PG_PASSWORD  PostgreSQL (127.0.0.1, 5432, postgres, none)
#   GPUGOV_TEMPORAL_DB, GPUGOV_TEMPORAL_VISIBILITY_DB           database names (temporal, temporal_visibility)
#   GPUGOV_TEMPORAL_IP  the address the services bind (127.0.0.1; 0.0.0.0 in a container, where
#                     foreground announces the container's own address)
#   TEMPORAL_ADDRESS  the frontend (127.0.0.1:7233); its port is the server's GPUGOV_TEMPORAL_PORT
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
source "$here/env.sh"
export GPUGOV_TEMPORAL_PG_HOST="${GPUGOV_TEMPORAL_PG_HOST:-127.0.0.1}"
export GPUGOV_TEMPORAL_PG_PORT="${GPUGOV_TEMPORAL_PG_PORT:-5432}"
export GPUGOV_TEMPORAL_PG_USER="${GPUGOV_TEMPORAL_PG_USER:-postgres}"
export GPUGOV_TEMPORAL_PG_PASSWORD="${GPUGOV_TEMPORAL_PG_PASSWORD:-}"
export GPUGOV_TEMPORAL_DB="${GPUGOV_TEMPORAL_DB:-temporal}"
export GPUGOV_TEMPORAL_VISIBILITY_DB="${GPUGOV_TEMPORAL_VISIBILITY_DB:-temporal_visibility}"
export GPUGOV_TEMPORAL_PORT="${GPUGOV_TEMPORAL_PORT:-${TEMPORAL_ADDRESS##*:}}"
export GPUGOV_TEMPORAL_DYNAMIC_CONFIG="${GPUGOV_TEMPORAL_DYNAMIC_CONFIG:-$GPUGOV_ROOT/deploy/temporal/dynamicconfig/development.yaml}"
pidfile="$GPUGOV_STATE/temporal-cluster.pid"
logfile="$GPUGOV_STATE/temporal-cluster.log"
server=("$TEMPORAL_SERVER_BIN" --root "$GPUGOV_ROOT" --config deploy/temporal --env cluster --allow-no-auth start)

healthy() { "$TEMPORAL_BIN" operator cluster health --address "$TEMPORAL_ADDRESS" >/dev/null 2>&1; }
# on_postgres: the server at TEMPORAL_ADDRESS keeps its state in PostgreSQL
# (not the dev server of `make run`, which answers on the same address).
on_postgres() {
  local info
  info="$("$TEMPORAL_BIN" operator cluster describe --address "$TEMPORAL_ADDRESS" -o json 2>/dev/null)" &&
    grep -q '"persistenceStore": *"postgres12"' <<<"$info"
}

setup() {
  # An image without Go (deploy/temporal/Dockerfile) carries the binaries
  # built at the pinned version; elsewhere they are built when missing.
  if command -v go >/dev/null; then "$here/ensure-temporal-server.sh"; fi
  local sql=("$TEMPORAL_SQL_TOOL_BIN" --plugin postgres12 --endpoint "$GPUGOV_TEMPORAL_PG_HOST"
    --port "$GPUGOV_TEMPORAL_PG_PORT" --user "$GPUGOV_TEMPORAL_PG_USER" --password "$GPUGOV_TEMPORAL_PG_PASSWORD")
  local db schema setuplog="$GPUGOV_STATE/temporal-cluster-setup.log"
  : >"$setuplog"
  # run_sql ARGS: the SQL tool, its (verbose) output in setuplog, shown on failure.
  run_sql() {
    "${sql[@]}" "$@" >>"$setuplog" 2>&1 || { log "temporal-sql-tool $* failed; the end of $setuplog:"; tail -20 "$setuplog" >&2; exit 1; }
  }
  for db in "$GPUGOV_TEMPORAL_DB:temporal" "$GPUGOV_TEMPORAL_VISIBILITY_DB:visibility"; do
    schema="postgresql/v12/${db##*:}"
    db="${db%%:*}"
    # --quiet: the database may exist already (a failure to connect shows in the next step).
    "${sql[@]}" --database "$db" --quiet create-database >>"$setuplog" 2>&1
    run_sql --database "$db" setup-schema -v 0.0
    run_sql --database "$db" update-schema --schema-name "$schema"
  done
  log "Temporal databases $GPUGOV_TEMPORAL_DB and $GPUGOV_TEMPORAL_VISIBILITY_DB at schema of server $TEMPORAL_SERVER_VERSION"
}

register() {
  local addr=(--address "$TEMPORAL_ADDRESS" --namespace default)
  if ! "$TEMPORAL_BIN" operator namespace describe "${addr[@]}" >/dev/null 2>&1; then
    "$TEMPORAL_BIN" operator namespace create "${addr[@]}" --retention 72h >/dev/null
  fi
  # The namespace registry refreshes every 2 s: retry until the new namespace is visible.
  local have sa name
  for _ in $(seq 1 30); do
    have="$("$TEMPORAL_BIN" operator search-attribute list "${addr[@]}" 2>/dev/null)" && break
    sleep 1
  done
  for sa in "${GPUGOV_SEARCH_ATTRIBUTES[@]}"; do
    name="${sa%%=*}"
    if ! grep -qw "$name" <<<"$have"; then
      "$TEMPORAL_BIN" operator search-attribute create "${addr[@]}" --name "$name" --type "${sa##*=}" >/dev/null
    fi
  done
  log "namespace default with gpugov's search attributes registered at $TEMPORAL_ADDRESS"
}

# start_ui: the UI server on TEMPORAL_UI_PORT, on the cluster's frontend.
start_ui() {
  local url="http://127.0.0.1:$TEMPORAL_UI_PORT"
  if curl -fsS -o /dev/null "$url/api/v1/settings" 2>/dev/null; then log "a Temporal UI already answers at $url"; return 0; fi
  "$here/ensure-temporal-ui.sh"
  nohup "$TEMPORAL_UI_SERVER_BIN" --root "$GPUGOV_ROOT" --config deploy/temporal --env ui start >"$GPUGOV_STATE/temporal-ui.log" 2>&1 &
  echo $! >"$GPUGOV_STATE/temporal-ui.pid"
  for _ in $(seq 1 30); do
    if curl -fsS -o /dev/null "$url/api/v1/settings" 2>/dev/null; then log "Temporal UI at $url"; return 0; fi
    sleep 1
  done
  log "the Temporal UI did not start; see $GPUGOV_STATE/temporal-ui.log"; return 1
}

wait_healthy() {
  for _ in $(seq 1 90); do
    healthy && return 0
    if [ -n "${1:-}" ] && ! kill -0 "$1" 2>/dev/null; then break; fi
    sleep 1
  done
  return 1
}

# The Temporal CLI checks health and registers (built when missing, where Go is).
case "${1:-}" in start | register | foreground) if command -v go >/dev/null; then "$here/ensure-temporal.sh"; fi ;; esac

case "${1:-}" in
  setup) setup ;;
  register) register ;;
  start)
    if healthy; then
      if ! on_postgres; then
        log "another Temporal server (the dev server of make run?) answers at $TEMPORAL_ADDRESS: make stop first"; exit 1
      fi
      log "Temporal on PostgreSQL already running at $TEMPORAL_ADDRESS"; register; start_ui; exit 0
    fi
    setup
    nohup "${server[@]}" >"$logfile" 2>&1 &
    echo $! >"$pidfile"
    if ! wait_healthy "$(cat "$pidfile")"; then
      log "Temporal server did not start; the end of $logfile:"; tail -20 "$logfile" >&2; exit 1
    fi
    log "Temporal server $TEMPORAL_SERVER_VERSION on PostgreSQL up at $TEMPORAL_ADDRESS (log: $logfile)"
    register
    start_ui
    ;;
  foreground)
    if [ "${GPUGOV_TEMPORAL_IP:-}" = 0.0.0.0 ] && [ -z "${GPUGOV_TEMPORAL_BROADCAST_IP:-}" ]; then
      GPUGOV_TEMPORAL_BROADCAST_IP="$(hostname -i | awk '{print $1}')"; export GPUGOV_TEMPORAL_BROADCAST_IP
    fi
    setup
    (wait_healthy && register) &
    exec "${server[@]}"
    ;;
  stop)
    for f in "$GPUGOV_STATE/temporal-ui.pid" "$pidfile"; do
      if [ -f "$f" ]; then
        kill "$(cat "$f")" 2>/dev/null && log "stopped $(basename "$f" .pid)"
        rm -f "$f"
      fi
    done
    ;;
  *) echo "usage: $0 setup|start|register|foreground|stop" >&2; exit 2 ;;
esac
