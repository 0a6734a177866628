#!/usr/bin/env bash
# `make run`: the local end-to-end run. Makes sure PostgreSQL and the pinned
# Temporal CLI are there, starts the Temporal dev server, builds bin/gpugov,
# migrates the database, imports the Alibaba GPU node inventory, starts
# `gpugov serve` in the background, replays the busiest day of the trace through
# the API and prints the queue report. The services keep running: `make stop`.
#
# By default the trace's busiest six hours (trace hours 3567-3573, 221 GPU
# pods) are replayed at 100x on a contended pool: 6 GPUs cut from the
# trace's node list (gpugov replay --pool-gpus 6 --write-nodes, then
# inventory import of that list), runs capped at one trace-hour, served under
# deploy/gpugov/replay-policy.yaml (pool alibaba in stage trial: checkpointable
# experiment jobs may be preempted). Jobs wait for capacity, age, wait behind
# reservations and get preempted; the report ends with what governance did.
# GPUGOV_POOL_GPUS=0 replays the busiest day at 600x on the whole cluster
# (6,212 GPUs), where no job waits for capacity, under GPUGOV_POLICY_FILE or
# serve's default policy.
#
# Settings (environment):
#   GPUGOV_TRACE_DIR  trace directory (default ../shared/traces/alibaba-gpu-v2023 from the repository root)
#   GPUGOV_NODES      node list to import (default $GPUGOV_TRACE_DIR/openb_node_list_gpu_node.csv)
#   GPUGOV_PODS       pod list to replay (default $GPUGOV_TRACE_DIR/openb_pod_list_default.csv)
#   GPUGOV_SPEED      trace seconds per real second, for the replay and the simulated executor
#                     (default 100 with a contended pool, 600 on the whole cluster)
#   GPUGOV_POOL_GPUS  GPUs of the contended pool (default 6); 0: the whole node list, no contention
#   GPUGOV_MAX_RUN_S  cap on each job's run_seconds in trace seconds (default 3600 with a contended
#                     pool, none on the whole cluster)
#   GPUGOV_REPLAY_ARGS  extra `gpugov replay` flags, e.g. "--max-pods 200 --wait 1m"
#   GPUGOV_POLICY_FILE  policy file gpugov serve runs (serve reads it from the
#                     environment: its --policy default); default with a contended
#                     pool: deploy/gpugov/replay-policy.yaml; on the whole cluster
#                     unset means serve's default policy; e.g. deploy/gpugov/policy.yaml,
#                     which README's policy experiment (deploy/gpugov/experiment-aging.yaml) needs
#   DATABASE_URL, TEMPORAL_ADDRESS, GPUGOV_API_ADDR as in deploy/dev/env.sh
set -euo pipefail
source "$(dirname "$0")/env.sh"
cd "$GPUGOV_ROOT"

trace_dir="${GPUGOV_TRACE_DIR:-$GPUGOV_ROOT/../shared/traces/alibaba-gpu-v2023}"
nodes="${GPUGOV_NODES:-$trace_dir/openb_node_list_gpu_node.csv}"
pods="${GPUGOV_PODS:-$trace_dir/openb_pod_list_default.csv}"
pool_gpus="${GPUGOV_POOL_GPUS:-6}"
if [ "$pool_gpus" != 0 ]; then
  # The contended window: the trace's busiest six hours (replay.ContendedFrom/To) at 100x.
  export GPUGOV_POLICY_FILE="${GPUGOV_POLICY_FILE:-$GPUGOV_ROOT/deploy/gpugov/replay-policy.yaml}"
  speed="${GPUGOV_SPEED:-100}"
  max_run="${GPUGOV_MAX_RUN_S:-3600}"
  slice=(--from 3567h --to 3573h)
  what="the trace's busiest six hours at ${speed}x on a contended pool of $pool_gpus GPUs"
else
  # The whole cluster: the busiest day (replay.DefaultFrom/To) at 600x; nobody waits for capacity.
  speed="${GPUGOV_SPEED:-600}"
  max_run="${GPUGOV_MAX_RUN_S:-0}"
  slice=()
  what="the trace's busiest day at ${speed}x on the whole cluster"
fi
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
replay=(bin/gpugov replay --nodes "$nodes" --pods "$pods" "${slice[@]}" --speed "$speed" --api "$api" --token "$token"
  --pool-gpus "$pool_gpus" --max-run-seconds "$max_run" --temporal-ui "http://127.0.0.1:$TEMPORAL_UI_PORT")
if [ "$pool_gpus" != 0 ]; then
  # shellcheck disable=SC2086 # GPUGOV_REPLAY_ARGS is a list of flags (the same slice sizes the pool)
  "${replay[@]}" ${GPUGOV_REPLAY_ARGS:-} --write-nodes "$GPUGOV_STATE/pool-nodes.csv"
  bin/gpugov inventory import "$GPUGOV_STATE/pool-nodes.csv"
else
  bin/gpugov inventory import "$nodes"
fi

# A gpugov serve left by an earlier run would keep serving the old binary.
pidfile="$GPUGOV_STATE/serve.pid"
if [ -f "$pidfile" ] && kill -0 "$(cat "$pidfile")" 2>/dev/null; then
  log "stopping the gpugov serve of an earlier run (pid $(cat "$pidfile"))"
  kill "$(cat "$pidfile")"
  for _ in $(seq 1 30); do kill -0 "$(cat "$pidfile")" 2>/dev/null || break; sleep 0.5; done
fi
log "starting gpugov serve (log: $GPUGOV_STATE/serve.log; policy: ${GPUGOV_POLICY_FILE:-the default})"
nohup bin/gpugov serve --tokens-file "$tokens" --sim-speed "$speed" --temporal-ui "http://127.0.0.1:$TEMPORAL_UI_PORT" >"$GPUGOV_STATE/serve.log" 2>&1 &
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
  web console  $api/ui/   (sign in with $token, or dev-project-00 … dev-project-07 to see one project as its submitter)

EOF

log "replaying $what (jobs of an earlier run are reused: the replay is idempotent by pod name)"
# shellcheck disable=SC2086 # GPUGOV_REPLAY_ARGS is a list of flags
"${replay[@]}" ${GPUGOV_REPLAY_ARGS:-}

cat <<EOF

gpugov serve and the Temporal dev server keep running (UI http://127.0.0.1:$TEMPORAL_UI_PORT, API $api).
Stop them with: make stop
EOF
