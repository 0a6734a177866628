#!/usr/bin/env bash
# Starts the Temporal dev server in the background (unless one already answers at
# TEMPORAL_ADDRESS) with gpugov's search attributes registered and its state in
# .gpugov/temporal.db. Log: .gpugov/temporal.log; pid: .gpugov/temporal.pid.
# SQLite runs in WAL mode with synchronous=normal: with the default rollback
# journal every history write waits for fsyncs, and on a 2-core machine the
# dev server then dispatches ~3 workflow tasks/s — a replay's jobs wait
# seconds to minutes for the server instead of for GPUs.
set -euo pipefail
source "$(dirname "$0")/env.sh"
"$(dirname "$0")/ensure-temporal.sh"
port="${TEMPORAL_ADDRESS##*:}"
if "$TEMPORAL_BIN" operator cluster health --address "$TEMPORAL_ADDRESS" >/dev/null 2>&1; then
  log "Temporal already running at $TEMPORAL_ADDRESS"; exit 0
fi
args=(server start-dev --ip 127.0.0.1 --port "$port" --ui-port "$TEMPORAL_UI_PORT" --db-filename "$GPUGOV_STATE/temporal.db" --log-level warn
  --sqlite-pragma journal_mode=wal --sqlite-pragma synchronous=normal)
for sa in "${GPUGOV_SEARCH_ATTRIBUTES[@]}"; do args+=(--search-attribute "$sa"); done
nohup "$TEMPORAL_BIN" "${args[@]}" >"$GPUGOV_STATE/temporal.log" 2>&1 &
echo $! >"$GPUGOV_STATE/temporal.pid"
for _ in $(seq 1 60); do
  if "$TEMPORAL_BIN" operator cluster health --address "$TEMPORAL_ADDRESS" >/dev/null 2>&1; then
    log "Temporal dev server up at $TEMPORAL_ADDRESS (UI http://127.0.0.1:$TEMPORAL_UI_PORT)"; exit 0
  fi
  sleep 1
done
log "Temporal dev server did not start; see $GPUGOV_STATE/temporal.log"; exit 1
