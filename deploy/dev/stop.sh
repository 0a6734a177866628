#!/usr/bin/env bash
# Stops the processes `make run` started (gpugov serve, simulated agent, Temporal dev server).
source "$(dirname "$0")/env.sh"
for name in serve temporal; do
  pidfile="$GPUGOV_STATE/$name.pid"
  if [ -f "$pidfile" ]; then
    kill "$(cat "$pidfile")" 2>/dev/null && log "stopped $name"
    rm -f "$pidfile"
  fi
done
