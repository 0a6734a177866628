package workflows_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"testing"
	"time"

	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"

	"github.com/gpugov/gpugov/activities"
	"github.com/gpugov/gpugov/internal/accounting"
	"github.com/gpugov/gpugov/internal/executor"
	"github.com/gpugov/gpugov/internal/policy"
	"github.com/gpugov/gpugov/internal/scheduling"
	"github.com/gpugov/gpugov/internal/temporalx"
	"github.com/gpugov/gpugov/internal/temporalx/temporaltest"
	"github.com/gpugov/gpugov/internal/vocab"
	"github.com/gpugov/gpugov/store"
	"github.com/gpugov/gpugov/store/storetest"
	"github.com/gpugov/gpugov/workflows"
)

// Queues of the governance tests.
const (
	expQueue  = "exp"  // experiment tier, low-risk
	prodQueue = "prod" // production tier
)

// newGovStore opens a store holding pool p1 (one node, gpus whole A100s,
// in stage) and the queues exp (experiment, low-risk) and prod (production).
func newGovStore(t *testing.T, gpus int, stage vocab.AutomationStage) *store.Store {
	t.Helper()
	st, _ := storetest.NewStore(t, storetest.Fixture{
		Pools: []scheduling.Pool{storetest.Pool(testPool, stage, 1, gpus)},
		Queues: []scheduling.Queue{
			{Name: expQueue, Tier: vocab.TierExperiment, ServiceShare: 1, LowRisk: true},
			{Name: prodQueue, Tier: vocab.TierProduction, ServiceShare: 1},
		},
	})
	return st
}

// govJob is what submitGovJob stores.
type govJob struct {
	queue              string
	tier               vocab.Tier
	gpus               int
	runSeconds         float64
	checkpointInterval int64
	protected          bool
}

func submitGovJob(t *testing.T, st *store.Store, j govJob) *store.Job {
	t.Helper()
	job, _, err := st.CreateJob(context.Background(), &store.NewJob{
		Project: "vision", Queue: j.queue, Tier: j.tier, RunSeconds: j.runSeconds, Protected: j.protected,
		Request:  scheduling.ResourceRequest{GPUs: j.gpus, Pool: testPool},
		Recovery: scheduling.RecoveryEvidence{Checkpointable: j.checkpointInterval > 0, CheckpointIntervalSeconds: j.checkpointInterval},
	})
	if err != nil {
		t.Fatal(err)
	}
	return job
}

// startGovWorkers runs the service worker with every workflow and activity
// (the scheduling policy pol, the policy cfg, progress from Temporal) and a
// simulated executor, as `serve` must wire them.
func startGovWorkers(t *testing.T, c client.Client, st *store.Store, pol scheduling.Policy, cfg *policy.Policy, exec *executor.SimulatedExecutor) {
	t.Helper()
	source := func(context.Context) (*scheduling.Policy, error) { return &pol, nil }
	startWorkersWith(t, c, activities.Deps{Store: st, Temporal: c, Policy: source,
		Governance: func() *policy.Policy { return cfg }, Progress: activities.TemporalRunProgress{Client: c},
		PollInterval: 100 * time.Millisecond}, exec, nil)
}

// activityNames lists the activities a workflow run scheduled, in order.
func activityNames(t *testing.T, c client.Client, id, runID string) []string {
	t.Helper()
	var names []string
	for _, e := range history(t, c, id, runID).Events {
		if a := e.GetActivityTaskScheduledEventAttributes(); a != nil {
			names = append(names, a.GetActivityType().GetName())
		}
	}
	return names
}

// waitForVisible waits until the visibility query finds n workflows.
func waitForVisible(t *testing.T, c client.Client, query string, n int) {
	t.Helper()
	waitFor(t, 20*time.Second, "visibility of "+query, func() bool {
		resp, err := c.ListWorkflow(context.Background(), &workflowservice.ListWorkflowExecutionsRequest{Query: query})
		return err == nil && len(resp.GetExecutions()) == n
	})
}

// writeArtifact writes v as JSON to $GPUGOV_ARTIFACTS/name when set, so a
// live run's records can be shown.
func writeArtifact(t *testing.T, name string, v any) {
	t.Helper()
	dir := os.Getenv("GPUGOV_ARTIFACTS")
	if dir == "" {
		return
	}
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dir+"/"+name, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestPreemptionOnDevServer: a production job arrives in a pool whose three
// GPUs run experiment jobs — one checkpointable, one not, one protected.
// Only the checkpointable one is preempted: one PreemptionWorkflow runs
// Notify, Checkpoint, Release, Reschedule, VerifyResume; the victim resumes
// from its checkpoint once the production job ends; the recorded loss is
// the formula's value on the recorded checkpoint times; the other two are
// never touched.
func TestPreemptionOnDevServer(t *testing.T) {
	dev := temporaltest.Start(t)
	c := dev.Client
	st := newGovStore(t, 3, vocab.StageAutomate)
	pol := scheduling.DefaultPolicy()
	pol.Preemption.MinRuntimeSeconds, pol.Preemption.RequireVerifiedResume, pol.Preemption.GraceSeconds = 0, false, 10
	cfg := policy.Default()
	cfg.Preemption.VerifyResumeTimeoutSeconds, cfg.Preemption.RecomputeTimeoutSeconds = 60, 30
	startGovWorkers(t, c, st, pol, cfg, &executor.SimulatedExecutor{Checkpoints: st, SpeedFactor: 100, HeartbeatInterval: 100 * time.Millisecond})
	ctx := context.Background()
	// 20 cycles a run: the run whose cycle opened the preemption closes (by
	// continue-as-new or the cancel below) with a short history, recorded as
	// testdata/scheduler-opened-preemption.json.
	schedIn := &workflows.SchedulerInput{CycleIntervalSeconds: 1, IterationsPerRun: 20}
	if _, err := workflows.StartScheduler(ctx, c, schedIn); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = c.CancelWorkflow(context.Background(), temporalx.SchedulerWorkflowID(temporalx.DefaultShard), "")
	})

	exp := submitGovJob(t, st, govJob{queue: expQueue, tier: vocab.TierExperiment, gpus: 1, runSeconds: 1e6, checkpointInterval: 200})
	noCkpt := submitGovJob(t, st, govJob{queue: expQueue, tier: vocab.TierExperiment, gpus: 1, runSeconds: 1e6})
	prot := submitGovJob(t, st, govJob{queue: expQueue, tier: vocab.TierExperiment, gpus: 1, runSeconds: 1e6, checkpointInterval: 200, protected: true})
	runs := map[string]client.WorkflowRun{}
	for _, j := range []*store.Job{exp, noCkpt, prot} {
		// A 2 s heartbeat timeout: the run activity sees a cancellation within
		// 0.8 × that (the SDK throttles heartbeats), well inside the grace period.
		runs[j.ID] = startJob(t, c, &workflows.JobInput{JobID: j.ID, HeartbeatTimeoutSeconds: 2})
	}
	_ = signalScheduler(ctx, c, schedIn, temporalx.SignalJobSubmitted, temporalx.JobSubmittedSignal{})
	for _, j := range []*store.Job{exp, noCkpt, prot} {
		waitFor(t, 30*time.Second, "experiment jobs running", func() bool { return jobState(t, st, j.ID) == vocab.JobRunning })
	}
	time.Sleep(3 * time.Second) // the checkpointable job writes checkpoints (every 2 s at speed 100)
	// The reclaim scan's heartbeat evidence: a running job's run activity
	// heartbeated moments ago; a job without a workflow has none.
	progress := activities.TemporalRunProgress{Client: c}
	if at, ok, err := progress.LastHeartbeat(ctx, noCkpt.ID); err != nil || !ok || time.Since(at) > 10*time.Second {
		t.Fatalf("last heartbeat of a running job: %v %v %v, want one within 10 s", at, ok, err)
	}
	if _, ok, err := progress.LastHeartbeat(ctx, "j-none"); err != nil || ok {
		t.Fatalf("last heartbeat of a job without a workflow: %v %v, want none and no error", ok, err)
	}

	prod := submitGovJob(t, st, govJob{queue: prodQueue, tier: vocab.TierProduction, gpus: 1, runSeconds: 300})
	prodRun := startJob(t, c, &workflows.JobInput{JobID: prod.ID})
	_ = signalScheduler(ctx, c, schedIn, temporalx.SignalJobSubmitted, temporalx.JobSubmittedSignal{JobID: prod.ID})
	if res := waitJob(t, prodRun, time.Minute); res.State != vocab.JobSucceeded {
		t.Fatalf("production job %+v, want succeeded", res)
	}

	var rec *store.PreemptionRecord
	waitFor(t, time.Minute, "preemption finished", func() bool {
		ps, err := st.ListPreemptions(ctx, store.PreemptionFilter{JobID: exp.ID})
		if err != nil || len(ps) != 1 || ps[0].FinishedAt == nil {
			return false
		}
		rec = &ps[0]
		return true
	})
	if rec.Outcome != vocab.PreemptionCompleted || rec.ResumedCorrectly == nil || !*rec.ResumedCorrectly || rec.ForJobID != prod.ID {
		t.Fatalf("preemption %+v, want completed for %s with a correct resume", rec, prod.ID)
	}
	want := accounting.EffectiveRunLoss(accounting.LossInput{GPUs: rec.GPUs, NotifiedAt: *rec.NotifiedAt, RunStartedAt: *rec.RunStartedAt,
		Resumable: rec.SavedCheckpoint, ResumedAt: *rec.ResumedAt, PassedAt: *rec.PassedAt})
	if rec.EffectiveLossGPUSeconds == nil || !near(*rec.EffectiveLossGPUSeconds, want.GPUSeconds) || rec.SavedCheckpoint == nil ||
		*rec.ResumedFromStep != rec.SavedCheckpoint.Step || rec.SavedCheckpoint.Step <= 0 {
		t.Fatalf("recorded loss %v, resumed from %v, saved %+v; want loss %v and a resume at the saved step",
			rec.EffectiveLossGPUSeconds, rec.ResumedFromStep, rec.SavedCheckpoint, want.GPUSeconds)
	}
	wfID := temporalx.PreemptionWorkflowIDOf(exp.ID, rec.RunID, rec.ID)
	names := activityNames(t, c, wfID, "")
	if !slices.Equal(names, []string{"Notify", "Checkpoint", "Release", "Reschedule", "VerifyResume"}) {
		t.Fatalf("preemption activities %v", names)
	}
	for _, j := range []*store.Job{noCkpt, prot} {
		if n := countRows(t, st, `SELECT count(*) FROM preemptions WHERE victim_job_id = $1`, j.ID); n != 0 || jobState(t, st, j.ID) != vocab.JobRunning {
			t.Fatalf("job %s (%d preemptions, %s) was touched", j.ID, n, jobState(t, st, j.ID))
		}
	}
	// The preemption is findable in the Temporal UI by its victim's queue and tier and its pool.
	waitForVisible(t, c, fmt.Sprintf("WorkflowType = '%s' AND GpugovQueue = '%s' AND GpugovTier = 'experiment' AND GpugovPool = '%s'",
		workflows.PreemptionWorkflowName, expQueue, testPool), 1)
	// The victim's submitter was told through the outbox: the notice, then the resume.
	if kinds := outboxKinds(t, st, exp.ID); !slices.Equal(kinds, []string{"job.placed", "job.preemption_notice", "job.placed", "job.resumed"}) {
		t.Fatalf("victim's notifications %v", kinds)
	}
	writeArtifact(t, "preemption-record.json", rec)
	writeArtifact(t, "preemption-activities.json", names)

	// End the long jobs so that the victim's history closes, and record it.
	for _, j := range []*store.Job{exp, noCkpt, prot} {
		if err := st.CancelJob(ctx, j.ID, "test", "done"); err != nil {
			t.Fatal(err)
		}
		_ = c.SignalWorkflow(ctx, runs[j.ID].GetID(), "", temporalx.SignalCancel, temporalx.CancelSignal{Actor: "test", Reason: "done"})
		waitJob(t, runs[j.ID], 30*time.Second)
	}
	record(t, c, wfID, "", "preemption-completed-with-search-attributes")
	record(t, c, runs[exp.ID].GetID(), runs[exp.ID].GetRunID(), "job-preempted-and-resumed")

	// The scheduler run whose cycle opened the preemption (the preemption
	// workflow's parent) named it per preemption (versionPreemptionIDPerPreemption
	// version 1): stop the scheduler, wait for that run to close, record it.
	d, err := c.DescribeWorkflow(ctx, wfID, "")
	if err != nil {
		t.Fatal(err)
	}
	parent := d.RawResponse.GetWorkflowExecutionInfo().GetParentExecution()
	if parent.GetWorkflowId() != temporalx.SchedulerWorkflowID(temporalx.DefaultShard) {
		t.Fatalf("preemption workflow's parent %v, want the scheduler", parent)
	}
	if err := c.CancelWorkflow(ctx, parent.GetWorkflowId(), ""); err != nil {
		t.Fatal(err)
	}
	waitFor(t, time.Minute, "the scheduler run that opened the preemption closed", func() bool {
		d, err := c.DescribeWorkflow(ctx, parent.GetWorkflowId(), parent.GetRunId())
		return err == nil && d.RawResponse.GetWorkflowExecutionInfo().GetCloseTime() != nil
	})
	if h := history(t, c, parent.GetWorkflowId(), parent.GetRunId()); !hasVersionMarker(t, h, "preemption-id-per-preemption", 1) {
		t.Fatal("the scheduler run that opened the preemption has no preemption-id-per-preemption version 1 marker")
	}
	record(t, c, parent.GetWorkflowId(), parent.GetRunId(), "scheduler-opened-preemption")
}

// failRunHoldingGPUs starts a run of a new job in queue on GPU gpu and ends
// it with outcome in the store without releasing its allocation: the
// lost-cleanup state the reclaim scan finds.
func failRunHoldingGPUs(t *testing.T, st *store.Store, queue string, gpu int, outcome string) string {
	t.Helper()
	ctx := context.Background()
	j := submitGovJob(t, st, govJob{queue: queue, tier: vocab.TierExperiment, gpus: 1, runSeconds: 100})
	now := time.Now()
	out, err := st.ApplyCycle(ctx, "cycle-"+j.ID, &scheduling.Result{PolicyVersion: "t", At: now, Placements: []scheduling.Placement{{
		JobID: j.ID, Pool: testPool, Node: testNode, Rank: 1, GPUs: []scheduling.GPUShare{{UUID: gpuUUID(gpu), Milli: 1000}}}}}, now)
	if err != nil || len(out.Placed) != 1 {
		t.Fatalf("place %s: %+v %v", j.ID, out, err)
	}
	run, err := st.MarkRunning(ctx, j.ID, out.Placed[0].AllocationID, 0, now)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Pool().Exec(ctx, `UPDATE runs SET ended_at = now(), outcome = $2 WHERE id = $1`, run, outcome); err != nil {
		t.Fatal(err)
	}
	return out.Placed[0].AllocationID
}

// TestReclaimModesOnDevServer: five allocations whose runs ended without
// releasing their GPUs, in queues the config gives each mode. The
// ReclaimScanWorkflow finds them and starts one ReclaimWorkflow each:
// report records only, auto releases at once, notify with the owner's keep
// records a dispute and releases nothing, notify without objection releases
// at the window's end, confirm releases on the operator's confirmation.
func TestReclaimModesOnDevServer(t *testing.T) {
	dev := temporaltest.Start(t)
	c := dev.Client
	st := newGovStore(t, 5, vocab.StageAutomate)
	modes := []vocab.ReclaimMode{vocab.ModeReport, vocab.ModeAuto, vocab.ModeNotify, vocab.ModeNotify, vocab.ModeConfirm}
	names := []string{"q-report", "q-auto", "q-keep", "q-notify", "q-confirm"}
	cfg := policy.Default()
	cfg.Reclaim.Enabled, cfg.Reclaim.ScanIntervalSeconds, cfg.Reclaim.NotifyWindowSeconds = true, 1, 3
	var queues []scheduling.Queue
	for i, n := range names {
		queues = append(queues, scheduling.Queue{Name: n, Tier: vocab.TierExperiment, ServiceShare: 1})
		cfg.Queues = append(cfg.Queues, policy.Queue{Name: n, Tier: "experiment", Share: 1, LowRisk: true})
		cfg.Reclaim.Rules = append(cfg.Reclaim.Rules, policy.ModeRule{Queue: n, Mode: modes[i]})
	}
	if err := st.UpsertQueues(context.Background(), queues); err != nil {
		t.Fatal(err)
	}
	allocs := make([]string, len(names))
	for i, n := range names {
		outcome := "failed"
		if i == 3 {
			outcome = "succeeded"
		}
		allocs[i] = failRunHoldingGPUs(t, st, n, i, outcome)
	}
	startGovWorkers(t, c, st, scheduling.DefaultPolicy(), cfg, &executor.SimulatedExecutor{Checkpoints: st, SpeedFactor: 100})
	ctx := context.Background()
	scan, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: temporalx.ReclaimScanWorkflowID, TaskQueue: temporalx.ServiceTaskQueue},
		workflows.ReclaimScanWorkflowName, &workflows.ReclaimScanInput{IterationsPerRun: 3})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.CancelWorkflow(context.Background(), scan.GetID(), "") })
	reclaimRun := func(i int) client.WorkflowRun { return c.GetWorkflow(ctx, temporalx.ReclaimWorkflowID(allocs[i]), "") }
	waitFor(t, 30*time.Second, "reclaim workflows started", func() bool {
		n, _ := st.ListReclaims(ctx, store.ReclaimFilter{})
		return len(n) == len(allocs)
	})
	if err := c.SignalWorkflow(ctx, temporalx.ReclaimWorkflowID(allocs[2]), "", temporalx.SignalReclaimKeep,
		temporalx.ReclaimDecisionSignal{Actor: "vision", Reason: "still evaluating the checkpoint"}); err != nil {
		t.Fatal(err)
	}
	if err := c.SignalWorkflow(ctx, temporalx.ReclaimWorkflowID(allocs[4]), "", temporalx.SignalReclaimConfirm,
		temporalx.ReclaimDecisionSignal{Actor: "operator@ops", Reason: "approved"}); err != nil {
		t.Fatal(err)
	}
	wantState := []vocab.ReclaimState{vocab.ReclaimReported, vocab.ReclaimReleased, vocab.ReclaimKept, vocab.ReclaimReleased, vocab.ReclaimReleased}
	for i := range allocs {
		wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		var res workflows.ReclaimResult
		err := reclaimRun(i).Get(wctx, &res)
		cancel()
		if err != nil || vocab.ReclaimState(res.State) != wantState[i] || res.Mode != string(modes[i]) {
			t.Fatalf("reclaim %d (%s): %+v (%v), want state %s", i, names[i], res, err, wantState[i])
		}
		if released := allocationReleased(t, st, allocs[i]); released != (wantState[i] == vocab.ReclaimReleased) {
			t.Fatalf("reclaim %d: allocation released=%v, want %v", i, released, !released)
		}
	}
	list, err := st.ListReclaims(ctx, store.ReclaimFilter{})
	if err != nil {
		t.Fatal(err)
	}
	kept, _ := st.ListReclaims(ctx, store.ReclaimFilter{State: vocab.ReclaimKept})
	if len(kept) != 1 || !kept[0].Disputed || kept[0].DisputeBy != "vision" {
		t.Fatalf("kept reclaims %+v, want one disputed by vision", kept)
	}
	// Each reclaim is findable by its job's queue and its pool.
	for _, n := range names {
		waitForVisible(t, c, fmt.Sprintf("WorkflowType = '%s' AND GpugovQueue = '%s' AND GpugovPool = '%s'",
			workflows.ReclaimWorkflowName, n, testPool), 1)
	}
	// Only the notify-mode reclaim (index 2) told its owner, through the outbox.
	for i := range allocs {
		n := countRows(t, st, `SELECT count(*) FROM notifications n JOIN allocations a ON a.job_id = n.job_id
			WHERE a.id = $1 AND n.kind = 'job.reclaim_notice'`, allocs[i])
		if want := map[bool]int{true: 1, false: 0}[modes[i] == vocab.ModeNotify]; n != want {
			t.Fatalf("reclaim %d (%s): %d reclaim notices, want %d", i, modes[i], n, want)
		}
	}
	writeArtifact(t, "reclaim-report.json", list)
	record(t, c, temporalx.ReclaimWorkflowID(allocs[2]), "", "reclaim-notify-kept-with-search-attributes")
	record(t, c, temporalx.ReclaimWorkflowID(allocs[4]), "", "reclaim-confirmed-with-search-attributes")
}

// outboxKinds lists a job's notifications' kinds in outbox order.
func outboxKinds(t *testing.T, st *store.Store, jobID string) []string {
	t.Helper()
	ns, err := st.ListNotifications(context.Background(), store.NotificationFilter{JobID: jobID})
	if err != nil {
		t.Fatal(err)
	}
	out := make([]string, 0, len(ns))
	for i := len(ns) - 1; i >= 0; i-- {
		out = append(out, string(ns[i].Kind))
	}
	return out
}
