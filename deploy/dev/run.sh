#!/usr/bin/env bash
# `make run`: the local end-to-end run. Makes sure PostgreSQL and the pinned
# Temporal CLI are there, starts the Temporal dev server, builds bin/gpugov,
# migrates the database, imports the Alibaba GPU node inventory, starts
# `gpugov serve` in the background, replays the busiest day of the trace through
# the API and prints the queue report. The services keep running: `make stop`.
#
# Settings (environment):
#   GPUGOV_TRACE_DIR  trace directory (default ../shared/traces/alibaba-gpu-v2023 from the repository root)
#   GPUGOV_NODES      node list to import (default $GPUGOV_TRACE_DIR/openb_node_list_gpu_node.csv)
#   GPUGOV_PODS       pod list to replay (default $GPUGOV_TRACE_DIR/openb_pod_list_default.csv)
#   GPUGOV_SPEED      trace seconds per real second, for the replay and the simulated executor (default 600)
#   GPUGOV_REPLAY_ARGS  extra `gpugov replay` flags, e.g. "--max-pods 200 --wait 1m"
#   GPUGOV_POLICY_FILE  policy file gpugov serve runs (serve reads it from the
#                     environment: its --policy default; unset: the default
#                     policy), e.g. deploy/gpugov/policy.yaml, which README's
#                     policy experiment (deploy/gpugov/experiment-aging.yaml) needs
#   DATABASE_URL, TEMPORAL_ADDRESS, GPUGOV_API_ADDR as in deploy/dev/env.sh
set -euo pipefail
source "$(dirname "$0")/env.sh"
cd "$GPUGOV_ROOT"

trace_dir="${GPUGOV_TRACE_DIR:-$GPUGOV_ROOT/../shared/traces/alibaba-gpu-v2023}"
nodes="${GPUGOV_NODES:-$trace_dir/openb_node_list_gpu_node.csv}"
pods="${GPUGOV_PODS:-$trace_dir/openb_pod_list_default.csv}"
speed="${GPUGOV_SPEED:-600}"
tokens="$GPUGOV_ROOT/deploy/gpugov/tokens.yaml"
token=dev-admin
api="http://$GPUGOV_API_ADDR"
for f in "$nodes" "$pods"; do
  [ -f "$f" ] || { log "trace file not found: $f (set GPUGOV_TRACE_DIR, GPUGOV_NODES or GPUGOV_PODS)"; exit 1; }
done

deploy/dev/ensure-postgres.sh
deploy/dev/start-temporal.sh   # builds the Temporal CLI first when it is missing

log "building bin/gpugov"
go build -o bin/gpugov ./cmd/gpugov
bin/gpugov migrate
bin/gpugov inventory import "$nodes"

# A gpugov serve left by an earlier run would keep serving the old binary.
pidfile="$GPUGOV_STATE/serve.pid"
if [ -f "$pidfile" ] && kill -0 "$(cat "$pidfile")" 2>/dev/null; then
  log "stopping the gpugov serve of an earlier run (pid $(cat "$pidfile"))"
  kill "$(cat "$pidfile")"
  for _ in $(seq 1 30); do kill -0 "$(cat "$pidfile")" 2>/dev/null || break; sleep 0.5; done
fi
log "starting gpugov serve (log: $GPUGOV_STATE/serve.log)"
nohup bin/gpugov serve --tokens-file "$tokens" --sim-speed "$speed" >"$GPUGOV_STATE/serve.log" 2>&1 &
echo $! >"$pidfile"
for i in $(seq 1 60); do
  if bin/gpugov queues --api "$api" --token "$token" >/dev/null 2>&1; then break; fi
  if ! kill -0 "$(cat "$pidfile")" 2>/dev/null || [ "$i" = 60 ]; then
    log "gpugov serve did not become ready; the end of $GPUGOV_STATE/serve.log:"
    tail -20 "$GPUGOV_STATE/serve.log" >&2
    exit 1
  fi
  sleep 1
done

cat <<EOF

  Temporal UI  http://127.0.0.1:$TEMPORAL_UI_PORT   (workflows job/<id>, scheduler/default, experiment/<id>; search by GpugovQueue, GpugovTier, GpugovPool, GpugovWaitReason, GpugovJobState, GpugovExperimentState)
  gpugov API   $api   (OpenAPI: $api/v1/openapi.json, metrics: $api/metrics)
  dev token    $token   e.g. GPUGOV_TOKEN=$token bin/gpugov queues

EOF

log "replaying the trace's busiest day at ${speed}x (jobs of an earlier run are reused: the replay is idempotent by pod name)"
# shellcheck disable=SC2086 # GPUGOV_REPLAY_ARGS is a list of flags
bin/gpugov replay --nodes "$nodes" --pods "$pods" --speed "$speed" --api "$api" --token "$token" ${GPUGOV_REPLAY_ARGS:-}

cat <<EOF

gpugov serve and the Temporal dev server keep running (UI http://127.0.0.1:$TEMPORAL_UI_PORT, API $api).
Stop them with: make stop
EOF
