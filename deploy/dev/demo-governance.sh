#!/usr/bin/env bash
# `make demo-governance`: a live preemption and a live reclaim through the real
# service — gpugov serve, a Temporal dev server, PostgreSQL and a node agent
# running a real process — driven only with the gpugov CLI.
#
# It runs an ISOLATED stack that never touches `make run`'s: database
# gpugov_demo (dropped and re-created each time), a Temporal dev server on
# 127.0.0.1:7243 (UI 8243), the API on 127.0.0.1:8091, state and logs under
# .gpugov/demo/. Policy: deploy/gpugov/policy.yaml (pool sim in stage
# automate, young, never-resumed checkpointable jobs preemptible with a 40 s
# grace, reclaim scan every 5 s, 40 s observation window); inventory:
# deploy/gpugov/inventory.yaml.
#
# What it shows (about 2.5 minutes, most of it waiting for the reclaim windows):
#   1. preemption: four checkpointable experiment jobs (2 A100 each, simulated
#      executor) fill sim-node-0; a production job asking for 2 A100s arrives;
#      PreemptionWorkflow notifies a victim, takes its checkpoint, releases its
#      GPUs, requeues it and verifies that its next run resumes from that
#      checkpoint. Prints the preemption list, the record and the workflow's
#      activities in order (from Temporal's history).
#   2. reclaim: a node agent (`gpugov agent --executor process`) serves
#      sim-node-1 and runs an experiment job's command (`sleep 600`) as a real
#      process: no progress, no checkpoint. The script reports that GPU's
#      utilisation at 1 % through the agent API (POST /v1/nodes/NODE/samples),
#      as an NVML agent would; a static-inventory agent reports none. Past the
#      40 s observation window the reclaim scan finds it `idle`; the rule for
#      idle experiment work is `notify`: ReclaimWorkflow records the notice,
#      waits the 30 s notice window, cancels the job (the agent stops the
#      process) and releases the GPU. Prints the reclaim report before and
#      after the release, the record and the workflow's activities.
#
# Every wait is bounded; the script exits non-zero naming what did not happen
# (and the log to read). At the end it stops everything it started. With
# GPUGOV_DEMO_KEEP=1 it leaves the stack running (Temporal UI, API) and prints
# the stop command: deploy/dev/demo-governance.sh stop
#
# Usage: deploy/dev/demo-governance.sh [run|stop]   (from anywhere; run is the default)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"

# The demo's own settings, set before env.sh so that its defaults (make run's
# database, ports and state) never apply here.
export GPUGOV_STATE="$root/.gpugov/demo"
export TEMPORAL_ADDRESS=127.0.0.1:7243
export TEMPORAL_UI_PORT=8243
export GPUGOV_API_ADDR=127.0.0.1:8091
demo_db=gpugov_demo
export DATABASE_URL="postgres://postgres@127.0.0.1:5432/$demo_db?sslmode=disable"
# shellcheck source=deploy/dev/env.sh
source "$root/deploy/dev/env.sh"
cd "$GPUGOV_ROOT"

export GPUGOV_API="http://$GPUGOV_API_ADDR"
admin=dev-admin
gpugov=bin/gpugov
temporal="$TEMPORAL_BIN"
sim_speed=10 # job seconds per real second for the simulated executor
agent_node=sim-node-1
inventory=deploy/gpugov/inventory.yaml
policy=deploy/gpugov/policy.yaml
started=$(date +%s)

say() { printf '\n== %s\n' "$*"; }
elapsed() { echo "$(($(date +%s) - started))s"; }
die() {
  log "FAILED: $*"
  for f in serve agent; do
    [ -f "$GPUGOV_STATE/$f.log" ] && { log "last lines of $GPUGOV_STATE/$f.log:"; tail -15 "$GPUGOV_STATE/$f.log" >&2; }
  done
  exit 1
}

# stop_one NAME: stops the process in .gpugov/demo/NAME.pid (SIGCONT first, in
# case it is the frozen agent; SIGTERM; SIGKILL after 20 s).
stop_one() {
  local pidfile="$GPUGOV_STATE/$1.pid" pid
  [ -f "$pidfile" ] || return 0
  pid=$(cat "$pidfile")
  if kill -0 "$pid" 2>/dev/null; then
    kill -CONT "$pid" 2>/dev/null || true
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 1 40); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
    if kill -0 "$pid" 2>/dev/null; then kill -KILL "$pid" 2>/dev/null || true; fi
    log "stopped demo $1 (pid $pid)"
  fi
  rm -f "$pidfile"
}
stop_all() { for name in agent serve temporal; do stop_one "$name"; done; }

if [ "${1:-run}" = stop ]; then stop_all; exit 0; fi
[ "${1:-run}" = run ] || { echo "usage: $0 [run|stop]" >&2; exit 2; }

# wait_until SECONDS WHAT CMD...: runs CMD every 2 s until it succeeds; CMD
# prints a one-line status shown as progress. Fails the demo after SECONDS.
wait_until() {
  local limit=$1 what=$2 t0 status; shift 2
  t0=$(date +%s)
  while :; do
    if status=$("$@" 2>&1); then log "$what: done after $(($(date +%s) - t0))s${status:+ ($status)}"; return 0; fi
    if (($(date +%s) - t0 >= limit)); then die "$what did not happen within ${limit}s (last status: $status)"; fi
    log "waiting for $what ($(($(date +%s) - t0))s/${limit}s): $status"
    sleep 2
  done
}

# ---------------------------------------------------------------- the stack
trap 'if [ "${GPUGOV_DEMO_KEEP:-}" != 1 ]; then stop_all; fi' EXIT
say "starting an isolated stack (database $demo_db, Temporal $TEMPORAL_ADDRESS, API $GPUGOV_API, state $GPUGOV_STATE)"
stop_all # what an earlier demo left running
rm -rf "$GPUGOV_STATE" && mkdir -p "$GPUGOV_STATE"
deploy/dev/ensure-postgres.sh
psql -q -h 127.0.0.1 -U postgres -c "DROP DATABASE IF EXISTS $demo_db WITH (FORCE)" >/dev/null
deploy/dev/start-temporal.sh
log "building bin/gpugov"
go build -o "$gpugov" ./cmd/gpugov
"$gpugov" migrate   # creates $DATABASE_URL's database: serve never creates one

nohup "$gpugov" serve --api-addr "$GPUGOV_API_ADDR" --database-url "$DATABASE_URL" --temporal-address "$TEMPORAL_ADDRESS" \
  --tokens-file deploy/gpugov/tokens.yaml --inventory-file "$inventory" --policy "$policy" \
  --sim-speed "$sim_speed" --cycle-interval 2s --reconcile-interval 10s >"$GPUGOV_STATE/serve.log" 2>&1 &
echo $! >"$GPUGOV_STATE/serve.pid"
serve_ready() { kill -0 "$(cat "$GPUGOV_STATE/serve.pid")" || return 1; "$gpugov" queues --token "$admin" >/dev/null && echo up; }
wait_until 60 "gpugov serve answering on $GPUGOV_API" serve_ready

nohup "$gpugov" agent --api "$GPUGOV_API" --token "$admin" --temporal-address "$TEMPORAL_ADDRESS" \
  --inventory-file "$inventory" --node "$agent_node" --executor process --checkpoint-root "$GPUGOV_STATE/runs" \
  --grace 5s --refresh 5s >"$GPUGOV_STATE/agent.log" 2>&1 &
echo $! >"$GPUGOV_STATE/agent.pid"
agent_pid=$(cat "$GPUGOV_STATE/agent.pid")
cat <<EOF

  Temporal UI  http://127.0.0.1:$TEMPORAL_UI_PORT   gpugov API  $GPUGOV_API   token  $admin
  serve log    $GPUGOV_STATE/serve.log   agent log  $GPUGOV_STATE/agent.log (agent pid $agent_pid, node $agent_node)
EOF
"$gpugov" queues --token "$admin"

# ------------------------------------------------------------- job helpers
# submit TOKEN YAML: submits the spec, prints the job ID.
submit() { printf '%s\n' "$2" | "$gpugov" submit -f - --token "$1"; }
job_json() { "$gpugov" get "$1" --format json --token "$admin"; }
# running_with_checkpoint ID...: succeeds when every job runs and has a checkpoint.
running_with_checkpoint() {
  local id states="" ok=0
  for id in "$@"; do
    read -r st cp < <(job_json "$id" | jq -r '[.state, (.recovery.last_checkpoint.step // "none")] | @tsv')
    states+="${id:0:8}=$st/cp:$cp "
    [ "$st" = running ] && [ "$cp" != none ] || ok=1
  done
  echo "$states"; return $ok
}

# ------------------------------------------------------------ 1. preemption
say "1. preemption: fill sim-node-0's 8 A100s with 4 checkpointable experiment jobs (2 GPUs each)"
exp_spec='queue: experiment
resources: {pool: sim, gpus: 2, gpu_models: [A100-SXM4-80GB], topology: same-node}
run_seconds: 36000
recovery: {checkpointable: true, checkpoint_interval_s: 30}'
echo "$exp_spec" | sed 's/^/    /'
victims=()
for _ in 1 2 3 4; do victims+=("$(submit dev-project-00 "$exp_spec")"); done
log "submitted experiment jobs ${victims[*]}"
wait_until 120 "the 4 experiment jobs running with a checkpoint" running_with_checkpoint "${victims[@]}"
"$gpugov" get --queue experiment --token "$admin"

say "a production job arrives, asking for 2 A100s on the full node"
prod_spec='queue: production
resources: {pool: sim, gpus: 2, gpu_models: [A100-SXM4-80GB], topology: same-node}
run_seconds: 60'
echo "$prod_spec" | sed 's/^/    /'
prod=$(submit dev-project-01 "$prod_spec")
log "submitted production job $prod"
preemption_started() {
  local n; n=$("$gpugov" preemptions --format json --token "$admin" | jq '.preemptions | length')
  echo "$n preemption(s)"; [ "$n" -gt 0 ]
}
wait_until 60 "a preemption for $prod" preemption_started
echo; "$gpugov" why "$prod" --token "$admin" || true

preemption_finished() {
  "$gpugov" preemptions --format json --token "$admin" |
    jq -r '.preemptions[0] | "\(.id) state=\(.state) outcome=\(.outcome // "")", (.finished_at != null)' |
    { read -r line; read -r done; echo "$line"; [ "$done" = true ]; }
}
wait_until 240 "the preemption to finish (notify, checkpoint, release, reschedule, verify-resume)" preemption_finished
pre=$("$gpugov" preemptions --format json --token "$admin" | jq -r '.preemptions[0]')
pre_id=$(jq -r .id <<<"$pre"); pre_wf=$(jq -r .workflow_id <<<"$pre"); outcome=$(jq -r .outcome <<<"$pre")
victim=$(jq -r .victim_job_id <<<"$pre")

say "gpugov preemptions"
"$gpugov" preemptions --token "$admin"
say "gpugov preemptions $pre_id   (the record)"
"$gpugov" preemptions "$pre_id" --token "$admin"
say "activities of workflow $pre_wf, in order (temporal workflow show)"
"$temporal" workflow show --workflow-id "$pre_wf" --address "$TEMPORAL_ADDRESS" --output json |
  jq -r '.events[] | select((.eventType // "") | test("ACTIVITY_TASK_SCHEDULED|ActivityTaskScheduled"))
         | .activityTaskScheduledEventAttributes.activityType.name' | nl -w2 -s'. '
say "the victim $victim and the production job now"
"$gpugov" get --token "$admin" | grep -E "ID|${victim:0:12}|${prod:0:12}" || true
[ "$outcome" = completed ] || die "preemption $pre_id ended with outcome $outcome, want completed"

# --------------------------------------------------------------- 2. reclaim
say "2. reclaim: an experiment job runs a real process on $agent_node through the node agent; its GPU sits idle"
agent_ready() {
  kill -0 "$agent_pid" || return 1
  grep -q 'run workers polling' "$GPUGOV_STATE/agent.log" && echo "agent pid $agent_pid polling node/$agent_node"
}
wait_until 30 "the agent running" agent_ready
proc_spec='queue: experiment
resources: {pool: sim, gpus: 1, gpu_models: [T4]}
command: [sleep, "600"]'
echo "$proc_spec" | sed 's/^/    /'
idle_job=$(submit dev-project-02 "$proc_spec")
log "submitted job $idle_job"
job_running() { local st; st=$(job_json "$1" | jq -r .state); echo "$st"; [ "$st" = running ]; }
wait_until 60 "job $idle_job running on $agent_node" job_running "$idle_job"
gpu=$(job_json "$idle_job" | jq -r '.explanation.placed.gpus[0].uuid')
[ -n "$gpu" ] && [ "$gpu" != null ] || die "job $idle_job: no GPU in its placement"
echo "    the job's process (started by the agent): $(pgrep -af '^sleep 600$' | head -1), CUDA_VISIBLE_DEVICES=$gpu"
echo "    It makes no progress and writes no checkpoint. The script reports the GPU at 1 % utilisation to"
echo "    POST /v1/nodes/$agent_node/samples every 2 s, as an NVML agent would for an idle GPU (a"
echo "    static-inventory agent reports no samples: without NVML, this script stands in for it)."

# post_idle_sample: one 1 % utilisation sample of the job's GPU, timed now.
post_idle_sample() {
  local at body
  at=$(date -u +%Y-%m-%dT%H:%M:%SZ)
  body=$(jq -cn --arg g "$gpu" --arg at "$at" '{samples: [{gpu_uuid: $g, at: $at, gpu_percent: 1, memory_used_mib: 312}]}')
  curl -fsS -o /dev/null -X POST -H "Authorization: Bearer $admin" -H 'Content-Type: application/json' \
    "$GPUGOV_API/v1/nodes/$agent_node/samples" -d "$body"
}
idle_since=$(date +%s)
# reclaim_state WANT: reports a sample, then succeeds once the job's reclaim is in state WANT.
reclaim_state() {
  local line
  post_idle_sample || { echo "sample report failed"; return 1; }
  line=$("$gpugov" reclaims --format json --token "$admin" | jq -r --arg j "$idle_job" \
    '[.reclaims[] | select(.job_id == $j)][0] // empty
     | "\(.id) class=\(.class) mode=\(.mode) state=\(.state)" + (if .notice_deadline then " deadline=\(.notice_deadline)" else "" end)')
  echo "${line:-no finding yet; idle for $(($(date +%s) - idle_since))s (observation window 40s, scan every 5s)}"
  [[ "$line" == *"state=$1"* ]]
}
wait_until 120 "an idle finding for $idle_job, owner notified" reclaim_state notified
say "gpugov reclaims   (owner notified: 'gpugov reclaims keep ID' within the notice window would keep the GPU)"
"$gpugov" reclaims --token "$admin"
wait_until 120 "the notice window (30s) to pass and the GPU to be released" reclaim_state released
say "gpugov reclaims   (released)"
"$gpugov" reclaims --token "$admin"
say "the reclaim's record and the job's end"
"$gpugov" reclaims --format json --token "$admin" | jq -r --arg j "$idle_job" '.reclaims[] | select(.job_id == $j) |
  "reclaim \(.id) (workflow \(.workflow_id))",
  "  class \(.class), mode \(.mode) (configured \(.configured_mode), stage \(.stage)), state \(.state), GPUs released \(.gpus_released)",
  "  detected \(.detected_at), notice \(.notice_at), deadline \(.notice_deadline), released \(.released_at) by \(.decided_by // "-")",
  "  basis: \(.basis)"'
job_json "$idle_job" | jq -r '"job \(.id): \(.state)"'
rec_wf=$("$gpugov" reclaims --format json --token "$admin" | jq -r --arg j "$idle_job" '[.reclaims[] | select(.job_id == $j)][0].workflow_id')
say "activities of workflow $rec_wf, in order (temporal workflow show)"
"$temporal" workflow show --workflow-id "$rec_wf" --address "$TEMPORAL_ADDRESS" --output json |
  jq -r '.events[] | select((.eventType // "") | test("ACTIVITY_TASK_SCHEDULED|ActivityTaskScheduled"))
         | .activityTaskScheduledEventAttributes.activityType.name' | nl -w2 -s'. '

say "done in $(elapsed)"
if [ "${GPUGOV_DEMO_KEEP:-}" = 1 ]; then
  cat <<EOF
The demo stack keeps running (GPUGOV_DEMO_KEEP=1): Temporal UI http://127.0.0.1:$TEMPORAL_UI_PORT, API $GPUGOV_API (token $admin).
Stop it with: deploy/dev/demo-governance.sh stop
EOF
else
  log "stopping the demo stack (GPUGOV_DEMO_KEEP=1 leaves it running)"
fi
