package workflows_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"

	"github.com/gpugov/gpugov/activities"
	"github.com/gpugov/gpugov/internal/executor"
	"github.com/gpugov/gpugov/internal/scheduling"
	"github.com/gpugov/gpugov/internal/temporalx"
	"github.com/gpugov/gpugov/internal/temporalx/temporaltest"
	"github.com/gpugov/gpugov/internal/vocab"
	"github.com/gpugov/gpugov/store"
	"github.com/gpugov/gpugov/store/storetest"
	"github.com/gpugov/gpugov/workflows"
)

// jobsClient is the job workflows' client serve builds (search attributes
// on, simulated executor).
func jobsClient(c client.Client) *workflows.Client {
	return workflows.NewClient(c, workflows.ClientOptions{
		JobInput: workflows.JobInput{Executor: workflows.ExecutorSimulated}, SearchAttributes: true})
}

// startWorkersStarting is startWorkers with the service worker's
// activities given wf as their JobStarter, as serve gives them its
// workflows.Client.
func startWorkersStarting(t *testing.T, c client.Client, st *store.Store, wf *workflows.Client, exec *executor.SimulatedExecutor) {
	t.Helper()
	startWorkersWith(t, c, activities.Deps{Store: st, Temporal: c, JobStarter: wf}, exec, nil)
}

// executions counts the executions of workflow ID id in the namespace's
// visibility, waiting up to 30 s for it to settle on want; it returns the
// count seen last.
func executions(t *testing.T, c client.Client, id string, want int64) int64 {
	t.Helper()
	q := fmt.Sprintf("WorkflowId = '%s'", id)
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := c.CountWorkflow(context.Background(), &workflowservice.CountWorkflowExecutionsRequest{Query: q})
		if err != nil {
			t.Fatal(err)
		}
		if resp.GetCount() >= want || time.Now().After(deadline) {
			return resp.GetCount()
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// signalPlacementsResults decodes the results of the SignalPlacements
// activities in the scheduler run's history.
func signalPlacementsResults(t *testing.T, c client.Client, id, runID string) []activities.SignalPlacementsResult {
	t.Helper()
	h := history(t, c, id, runID)
	scheduled := map[int64]bool{} // SignalPlacements' ActivityTaskScheduled event IDs
	var out []activities.SignalPlacementsResult
	for _, e := range h.Events {
		if a := e.GetActivityTaskScheduledEventAttributes(); a != nil && a.GetActivityType().GetName() == "SignalPlacements" {
			scheduled[e.GetEventId()] = true
		}
		if a := e.GetActivityTaskCompletedEventAttributes(); a != nil && scheduled[a.GetScheduledEventId()] {
			var r activities.SignalPlacementsResult
			if err := converter.GetDefaultDataConverter().FromPayloads(a.GetResult(), &r); err != nil {
				t.Fatal(err)
			}
			out = append(out, r)
		}
	}
	return out
}

// TestPlacementStartsAbsentJobWorkflowOnDevServer: a job stored without its
// workflow (a bulk insert the reconciler has not reached) and placed by the
// scheduler's cycle gets its JobWorkflow started by SignalPlacements with the
// `placed` signal (signal-with-start), with the search attributes of every
// start, and runs to success on that placement instead of being released;
// exactly one workflow exists, and the background starter and the
// reconciler's StartJob coming afterwards — while it runs and after it
// closed — succeed without a second one (docs/design.md §3 step 2 "Wait").
func TestPlacementStartsAbsentJobWorkflowOnDevServer(t *testing.T) {
	dev := temporaltest.Start(t)
	c := dev.Client
	st := newStore(t, 2)
	wf := jobsClient(c)
	startWorkersStarting(t, c, st, wf, &executor.SimulatedExecutor{Checkpoints: st, SpeedFactor: 100, HeartbeatInterval: 100 * time.Millisecond})

	short := submitJob(t, st, jobSpec{gpus: 1, runSeconds: 50})
	long := submitJob(t, st, jobSpec{gpus: 1, runSeconds: 1_000_000, checkpointInterval: 100})
	schedIn := &workflows.SchedulerInput{CycleIntervalSeconds: 1}
	sched, err := workflows.StartScheduler(context.Background(), c, schedIn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.CancelWorkflow(context.Background(), sched.GetID(), "") })

	shortRun := c.GetWorkflow(context.Background(), temporalx.JobWorkflowID(short.ID), "")
	waitFor(t, time.Minute, "the short job's workflow", func() bool {
		_, err := c.DescribeWorkflow(context.Background(), shortRun.GetID(), "")
		return err == nil
	})
	res := waitJob(t, shortRun, time.Minute)
	if res.State != vocab.JobSucceeded || res.AllocationID == "" || res.RunID == "" {
		t.Fatalf("short job result %+v, want succeeded on its placement", res)
	}
	if got := jobState(t, st, short.ID); got != vocab.JobSucceeded {
		t.Fatalf("short job stored %s, want succeeded", got)
	}
	// It ran on the first placement it got: none was released.
	if n := countRows(t, st, `SELECT count(*) FROM allocations WHERE job_id = $1`, short.ID); n != 1 {
		t.Fatalf("short job had %d allocations, want 1 (its placement not released)", n)
	}
	waitFor(t, 30*time.Second, "the long job running", func() bool { return jobState(t, st, long.ID) == vocab.JobRunning })
	if n := countRows(t, st, `SELECT count(*) FROM allocations WHERE job_id = $1`, long.ID); n != 1 {
		t.Fatalf("long job had %d allocations, want 1", n)
	}

	// The started workflow: the `placed` signal in its history from the
	// start, and the attributes every start gives (JobWorkflowID, the
	// service task queue, the job's queue, tier and pool).
	shortHist := history(t, c, shortRun.GetID(), "")
	first := shortHist.Events[0].GetWorkflowExecutionStartedEventAttributes()
	if first == nil || first.GetTaskQueue().GetName() != temporalx.ServiceTaskQueue || first.GetWorkflowType().GetName() != workflows.JobWorkflowName {
		t.Fatalf("first event %v, want JobWorkflow started on %s", shortHist.Events[0], temporalx.ServiceTaskQueue)
	}
	if names := signalNames(t, c, shortRun.GetID(), ""); len(names) != 1 || names[0] != temporalx.SignalPlaced {
		t.Fatalf("short job's signals %v, want the one `placed` of its start", names)
	}
	if sig := shortHist.Events[1].GetWorkflowExecutionSignaledEventAttributes(); sig == nil || sig.GetSignalName() != temporalx.SignalPlaced {
		t.Fatalf("second event %v, want the `placed` signal of signal-with-start", shortHist.Events[1])
	}
	sa := first.GetSearchAttributes().GetIndexedFields()
	for key, want := range map[string]string{"GpugovQueue": testQueue, "GpugovTier": "standard", "GpugovPool": testPool} {
		var got string
		if err := converter.GetDefaultDataConverter().FromPayload(sa[key], &got); err != nil || got != want {
			t.Fatalf("start search attribute %s = %q (%v), want %q", key, got, err, want)
		}
	}
	started := 0
	for _, r := range signalPlacementsResults(t, c, sched.GetID(), sched.GetRunID()) {
		started += r.Started
		if len(r.Released) > 0 {
			t.Fatalf("SignalPlacements released %+v, want every placement started", r.Released)
		}
	}
	if started != 2 {
		t.Fatalf("SignalPlacements started %d workflows, want 2", started)
	}
	// The start is in the ledger: the reconciler skips it.
	if !wf.Ledger().Confirmed(short.ID) || !wf.Ledger().Confirmed(long.ID) {
		t.Fatal("signal-with-start not recorded in the StartLedger")
	}

	// The background starter and the reconciler, coming late: a start of
	// the running workflow and of the closed one succeed, and start nothing.
	var logs bytes.Buffer
	starter := workflows.NewStarter(wf, workflows.StarterOptions{Workers: 2,
		Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn}))})
	for _, j := range []*store.Job{short, long} {
		if !starter.Offer(j.ID, j.WorkflowAttributes()) {
			t.Fatal("starter refused an offer")
		}
	}
	starter.Close()
	if logs.Len() > 0 {
		t.Fatalf("the starter logged %q, want its starts to succeed", logs.String())
	}
	fresh := jobsClient(c) // another process: an empty ledger
	for _, j := range []*store.Job{short, long} {
		if err := fresh.StartJob(context.Background(), j.ID, j.WorkflowAttributes()); err != nil {
			t.Fatalf("StartJob of %s after its signal-with-start: %v", j.ID, err)
		}
	}
	longDesc, err := c.DescribeWorkflow(context.Background(), temporalx.JobWorkflowID(long.ID), "")
	if err != nil || longDesc.RawResponse.GetWorkflowExecutionInfo().GetStatus() != enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING {
		t.Fatalf("long job's workflow %v (%v), want running", longDesc, err)
	}
	for _, j := range []*store.Job{short, long} {
		if n := executions(t, c, temporalx.JobWorkflowID(j.ID), 1); n != 1 {
			t.Fatalf("%s: %d executions, want exactly one", j.ID, n)
		}
	}
	record(t, c, shortRun.GetID(), first.GetOriginalExecutionRunId(), "job-succeeded-signal-with-start")

	// Cancel the long run through the API's path, so nothing runs on.
	if err := st.CancelJob(context.Background(), long.ID, "carol", "test over"); err != nil {
		t.Fatal(err)
	}
	if err := wf.CancelJob(context.Background(), long.ID, long.WorkflowAttributes(), "carol", "test over"); err != nil {
		t.Fatal(err)
	}
	if res := waitJob(t, c.GetWorkflow(context.Background(), temporalx.JobWorkflowID(long.ID), ""), 30*time.Second); res.State != vocab.JobCancelled {
		t.Fatalf("long job result %+v, want cancelled", res)
	}
}

// TestPlacementOfClosedJobWorkflowIsReleasedOnDevServer: SignalPlacements
// does not start again the workflow of a job that has closed (here
// terminated while the store still has the job pending, then placed): the
// signal-with-start is refused by the ID-reuse policy and the placement is
// released back to waiting, as before; a job placed with its cancel
// requested and no workflow is released too (cancelled), not started; the
// one closed workflow stays the only one.
func TestPlacementOfClosedJobWorkflowIsReleasedOnDevServer(t *testing.T) {
	dev := temporaltest.Start(t)
	c := dev.Client
	st := newStore(t, 2)
	wf := jobsClient(c)
	closed := submitJob(t, st, jobSpec{gpus: 1, runSeconds: 50})
	cancelled := submitJob(t, st, jobSpec{gpus: 1, runSeconds: 50})
	// No worker: the workflow is started and terminated before it runs.
	if err := wf.StartJob(context.Background(), closed.ID, closed.WorkflowAttributes()); err != nil {
		t.Fatal(err)
	}
	id := temporalx.JobWorkflowID(closed.ID)
	if err := c.TerminateWorkflow(context.Background(), id, "", "operator terminated it"); err != nil {
		t.Fatal(err)
	}
	out := storetest.Place(t, st, "cycle-1", time.Now(),
		storetest.Placement(closed.ID, testPool, testNode, scheduling.MilliPerGPU, gpuUUID(0)),
		storetest.Placement(cancelled.ID, testPool, testNode, scheduling.MilliPerGPU, gpuUUID(1)))
	if err := st.CancelJob(context.Background(), cancelled.ID, "alice", "changed my mind"); err != nil {
		t.Fatal(err)
	}
	in := &activities.SignalPlacementsInput{CycleID: out.CycleID}
	for _, p := range out.Placed {
		in.Placements = append(in.Placements, activities.PlacedJob{JobID: p.JobID, AllocationID: p.AllocationID, Pool: p.Pool, Node: p.Node, GPUs: p.GPUs})
	}
	a := &activities.Scheduler{Store: st, Temporal: c, JobStarter: wf}
	res, err := a.SignalPlacements(context.Background(), in)
	if err != nil {
		t.Fatal(err)
	}
	if res.Started != 0 || res.Signalled != 0 || len(res.Released) != 2 {
		t.Fatalf("result %+v, want both placements released, none started", res)
	}
	byJob := map[string]activities.ReleasedPlacement{}
	for _, r := range res.Released {
		byJob[r.JobID] = r
	}
	if e := byJob[closed.ID].Error; !strings.Contains(e, "closed") {
		t.Fatalf("closed job's release reason %q, want the closed workflow named", e)
	}
	for _, p := range out.Placed {
		if !allocationReleased(t, st, p.AllocationID) {
			t.Fatalf("allocation %s of %s still held", p.AllocationID, p.JobID)
		}
	}
	if got := jobState(t, st, closed.ID); got != vocab.JobWaiting {
		t.Fatalf("closed job's stored state %s, want waiting", got)
	}
	if got := jobState(t, st, cancelled.ID); got != vocab.JobCancelled {
		t.Fatalf("cancel-requested job's stored state %s, want cancelled", got)
	}
	if n := executions(t, c, id, 1); n != 1 {
		t.Fatalf("%s: %d executions, want the terminated one only", id, n)
	}
	d, err := c.DescribeWorkflow(context.Background(), id, "")
	if err != nil || d.RawResponse.GetWorkflowExecutionInfo().GetStatus() != enumspb.WORKFLOW_EXECUTION_STATUS_TERMINATED {
		t.Fatalf("closed job's workflow %v (%v), want the terminated run", d, err)
	}
	if _, err := c.DescribeWorkflow(context.Background(), temporalx.JobWorkflowID(cancelled.ID), ""); err == nil {
		t.Fatal("the cancel-requested job's workflow was started")
	}
	// A retry of the activity releases nothing twice and starts nothing.
	if res, err := a.SignalPlacements(context.Background(), in); err != nil || res.Started != 0 || len(res.Released) != 2 {
		t.Fatalf("retried: %+v, %v", res, err)
	}
	if n := executions(t, c, id, 1); n != 1 {
		t.Fatalf("%s after the retry: %d executions, want one", id, n)
	}
}
