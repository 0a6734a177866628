package workflows_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/api/temporalproto"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/worker"

	"github.com/gpugov/gpugov/activities"
	"github.com/gpugov/gpugov/internal/executor"
	"github.com/gpugov/gpugov/internal/scheduling"
	"github.com/gpugov/gpugov/internal/temporalx"
	"github.com/gpugov/gpugov/internal/temporalx/temporaltest"
	"github.com/gpugov/gpugov/internal/vocab"
	"github.com/gpugov/gpugov/store"
	"github.com/gpugov/gpugov/workflows"
)

// recordEnv, when "1", makes the dev-server tests write the histories of the
// workflows they ran into testdata/, for TestReplayRecordedHistories.
const recordEnv = "GPUGOV_RECORD_HISTORIES"

// startWorkers runs, on the dev server, the service worker (workflows and
// activities on st) and a simulated-executor worker running exec; both stop
// when the test ends.
func startWorkers(t *testing.T, c client.Client, st *store.Store, exec *executor.SimulatedExecutor) {
	t.Helper()
	startWorkersWith(t, c, activities.Deps{Store: st, Temporal: c}, exec, nil)
}

// startWorkersWith is startWorkers with the service worker's activities
// given deps (as serve would give them), and extra, when not nil, called on
// the service worker before it starts (to register a test's own version of
// an activity). Every dev-server test that runs the job workflows starts its
// workers here.
func startWorkersWith(t *testing.T, c client.Client, deps activities.Deps, exec *executor.SimulatedExecutor, extra func(worker.Worker)) {
	t.Helper()
	svc := worker.New(c, temporalx.ServiceTaskQueue, worker.Options{})
	workflows.RegisterServiceWorker(svc, deps)
	if extra != nil {
		extra(svc)
	}
	sim := worker.New(c, temporalx.SimExecutorTaskQueue, worker.Options{})
	workflows.RegisterSimExecutorWorker(sim, exec)
	for _, w := range []worker.Worker{svc, sim} {
		if err := w.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(w.Stop)
	}
}

func startJob(t *testing.T, c client.Client, in *workflows.JobInput) client.WorkflowRun {
	t.Helper()
	run, err := c.ExecuteWorkflow(context.Background(), workflows.JobStartOptions(in.JobID), workflows.JobWorkflowName, in)
	if err != nil {
		t.Fatal(err)
	}
	// A retried submission gets the same run.
	again, err := c.ExecuteWorkflow(context.Background(), workflows.JobStartOptions(in.JobID), workflows.JobWorkflowName, in)
	if err != nil || again.GetRunID() != run.GetRunID() {
		t.Fatalf("second start = %v (%v), want run %s", again, err, run.GetRunID())
	}
	return run
}

// signalScheduler sends signal with arg to the running scheduler of in's
// shard (the default one when in.Shard is "").
func signalScheduler(ctx context.Context, c client.Client, in *workflows.SchedulerInput, signal string, arg any) error {
	shard := in.Shard
	if shard == "" {
		shard = temporalx.DefaultShard
	}
	return c.SignalWorkflow(ctx, temporalx.SchedulerWorkflowID(shard), "", signal, arg)
}

func waitJob(t *testing.T, run client.WorkflowRun, timeout time.Duration) *workflows.JobResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var res workflows.JobResult
	if err := run.Get(ctx, &res); err != nil {
		t.Fatalf("job workflow %s: %v", run.GetID(), err)
	}
	return &res
}

// signalNames lists the signals a workflow run received, in order.
func signalNames(t *testing.T, c client.Client, id, runID string) []string {
	t.Helper()
	var names []string
	for _, e := range history(t, c, id, runID).Events {
		if a := e.GetWorkflowExecutionSignaledEventAttributes(); a != nil {
			names = append(names, a.GetSignalName())
		}
	}
	return names
}

func history(t *testing.T, c client.Client, id, runID string) *historypb.History {
	t.Helper()
	it := c.GetWorkflowHistory(context.Background(), id, runID, false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	h := &historypb.History{}
	for it.HasNext() {
		e, err := it.Next()
		if err != nil {
			t.Fatal(err)
		}
		h.Events = append(h.Events, e)
	}
	return h
}

// record writes a closed run's history to testdata/<name>.json when recordEnv is set.
func record(t *testing.T, c client.Client, id, runID, name string) {
	t.Helper()
	if os.Getenv(recordEnv) != "1" {
		return
	}
	b, err := temporalproto.CustomJSONMarshalOptions{Indent: "  "}.Marshal(history(t, c, id, runID))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join("testdata", name+".json"), append(b, '\n'), 0o644); err != nil {
		t.Fatal(err)
	}
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// TestEndToEndOnDevServer runs the spine on a real Temporal server: two jobs
// competing for one GPU are placed in turn by the scheduler, one more is
// cancelled while it runs, and the search attributes are queryable.
func TestEndToEndOnDevServer(t *testing.T) {
	dev := temporaltest.Start(t)
	c := dev.Client
	st := newStore(t, 1)
	startWorkers(t, c, st, &executor.SimulatedExecutor{Checkpoints: st, SpeedFactor: 100, HeartbeatInterval: 100 * time.Millisecond})

	first := submitJob(t, st, jobSpec{gpus: 1, runSeconds: 100, checkpointInterval: 40})
	second := submitJob(t, st, jobSpec{gpus: 1, runSeconds: 50})
	firstRun := startJob(t, c, &workflows.JobInput{JobID: first.ID})
	secondRun := startJob(t, c, &workflows.JobInput{JobID: second.ID})
	schedIn := &workflows.SchedulerInput{CycleIntervalSeconds: 1, IterationsPerRun: 6}
	sched, err := workflows.StartScheduler(context.Background(), c, schedIn)
	if err != nil {
		t.Fatal(err)
	}
	if err := signalScheduler(context.Background(), c, schedIn, temporalx.SignalJobSubmitted, temporalx.JobSubmittedSignal{JobID: first.ID}); err != nil {
		t.Fatal(err)
	}

	res1, res2 := waitJob(t, firstRun, time.Minute), waitJob(t, secondRun, time.Minute)
	if res1.State != vocab.JobSucceeded || res2.State != vocab.JobSucceeded || res1.AllocationID == res2.AllocationID {
		t.Fatalf("results %+v and %+v, want both succeeded on their own allocations", res1, res2)
	}
	// Exactly one of them waited for the GPU, and was told why.
	waited := secondRun
	if contains(signalNames(t, c, firstRun.GetID(), firstRun.GetRunID()), temporalx.SignalWaitReason) {
		waited = firstRun
	}
	if names := signalNames(t, c, waited.GetID(), waited.GetRunID()); !contains(names, temporalx.SignalWaitReason) || !contains(names, temporalx.SignalPlaced) {
		t.Fatalf("the waiting job received %v, want wait-reason then placed", names)
	}

	// Cancel a long run through the API's path: store, then signal.
	long := submitJob(t, st, jobSpec{gpus: 1, runSeconds: 1_000_000})
	longRun := startJob(t, c, &workflows.JobInput{JobID: long.ID})
	if err := signalScheduler(context.Background(), c, schedIn, temporalx.SignalJobSubmitted, temporalx.JobSubmittedSignal{JobID: long.ID}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "long job running", func() bool { return jobState(t, st, long.ID) == vocab.JobRunning })
	if err := st.CancelJob(context.Background(), long.ID, "carol", "queue drained"); err != nil {
		t.Fatal(err)
	}
	if err := c.SignalWorkflow(context.Background(), longRun.GetID(), "", temporalx.SignalCancel, temporalx.CancelSignal{Actor: "carol", Reason: "queue drained"}); err != nil {
		t.Fatal(err)
	}
	res3 := waitJob(t, longRun, 30*time.Second)
	if res3.State != vocab.JobCancelled || res3.Step <= 0 || !strings.Contains(res3.Detail, "cancelled at step") {
		t.Fatalf("long job result %+v, want cancelled by the executor part-way", res3)
	}
	if !allocationReleased(t, st, res3.AllocationID) || jobState(t, st, long.ID) != vocab.JobCancelled {
		t.Fatal("cancelled run's allocation not released or job not cancelled")
	}

	// Search attributes are indexed: the three jobs are findable by state and pool.
	waitFor(t, 20*time.Second, "visibility of job states", func() bool {
		resp, err := c.ListWorkflow(context.Background(), &workflowservice.ListWorkflowExecutionsRequest{
			Query: "GpugovPool = 'p1' AND GpugovJobState IN ('succeeded', 'cancelled')",
		})
		return err == nil && len(resp.GetExecutions()) == 3
	})

	// The scheduler's first run continues as new after its 6 cycles.
	waitFor(t, 30*time.Second, "scheduler continue-as-new", func() bool {
		d, err := c.DescribeWorkflow(context.Background(), sched.GetID(), sched.GetRunID())
		return err == nil && d.RawResponse.GetWorkflowExecutionInfo().GetStatus() == enumspb.WORKFLOW_EXECUTION_STATUS_CONTINUED_AS_NEW
	})
	record(t, c, firstRun.GetID(), firstRun.GetRunID(), "job-succeeded-"+map[bool]string{true: "waited", false: "direct"}[waited == firstRun])
	record(t, c, secondRun.GetID(), secondRun.GetRunID(), "job-succeeded-"+map[bool]string{true: "waited", false: "direct"}[waited == secondRun])
	record(t, c, longRun.GetID(), longRun.GetRunID(), "job-cancelled-while-running")
	record(t, c, sched.GetID(), sched.GetRunID(), "scheduler-continued-as-new")
	again, err := workflows.StartScheduler(context.Background(), c, schedIn)
	if err != nil || again.GetID() != sched.GetID() {
		t.Fatalf("second StartScheduler = %v (%v), want the running scheduler", again, err)
	}

	// Stop it so that nothing runs after the test.
	if err := c.CancelWorkflow(context.Background(), sched.GetID(), ""); err != nil {
		t.Fatal(err)
	}
}

// hangOnce makes the first attempt of a run hang, like a worker that died, at
// the checkpoint of a step: no more heartbeats, no result.
type hangOnce struct {
	store   *store.Store
	atStep  int64
	release chan struct{}
	once    sync.Once
	hung    chan struct{}
}

func (h *hangOnce) RecordCheckpoint(ctx context.Context, jobID, runID string, cp scheduling.Checkpoint) error {
	if activity.GetInfo(ctx).Attempt == 1 && cp.Step >= h.atStep {
		h.once.Do(func() { close(h.hung) })
		<-h.release
		return errors.New("worker died")
	}
	return h.store.RecordCheckpoint(ctx, jobID, runID, cp)
}

// TestRunResumesAfterHeartbeatTimeoutOnDevServer: the executor's worker stops
// heartbeating mid-run; Temporal times the attempt out after the heartbeat
// timeout and the retried attempt resumes from the last heartbeated checkpoint.
func TestRunResumesAfterHeartbeatTimeoutOnDevServer(t *testing.T) {
	dev := temporaltest.Start(t)
	c := dev.Client
	st := newStore(t, 1)
	h := &hangOnce{store: st, atStep: 60, release: make(chan struct{}), hung: make(chan struct{})}
	startWorkers(t, c, st, &executor.SimulatedExecutor{Checkpoints: h, SpeedFactor: 10, HeartbeatInterval: 100 * time.Millisecond})
	t.Cleanup(func() { close(h.release) }) // runs before the workers stop

	job := submitJob(t, st, jobSpec{gpus: 1, runSeconds: 100, checkpointInterval: 20})
	placed := placeJob(t, st, job.ID)
	run := startJob(t, c, &workflows.JobInput{JobID: job.ID, HeartbeatTimeoutSeconds: 2})
	if err := c.SignalWorkflow(context.Background(), run.GetID(), "", temporalx.SignalPlaced, placed); err != nil {
		t.Fatal(err)
	}
	res := waitJob(t, run, time.Minute)
	select {
	case <-h.hung:
	default:
		t.Fatal("the first attempt never hung")
	}
	if res.State != vocab.JobSucceeded || !res.ResumedAfterCrash || res.Step != 100 {
		t.Fatalf("result %+v, want success after a resume", res)
	}
	// The resume point is a checkpoint the lost attempt heartbeated (20 or 40,
	// as heartbeats are throttled), never the start.
	if res.ResumedFromStep != 20 && res.ResumedFromStep != 40 {
		t.Fatalf("resumed from step %d, want a heartbeated checkpoint (20 or 40)", res.ResumedFromStep)
	}
	// The history shows the run activity's last attempt started after a
	// heartbeat timeout of the one before.
	var afterHeartbeatTimeout bool
	for _, e := range history(t, c, run.GetID(), run.GetRunID()).Events {
		a := e.GetActivityTaskStartedEventAttributes()
		if a != nil && a.GetAttempt() >= 2 &&
			a.GetLastFailure().GetTimeoutFailureInfo().GetTimeoutType() == enumspb.TIMEOUT_TYPE_HEARTBEAT {
			afterHeartbeatTimeout = true
		}
	}
	if !afterHeartbeatTimeout {
		t.Fatal("no run attempt started after a heartbeat timeout")
	}
	record(t, c, run.GetID(), run.GetRunID(), "job-resumed-after-heartbeat-timeout")
}

// waitFor polls cond every 200 ms until it holds or timeout passes.
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// TestNodeRunWithoutAgentFailsOnDevServer: a job placed on a node whose agent
// never polls node/<name> fails as a node failure once the schedule-to-start
// bound passes, and its allocation is released (no GPU held forever).
func TestNodeRunWithoutAgentFailsOnDevServer(t *testing.T) {
	dev := temporaltest.Start(t)
	c := dev.Client
	st := newStore(t, 1)
	startWorkers(t, c, st, fastExecutor(st))
	job := submitJob(t, st, jobSpec{gpus: 1, runSeconds: 60})
	placed := placeJob(t, st, job.ID)
	run := startJob(t, c, &workflows.JobInput{JobID: job.ID, Executor: workflows.ExecutorNode, RunScheduleToStartSeconds: 2})
	if err := c.SignalWorkflow(context.Background(), run.GetID(), "", temporalx.SignalPlaced, placed); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	err := run.Get(ctx, nil)
	var appErr *temporal.ApplicationError
	if !errors.As(err, &appErr) || appErr.Type() != workflows.ErrTypeJobFailed {
		t.Fatalf("workflow error %v, want %s", err, workflows.ErrTypeJobFailed)
	}
	if !strings.Contains(err.Error(), "node failure: no agent on node "+placed.Node) {
		t.Fatalf("error %q does not name the node failure", err)
	}
	if got := jobState(t, st, job.ID); got != vocab.JobFailed {
		t.Fatalf("stored state %s, want failed", got)
	}
	if !allocationReleased(t, st, placed.AllocationID) {
		t.Fatal("allocation still held after the node failure")
	}
}
