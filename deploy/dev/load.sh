#!/usr/bin/env bash
# `make load`: the sustained-load test (docs/design.md §8 "Sustained load") on
# an ISOLATED stack that never touches `make run`'s or the governance demo's:
# database gpugov_load (dropped and re-created each time), a Temporal dev
# server on 127.0.0.1:7263 (UI 8263, SQLite in WAL mode like make run's), the
# API on 127.0.0.1:8093, state and logs under .gpugov/load/. serve runs the
# simulated executor at 10× on a generated pool "load" of 64 nodes × 8 T4
# GPUs (512 GPUs) with a token of its own (role operator).
#
# `gpugov load` then sends, open loop, 50 submissions/s plus job reads, why
# reads, lists, queue reports and cancels for 5 minutes, waits for every job
# to settle, checks each accepted job's row, workflow and final state or wait
# reason, and prints the report (latency per kind, memory over time and its
# trend, the job pipeline). 10 to 20 minutes in all on a 2-core machine: the
# window, a drain of up to 10 minutes while the backlog the pipeline could not
# keep up with settles, and a check of every workflow. Exit status: the load's (1 when anything was
# lost, an answer was a 5xx, or serve's memory grew).
#
# Bursts and backlogs (docs/design.md §8 "Bursts and backlogs"), on the same stack:
#   GPUGOV_LOAD_MODE=burst   (`make load-burst`) `gpugov load --burst N`: N submissions
#       (GPUGOV_LOAD_JOBS, default 10000) as fast as the API takes them, 64 in flight;
#       every 201's row read right after the last answer; the time until every workflow
#       started and until all settled against N ÷ GPUGOV_LOAD_FLOOR_RATE (default
#       load.DefaultFloorRate: pass your machine's `make bench-throughput` floor/s);
#       exit 1 when a row is missing, a job lost or duplicated, any 5xx, or not every
#       workflow started within max(2 × predicted, 60 s). serve runs with
#       --rate-limit/--rate-burst 100000 so that the token bucket (200/s) does not set
#       the pace (a 429 would be sent again anyway).
#   GPUGOV_LOAD_MODE=backlog (`make load-backlog`) `gpugov load --backlog N`: N pending
#       jobs (GPUGOV_LOAD_JOBS, default 100000) stored through store.CreateJobs while
#       serve runs, after 15 s of baseline samples; serve's RSS, live heap, the pending
#       count and the cycles sampled for GPUGOV_LOAD_HOLD (default 3m) while the
#       scheduler cycles over them and the reconciler starts their workflows.
#
# Settings (environment):
#   GPUGOV_LOAD_MODE      sustained (default), burst or backlog (above)
#   GPUGOV_LOAD_JOBS      burst or backlog size (defaults 10000 and 100000)
#   GPUGOV_LOAD_FLOOR_RATE floor lifecycles/s of the burst's prediction (default: gpugov load's)
#   GPUGOV_LOAD_HOLD      backlog sampling after the insert (default 3m)
#   GPUGOV_LOAD_RATE      submissions per second (default 50)
#   GPUGOV_LOAD_DURATION  load window (default 5m)
#   GPUGOV_LOAD_ARGS      more `gpugov load` flags, e.g. "--cancel-share 0.2 --format json"
#   GPUGOV_LOAD_SERVE_ARGS more `gpugov serve` flags, e.g. "--pprof-addr 127.0.0.1:6093" to profile it
#   GPUGOV_LOAD_KEEP=1    leave the stack running afterwards (stop: deploy/dev/load.sh stop)
#
# Usage: deploy/dev/load.sh [run|stop]   (from anywhere; run is the default)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"

# Set before env.sh so that its defaults (make run's database, ports and
# state) never apply here.
export GPUGOV_STATE="$root/.gpugov/load"
export TEMPORAL_ADDRESS=127.0.0.1:7263
export TEMPORAL_UI_PORT=8263
export GPUGOV_API_ADDR=127.0.0.1:8093
load_db=gpugov_load
export DATABASE_URL="postgres://postgres@127.0.0.1:5432/$load_db?sslmode=disable"
# shellcheck source=deploy/dev/env.sh
source "$root/deploy/dev/env.sh"
cd "$GPUGOV_ROOT"

api="http://$GPUGOV_API_ADDR"
gpugov=bin/gpugov
sim_speed=10

# stop_one NAME: stops the process in .gpugov/load/NAME.pid (SIGTERM; SIGKILL after 20 s).
stop_one() {
  local pidfile="$GPUGOV_STATE/$1.pid" pid
  [ -f "$pidfile" ] || return 0
  pid=$(cat "$pidfile")
  if kill -0 "$pid" 2>/dev/null; then
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 1 40); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
    if kill -0 "$pid" 2>/dev/null; then kill -KILL "$pid" 2>/dev/null || true; fi
    log "stopped load-test $1 (pid $pid)"
  fi
  rm -f "$pidfile"
}
stop_all() { for name in serve temporal; do stop_one "$name"; done; }

if [ "${1:-run}" = stop ]; then stop_all; exit 0; fi
[ "${1:-run}" = run ] || { echo "usage: $0 [run|stop]" >&2; exit 2; }

mode="${GPUGOV_LOAD_MODE:-sustained}"
serve_limits=()
case "$mode" in
  sustained)
    mode_args=(--rate "${GPUGOV_LOAD_RATE:-50}" --duration "${GPUGOV_LOAD_DURATION:-5m}") ;;
  burst)
    mode_args=(--burst "${GPUGOV_LOAD_JOBS:-10000}")
    if [ -n "${GPUGOV_LOAD_FLOOR_RATE:-}" ]; then mode_args+=(--floor-rate "$GPUGOV_LOAD_FLOOR_RATE"); fi
    serve_limits=(--rate-limit 100000 --rate-burst 100000) ;;
  backlog)
    mode_args=(--backlog "${GPUGOV_LOAD_JOBS:-100000}" --backlog-hold "${GPUGOV_LOAD_HOLD:-3m}") ;;
  *) echo "GPUGOV_LOAD_MODE must be sustained, burst or backlog, got $mode" >&2; exit 2 ;;
esac

trap 'if [ "${GPUGOV_LOAD_KEEP:-}" != 1 ]; then stop_all; fi' EXIT
log "starting an isolated stack (database $load_db, Temporal $TEMPORAL_ADDRESS, API $api, state $GPUGOV_STATE)"
stop_all # what an earlier run left
rm -rf "$GPUGOV_STATE" && mkdir -p "$GPUGOV_STATE"
deploy/dev/ensure-postgres.sh
psql -q -h 127.0.0.1 -U postgres -c "DROP DATABASE IF EXISTS $load_db WITH (FORCE)" >/dev/null
deploy/dev/start-temporal.sh
log "building bin/gpugov"
go build -o "$gpugov" ./cmd/gpugov
"$gpugov" migrate   # creates $DATABASE_URL's database: serve never creates one

# The pool: 64 nodes × 8 T4 (format: internal/inventory/static).
inventory="$GPUGOV_STATE/inventory.yaml"
{
  echo "pools:"
  echo "  - name: load"
  echo "    nodes:"
  for n in $(seq 0 63); do
    printf '      - name: load-node-%02d\n        gpus:\n' "$n"
    for g in $(seq 0 7); do
      printf '          - {uuid: GPU-10ad%04x-0000-4000-8000-%012x, model: T4, memory_mib: 15360}\n' "$n" "$g"
    done
  done
} >"$inventory"
# A token of its own, never printed (format: api.ParseTokens).
token="load-$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')"
tokens="$GPUGOV_STATE/tokens.yaml"
( umask 077; printf '%s: {name: gpugov-load, project: platform, role: operator}\n' "$token" >"$tokens" )

# shellcheck disable=SC2086 # GPUGOV_LOAD_SERVE_ARGS is a list of flags
nohup "$gpugov" serve --api-addr "$GPUGOV_API_ADDR" --database-url "$DATABASE_URL" --temporal-address "$TEMPORAL_ADDRESS" \
  --tokens-file "$tokens" --inventory-file "$inventory" --sim-speed "$sim_speed" "${serve_limits[@]}" ${GPUGOV_LOAD_SERVE_ARGS:-} >"$GPUGOV_STATE/serve.log" 2>&1 &
echo $! >"$GPUGOV_STATE/serve.pid"
serve_pid=$(cat "$GPUGOV_STATE/serve.pid")
for i in $(seq 1 60); do
  if "$gpugov" queues --api "$api" --token "$token" >/dev/null 2>&1; then break; fi
  if ! kill -0 "$serve_pid" 2>/dev/null || [ "$i" = 60 ]; then
    log "gpugov serve did not become ready; the end of $GPUGOV_STATE/serve.log:"
    tail -20 "$GPUGOV_STATE/serve.log" >&2
    exit 1
  fi
  sleep 1
done
log "gpugov serve up (pid $serve_pid, log $GPUGOV_STATE/serve.log); mode $mode; machine load average: $(cut -d' ' -f1-3 /proc/loadavg)"

status=0
# shellcheck disable=SC2086 # GPUGOV_LOAD_ARGS is a list of flags
"$gpugov" load --api "$api" --token "$token" --database-url "$DATABASE_URL" --temporal-address "$TEMPORAL_ADDRESS" \
  --serve-pid "$serve_pid" "${mode_args[@]}" ${GPUGOV_LOAD_ARGS:-} || status=$?
if ! kill -0 "$serve_pid" 2>/dev/null; then
  log "gpugov serve is gone; the end of $GPUGOV_STATE/serve.log:"; tail -20 "$GPUGOV_STATE/serve.log" >&2; status=1
fi
errors=$(grep -c 'level=ERROR' "$GPUGOV_STATE/serve.log" || true)
log "serve logged $errors ERROR lines ($GPUGOV_STATE/serve.log)"
if [ "${GPUGOV_LOAD_KEEP:-}" = 1 ]; then
  log "the stack keeps running (GPUGOV_LOAD_KEEP=1): Temporal UI http://127.0.0.1:$TEMPORAL_UI_PORT, API $api (token in $tokens); stop: deploy/dev/load.sh stop"
fi
exit "$status"
