package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/worker"

	"github.com/gpugov/gpugov/api"
	apiclient "github.com/gpugov/gpugov/api/client"
	"github.com/gpugov/gpugov/internal/executor/process"
	"github.com/gpugov/gpugov/internal/inventory"
	"github.com/gpugov/gpugov/internal/inventory/httpreport"
	"github.com/gpugov/gpugov/internal/inventory/static"
	"github.com/gpugov/gpugov/internal/temporalx"
	"github.com/gpugov/gpugov/internal/vocab"
	"github.com/gpugov/gpugov/service"
	"github.com/gpugov/gpugov/store"
	"github.com/gpugov/gpugov/store/storetest"
	"github.com/gpugov/gpugov/workflows"
)

// The node the live agent test's agent serves, its pool and its GPUs (a
// static inventory: the trainer only reads CUDA_VISIBLE_DEVICES).
const (
	agentPool     = "agent-pool"
	agentNode     = "agent-node-01"
	agentToken    = "e2e-agent"
	agentGrace    = 10 * time.Second // SIGTERM → SIGKILL, as `gpugov agent --grace`
	agentRefresh  = 2 * time.Second  // inventory refresh, as `gpugov agent --refresh`
	agentGPUModel = "A100-SXM4-80GB"
)

// agentGPUs are the node's two GPUs, as a static inventory file names them.
var agentGPUs = []string{
	"GPU-e2e00001-0000-4000-8000-000000000000",
	"GPU-e2e00001-0000-4000-8000-000000000001",
}

// agentInventoryYAML is the node's static inventory (internal/inventory/static).
func agentInventoryYAML() string {
	var b strings.Builder
	fmt.Fprintf(&b, "pools:\n  - name: %s\n    nodes:\n      - name: %s\n        cpu_milli: 64000\n        memory_mib: 524288\n        gpus:\n",
		agentPool, agentNode)
	for _, u := range agentGPUs {
		fmt.Fprintf(&b, "          - {uuid: %s, model: %s, memory_mib: 81920, nvlink_domain: nvl0}\n", u, agentGPUModel)
	}
	return b.String()
}

// agentPolicyYAML puts the agent's pool in the automate stage, so that the
// plan's preemptions act, lets young, unverified checkpointable runs be
// victims with a 60 s grace, and bounds the verify-resume waits. It names
// no queue: the default queues are created (experiment low-risk).
const agentPolicyYAML = `version: gpugov.policy/v1
pools:
  ` + agentPool + `:
    stage: automate
preemption:
  min_runtime_s: 0
  require_verified_resume: false
  grace_s: 60
  verify_resume_timeout_s: 180
  recompute_timeout_s: 60
`

// agentStack is the service of startAgentStack plus what the test reads
// directly: the store, the agent's checkpoint root and the trainer binary.
type agentStack struct {
	*env
	store          *store.Store
	checkpointRoot string
	trainer        string
	agentStartedAt time.Time // just before the agent's first inventory report
}

// startAgentStack starts, on a fresh database and Temporal server (backend), the service
// (API, workers, scheduler, a policy file putting agentPool in the
// automate stage and preempting young, unverified checkpointable runs with
// a 60 s grace) and a node agent for agentNode as `gpugov agent
// --inventory-file F --node agentNode --executor process` wires it: the
// inventory refresh loop and a worker on node/agentNode running the process
// executor, both talking to the API with an agent-role token. startEnvOn
// offers neither a policy file nor an agent token, hence this
// variant of it.
func startAgentStack(t *testing.T, backend temporalBackend) *agentStack {
	t.Helper()
	backend.require(t)
	dir := t.TempDir()
	invFile, policyFile := filepath.Join(dir, "inventory.yaml"), filepath.Join(dir, "policy.yaml")
	for path, text := range map[string]string{invFile: agentInventoryYAML(), policyFile: agentPolicyYAML} {
		if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	src := static.Source{Path: invFile, Node: agentNode}
	nodes, err := src.Collect(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	dbURL := storetest.NewDatabase(t)
	dev := backend.start(t)
	tokens, err := api.NewTokens(map[string]api.Principal{
		adminToken: {Name: "e2e-admin", Project: "platform", Role: vocab.RoleAdmin},
		agentToken: {Name: "agent-" + agentNode, Project: "platform", Role: vocab.RoleAgent, Node: agentNode},
	})
	if err != nil {
		t.Fatal(err)
	}
	logs := &logBuffer{}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	svc, err := service.Start(ctx, service.Config{
		DatabaseURL: dbURL, TemporalAddress: dev.HostPort, APIAddr: "127.0.0.1:0", Tokens: tokens,
		Inventory: inventory.Pools(nodes), PolicyFile: policyFile,
		CycleInterval: time.Second, ReconcileInterval: 2 * time.Second,
		Logger: slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelWarn})),
	})
	if err != nil {
		t.Fatalf("start service: %v\n%s", err, logs.String())
	}
	t.Cleanup(func() {
		if err := svc.Close(context.Background()); err != nil {
			t.Errorf("close service: %v", err)
		}
		if t.Failed() {
			t.Logf("service and agent log (warnings and errors):\n%s", logs.tail(8000))
		}
	})
	adminClient, err := apiclient.New("http://"+svc.APIAddr(), adminToken)
	if err != nil {
		t.Fatal(err)
	}
	s := &agentStack{env: &env{svc: svc, dbURL: dbURL, client: adminClient, logs: logs}, store: svc.Store(),
		checkpointRoot: filepath.Join(dir, "runs"), trainer: buildTrainer(t, dir)}
	s.startAgent(t, dev.HostPort, src)
	return s
}

// startAgent runs the node agent until the test ends (stopped before the
// service): the inventory loop reporting src through the API and the run
// worker on node/agentNode.
func (s *agentStack) startAgent(t *testing.T, temporalAddr string, src inventory.Source) {
	t.Helper()
	s.agentStartedAt = time.Now()
	apiClient, err := httpreport.New("http://"+s.svc.APIAddr(), agentToken)
	if err != nil {
		t.Fatal(err)
	}
	logger := slog.New(slog.NewTextHandler(s.logs, &slog.HandlerOptions{Level: slog.LevelWarn})).With("agent", agentNode)
	c, err := temporalx.Dial(context.Background(), temporalx.ClientOptions{HostPort: temporalAddr, Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	w := worker.New(c, temporalx.NodeTaskQueue(agentNode), process.WorkerOptions(agentGrace))
	workflows.RegisterNodeWorker(w, &process.ProcessActivity{
		Executor: &process.Executor{CheckpointRoot: s.checkpointRoot, GracePeriod: agentGrace,
			HeartbeatInterval: process.NoticeInterval, Logger: logger},
		Node: agentNode, Specs: apiClient, Checkpoints: apiClient, Logger: logger,
	})
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	loop := &inventory.Agent{Source: src, Reporter: apiClient, Refresh: agentRefresh, Logger: logger}
	done := make(chan error, 1)
	go func() { done <- loop.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("agent inventory loop: %v", err)
		}
		w.Stop()
		c.Close()
	})
}

// buildTrainer builds the process executor's test job (it checkpoints on
// SIGTERM and resumes from GPUGOV_RESUME_FROM) into dir.
func buildTrainer(t *testing.T, dir string) string {
	t.Helper()
	bin := filepath.Join(dir, "trainer")
	src := filepath.Join(repoRoot(t), "internal", "executor", "process", "testdata", "trainer")
	if out, err := exec.Command("go", "build", "-o", bin, src).CombinedOutput(); err != nil {
		t.Fatalf("build the trainer: %v\n%s", err, out)
	}
	return bin
}

// submit submits a job running the trainer with args on both GPUs of the node.
func (s *agentStack) submit(t *testing.T, queue string, checkpointable bool, args ...string) *api.Job {
	t.Helper()
	spec := &api.JobSpec{Queue: queue, Resources: api.ResourceSpec{GPUs: len(agentGPUs), Pool: agentPool},
		Command: append([]string{s.trainer, "-env-file", "env.json"}, args...)}
	if checkpointable {
		spec.Recovery = api.RecoverySpec{Checkpointable: true, CheckpointIntervalSeconds: 1}
	}
	job, code, err := s.client.Submit(context.Background(), spec, "")
	if err != nil || code/100 != 2 {
		t.Fatalf("submit to %s: %d %v", queue, code, err)
	}
	return job
}

// jobState is the job's state as the API reports it.
func (s *agentStack) jobState(t *testing.T, id string) vocab.JobState {
	t.Helper()
	j, err := s.client.GetJob(context.Background(), id)
	if err != nil {
		t.Fatalf("get job %s: %v", id, err)
	}
	return j.State
}

// runFiles are what one run's process left in its run directory.
type runFiles struct {
	env     map[string]string // the executor's variables, as the trainer saw them (-env-file env.json)
	pgid    int               // the process group the executor started (attempt.json)
	started int64             // from_step of the status file's started line
	lines   int               // status lines written
}

// readRun reads the run directory <root>/<job>/runs/<run> of one run.
func (s *agentStack) readRun(t *testing.T, jobID, runID string) runFiles {
	t.Helper()
	dir := filepath.Join(s.checkpointRoot, jobID, "runs", runID)
	var rf runFiles
	readJSON(t, filepath.Join(dir, "env.json"), &rf.env)
	var attempt struct {
		PID int `json:"pid"` // the group leader's PID, which is the group's ID
	}
	readJSON(t, filepath.Join(dir, "attempt.json"), &attempt)
	rf.pgid = attempt.PID
	status, err := os.ReadFile(filepath.Join(dir, "status.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	rf.started = -1
	for _, line := range strings.Split(strings.TrimSpace(string(status)), "\n") {
		rf.lines++
		var l struct {
			Type     string `json:"type"`
			FromStep int64  `json:"from_step"`
		}
		if json.Unmarshal([]byte(line), &l) == nil && l.Type == "started" && rf.started < 0 {
			rf.started = l.FromStep
		}
	}
	return rf
}

func readJSON(t *testing.T, path string, v any) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

// runIDs lists a job's runs, oldest first, with their outcomes.
func (s *agentStack) runIDs(t *testing.T, jobID string) (ids []string, outcomes []vocab.RunOutcome) {
	t.Helper()
	rows, err := s.store.Pool().Query(context.Background(),
		`SELECT id, coalesce(outcome, '') FROM runs WHERE job_id = $1 ORDER BY started_at, id`, jobID)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var id string
		var outcome vocab.RunOutcome
		if err := rows.Scan(&id, &outcome); err != nil {
			t.Fatal(err)
		}
		ids, outcomes = append(ids, id), append(outcomes, outcome)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return ids, outcomes
}

// expectedLossGPUSeconds is docs/design.md §1's effective run loss, worked out
// here from the record's stored times: GPU-seconds computed since the last
// valid checkpoint before the notice (lost), plus the save time from the
// notice to a checkpoint saved on the way out, plus the recompute time from
// the next run's start until it was back past the step reached — all on
// every GPU the victim held.
func expectedLossGPUSeconds(rec *store.PreemptionRecord) (lost, save, recompute, gpuSeconds float64) {
	notice, cp := *rec.NotifiedAt, rec.SavedCheckpoint
	if cp.At.After(notice) {
		save = cp.At.Sub(notice).Seconds()
	} else {
		from := *rec.RunStartedAt
		if cp.At.After(from) {
			from = cp.At
		}
		lost = notice.Sub(from).Seconds()
	}
	recompute = rec.PassedAt.Sub(*rec.ResumedAt).Seconds()
	return lost, save, recompute, rec.GPUs * (lost + save + recompute)
}

// TestAgentPreemptsRealProcessAndResumes is the node agent's live test
// (issue 5): a real PostgreSQL, a Temporal dev server, the service (API,
// workers, scheduler) and a node agent running jobs as real local processes
// (the process executor's trainer; no GPU needed, it only reads
// CUDA_VISIBLE_DEVICES). An experiment job, checkpointable, fills the
// node's two GPUs; a production job arrives. The PreemptionWorkflow
// notifies the victim: its process gets SIGTERM, saves a checkpoint and
// exits within its grace period; the GPUs are released, the production job
// runs to success on them, and the victim's next run is a new process
// given GPUGOV_RESUME_FROM = that checkpoint, which reports starting there.
// The record says the resume was correct and holds the effective run loss
// docs/design.md defines, recomputed here from the record's times.
func TestAgentPreemptsRealProcessAndResumes(t *testing.T) { agentPreemptsAndResumes(t, onDevServer) }

// TestAgentPreemptsRealProcessAndResumesOnCluster is
// TestAgentPreemptsRealProcessAndResumes on the Temporal server on
// PostgreSQL (deploy/temporal/cluster.yaml).
func TestAgentPreemptsRealProcessAndResumesOnCluster(t *testing.T) {
	agentPreemptsAndResumes(t, onCluster)
}

// agentPreemptsAndResumes is TestAgentPreemptsRealProcessAndResumes's body on backend.
func agentPreemptsAndResumes(t *testing.T, backend temporalBackend) {
	s := startAgentStack(t, backend)
	ctx := context.Background()

	// The agent reports its node through the API (the node's updated_at is
	// its last-seen time; the seed at the service's start set it before).
	waitFor(t, 30*time.Second, "the agent's inventory report", func() (bool, string) {
		var seen time.Time
		if err := s.store.Pool().QueryRow(ctx, `SELECT updated_at FROM nodes WHERE name = $1`, agentNode).Scan(&seen); err != nil {
			return false, err.Error()
		}
		return seen.After(s.agentStartedAt), "node last seen at " + seen.String()
	})

	victim := s.submit(t, "experiment", true, "-steps", "1000000", "-step-interval", "50ms", "-checkpoint-every", "20")
	waitFor(t, time.Minute, "the experiment job running with a checkpoint", func() (bool, string) {
		j, err := s.store.GetJob(ctx, victim.ID)
		if err != nil {
			return false, err.Error()
		}
		return j.State == vocab.JobRunning && j.Recovery.LastCheckpoint != nil, string(j.State)
	})

	prod := s.submit(t, "production", false, "-steps", "20", "-step-interval", "20ms")
	waitFor(t, 2*time.Minute, "the production job succeeded", func() (bool, string) {
		st := s.jobState(t, prod.ID)
		return st == vocab.JobSucceeded, string(st)
	})
	var rec *store.PreemptionRecord
	waitFor(t, 2*time.Minute, "the preemption finished", func() (bool, string) {
		ps, err := s.store.ListPreemptions(ctx, store.PreemptionFilter{JobID: victim.ID})
		if err != nil || len(ps) != 1 || ps[0].FinishedAt == nil {
			return false, fmt.Sprintf("%d preemptions, %v", len(ps), err)
		}
		rec = &ps[0]
		return true, ""
	})

	// The preemption: production for experiment, completed, resumed at the saved step.
	if rec.Outcome != vocab.PreemptionCompleted || rec.ForJobID != prod.ID || rec.ResumedCorrectly == nil || !*rec.ResumedCorrectly {
		t.Fatalf("preemption %+v, want completed for %s with a correct resume", rec, prod.ID)
	}
	if rec.NotifiedAt == nil || rec.RunStartedAt == nil || rec.ResumedAt == nil || rec.PassedAt == nil {
		t.Fatalf("preemption %+v lacks the notice, run start, resume or passed time", rec)
	}
	cp := rec.SavedCheckpoint
	if cp == nil || cp.Step <= 0 || rec.ResumedFromStep == nil || *rec.ResumedFromStep != cp.Step ||
		rec.CheckpointInGrace == nil || !*rec.CheckpointInGrace || !cp.At.After(*rec.NotifiedAt) {
		t.Fatalf("saved checkpoint %+v (in grace %v), resumed from %v: want a checkpoint saved after the notice and the resume there",
			cp, rec.CheckpointInGrace, rec.ResumedFromStep)
	}
	if rec.StepAtNotice == nil || *rec.StepAtNotice != cp.Step {
		t.Errorf("step at notice %v, want %d: the trainer checkpoints the step it reached on SIGTERM", rec.StepAtNotice, cp.Step)
	}

	// The effective run loss, from the record's own times.
	lost, save, recompute, want := expectedLossGPUSeconds(rec)
	if rec.GPUs != float64(len(agentGPUs)) || rec.EffectiveLossGPUSeconds == nil ||
		!closeTo(*rec.EffectiveLossGPUSeconds, want, 1e-3) || want <= 0 {
		t.Fatalf("loss %v GPU-s on %v GPUs, want %v = %d × (lost %.3f + save %.3f + recompute %.3f)",
			rec.EffectiveLossGPUSeconds, rec.GPUs, want, len(agentGPUs), lost, save, recompute)
	}
	// The notice reaches the process within the agent's heartbeat interval,
	// not JobWorkflow's 30 s heartbeat timeout's 24 s batching.
	if limit := 3 * process.NoticeInterval.Seconds(); save > limit {
		t.Errorf("the checkpoint came %.1f s after the notice, want under %.0f s (process.NoticeInterval %s)", save, limit, process.NoticeInterval)
	}
	if rec.LostSeconds == nil || rec.SaveRestoreSeconds == nil || rec.RecomputeSeconds == nil ||
		!closeTo(*rec.LostSeconds, lost, 1e-3) || !closeTo(*rec.SaveRestoreSeconds, save, 1e-3) || !closeTo(*rec.RecomputeSeconds, recompute, 1e-3) {
		t.Errorf("loss parts lost %v save %v recompute %v, want %.3f %.3f %.3f",
			rec.LostSeconds, rec.SaveRestoreSeconds, rec.RecomputeSeconds, lost, save, recompute)
	}

	// Two runs of the victim, each its own process on both GPUs: the first
	// started fresh and ended preempted, the second was given the saved
	// checkpoint and reported starting at its step.
	ids, outcomes := s.runIDs(t, victim.ID)
	if len(ids) != 2 || ids[0] != rec.RunID || ids[1] != rec.ResumedRunID || outcomes[0] != vocab.RunPreempted || outcomes[1] != "" {
		t.Fatalf("victim runs %v (%v), want %s preempted then %s running", ids, outcomes, rec.RunID, rec.ResumedRunID)
	}
	first, second := s.readRun(t, victim.ID, ids[0]), s.readRun(t, victim.ID, ids[1])
	wantDevices := strings.Join(agentGPUs, ",")
	for i, rf := range []runFiles{first, second} {
		if got := rf.env[process.EnvVisibleDevices]; !sameSet(got, wantDevices) {
			t.Errorf("victim run %d: CUDA_VISIBLE_DEVICES %q, want the node's GPUs %q", i+1, got, wantDevices)
		}
	}
	if first.env[process.EnvResumeFrom] != "" || first.started != 0 {
		t.Errorf("first run: resume from %q, started at %d; want a fresh start", first.env[process.EnvResumeFrom], first.started)
	}
	if second.env[process.EnvResumeFrom] != cp.Location || second.env[process.EnvResumeStep] != strconv.FormatInt(cp.Step, 10) ||
		second.started != cp.Step {
		t.Errorf("second run: %s=%q %s=%q, started at %d; want %q, %d and a start there",
			process.EnvResumeFrom, second.env[process.EnvResumeFrom], process.EnvResumeStep, second.env[process.EnvResumeStep],
			second.started, cp.Location, cp.Step)
	}
	if first.pgid <= 0 || second.pgid <= 0 || first.pgid == second.pgid {
		t.Errorf("process groups %d and %d, want two distinct processes", first.pgid, second.pgid)
	} else if err := syscall.Kill(-first.pgid, 0); !errors.Is(err, syscall.ESRCH) {
		t.Errorf("the preempted run's process group %d is still alive (%v)", first.pgid, err)
	}
	if data, err := os.ReadFile(cp.Location); err != nil || !strings.Contains(string(data), fmt.Sprintf(`"step":%d`, cp.Step)) {
		t.Errorf("checkpoint file %s: %q %v, want step %d", cp.Location, data, err, cp.Step)
	}

	// The production job ran as a process on the freed GPUs, after the release.
	prodRuns, prodOutcomes := s.runIDs(t, prod.ID)
	if len(prodRuns) != 1 || prodOutcomes[0] != vocab.RunSucceeded {
		t.Fatalf("production runs %v (%v), want one succeeded", prodRuns, prodOutcomes)
	}
	if got := s.readRun(t, prod.ID, prodRuns[0]).env[process.EnvVisibleDevices]; !sameSet(got, wantDevices) {
		t.Errorf("production run: CUDA_VISIBLE_DEVICES %q, want %q", got, wantDevices)
	}

	// The preemption's steps, in order, in its workflow's history.
	if names := historyActivities(t, s, rec.WorkflowID); !slices.Equal(names, []string{"Notify", "Checkpoint", "Release", "Reschedule", "VerifyResume"}) {
		t.Errorf("preemption activities %v", names)
	}
	t.Logf("preempted at step %d (checkpoint %s), resumed at step %d in run %s; loss %.3f GPU-s = %d GPUs × (lost %.3f + save %.3f + recompute %.3f s)",
		cp.Step, filepath.Base(cp.Location), *rec.ResumedFromStep, rec.ResumedRunID, *rec.EffectiveLossGPUSeconds,
		len(agentGPUs), lost, save, recompute)
}

// historyActivities lists the activity types a workflow scheduled, in order.
func historyActivities(t *testing.T, s *agentStack, workflowID string) []string {
	t.Helper()
	it := s.svc.Temporal().GetWorkflowHistory(context.Background(), workflowID, "", false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	var names []string
	for it.HasNext() {
		e, err := it.Next()
		if err != nil {
			t.Fatal(err)
		}
		if a := e.GetActivityTaskScheduledEventAttributes(); a != nil {
			names = append(names, a.GetActivityType().GetName())
		}
	}
	return names
}

// sameSet reports whether two comma-separated lists hold the same items.
func sameSet(a, b string) bool {
	x, y := strings.Split(a, ","), strings.Split(b, ",")
	slices.Sort(x)
	slices.Sort(y)
	return slices.Equal(x, y)
}

func closeTo(a, b, tol float64) bool { return a-b <= tol && b-a <= tol }
