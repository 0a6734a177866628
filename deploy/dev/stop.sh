#!/usr/bin/env bash
# Stops the processes `make run` and `make run-cluster` started (gpugov serve,
# the Temporal dev server, or the Temporal server on PostgreSQL and its UI).
source "$(dirname "$0")/env.sh"
for name in serve temporal temporal-ui temporal-cluster; do
  pidfile="$GPUGOV_STATE/$name.pid"
  if [ -f "$pidfile" ]; then
    kill "$(cat "$pidfile")" 2>/dev/null && log "stopped $name"
    rm -f "$pidfile"
  fi
done
