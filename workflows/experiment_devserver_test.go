package workflows_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"

	"github.com/gpugov/gpugov/activities"
	"github.com/gpugov/gpugov/internal/experiment"
	"github.com/gpugov/gpugov/internal/policy"
	"github.com/gpugov/gpugov/internal/scheduling"
	"github.com/gpugov/gpugov/internal/temporalx"
	"github.com/gpugov/gpugov/internal/temporalx/temporaltest"
	"github.com/gpugov/gpugov/internal/vocab"
	"github.com/gpugov/gpugov/store"
	"github.com/gpugov/gpugov/workflows"
)

// expPolicies activates the default policy (the baseline) and stores an
// aging candidate; it returns their hashes.
func expPolicies(t *testing.T, st *store.Store) (base, cand string) {
	t.Helper()
	ctx := context.Background()
	b, c := policy.Default(), policy.Default()
	c.Aging.IntervalSeconds *= 2
	if _, err := st.ActivatePolicy(ctx, b.Hash(), b.Canonical(), "serve", "policy file", nil); err != nil {
		t.Fatal(err)
	}
	if err := st.SavePolicyVersion(ctx, c.Hash(), c.Canonical()); err != nil {
		t.Fatal(err)
	}
	return b.Hash(), c.Hash()
}

// liveExperiment creates an experiment on pool p1 starting now: the jobs
// submitted are expected to double; rollback when more than capSubmitted
// are submitted in the window so far.
func liveExperiment(t *testing.T, st *store.Store, base, cand string, window time.Duration, capSubmitted float64, minSample int) *store.Experiment {
	t.Helper()
	e := &store.Experiment{Spec: experiment.Spec{Name: "submissions", Hypothesis: "twice the submissions",
		Scope: experiment.Scope{Pools: []string{testPool}}, WindowSeconds: window.Seconds(), CheckIntervalSeconds: 1,
		Expected: experiment.Expectation{Metric: "submitted", Direction: experiment.Increase, Change: 1},
		Rollback: []experiment.Condition{{Name: "submission cap", Metric: "submitted", Above: &capSubmitted}}, MinSample: minSample},
		BaselineHash: base, CandidateHash: cand, Groups: []vocab.PolicyGroup{vocab.PolicyAging}, CreatedBy: "admin-alice"}
	if err := st.CreateExperiment(context.Background(), e); err != nil {
		t.Fatal(err)
	}
	return e
}

// experimentWorker starts a service worker whose activities run on st with
// a cycle interval of 1 s.
func experimentWorker(t *testing.T, c client.Client, st *store.Store) worker.Worker {
	t.Helper()
	w := worker.New(c, temporalx.ServiceTaskQueue, worker.Options{})
	workflows.RegisterServiceWorker(w, activities.Deps{Store: st, Temporal: c, CycleIntervalSeconds: 1})
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	return w
}

func checkNumbers(t *testing.T, st *store.Store, id string) []string {
	t.Helper()
	evs, err := st.ExperimentEvents(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, ev := range evs {
		if ev.Kind == store.ExperimentEventCheck {
			out = append(out, strings.SplitN(ev.Detail, " over ", 2)[0])
		}
	}
	return out
}

func experimentResult(t *testing.T, c client.Client, id string, timeout time.Duration) *workflows.ExperimentResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var res workflows.ExperimentResult
	if err := c.GetWorkflow(ctx, temporalx.ExperimentWorkflowID(id), "").Get(ctx, &res); err != nil {
		t.Fatalf("experiment workflow %s: %v", id, err)
	}
	return &res
}

// TestExperimentWorkerRestartOnDevServer: the reconciler starts the
// workflow of a stored experiment; the worker stops mid-window and
// a new one starts 3 s later; the durable timers resume the checks where
// the schedule stands (the missed ones are not made up), and the verdict
// comes at the window's end: inconclusive (no job), the baseline restored.
func TestExperimentWorkerRestartOnDevServer(t *testing.T) {
	dev := temporaltest.Start(t)
	c := dev.Client
	st := newStore(t, 1)
	base, cand := expPolicies(t, st)
	e := liveExperiment(t, st, base, cand, 10*time.Second, 100, 5)
	first := experimentWorker(t, c, st)
	ctx := context.Background()
	// The reconciler starts it; a retried start is the same workflow.
	if n, err := workflows.ReconcileExperimentWorkflows(ctx, c, st.HoldingExperimentIDs); err != nil || n != 1 {
		t.Fatalf("reconcile: %d, %v", n, err)
	}
	if err := workflows.StartExperiment(ctx, c, e.ID); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "two checks", func() bool { return len(checkNumbers(t, st, e.ID)) >= 2 })
	first.Stop()
	before := checkNumbers(t, st, e.ID)
	time.Sleep(3 * time.Second)
	if got := checkNumbers(t, st, e.ID); len(got) != len(before) {
		t.Fatalf("checks ran without a worker: %v after %v", got, before)
	}
	second := experimentWorker(t, c, st)
	defer second.Stop()
	res := experimentResult(t, c, e.ID, time.Minute)
	if res.State != vocab.ExperimentFinished || res.Verdict != vocab.VerdictInconclusive {
		t.Fatalf("result %+v, want finished inconclusive", res)
	}
	after := checkNumbers(t, st, e.ID)
	t.Logf("checks before the restart %v, all %v", before, after)
	if len(after) <= len(before) || len(after) > 9 {
		t.Fatalf("checks %v (before the restart %v): want more after it, fewer than one per second of the window", after, before)
	}
	if got, _ := st.ActivePolicyHash(ctx); got != base {
		t.Fatalf("active %s, want the baseline restored", got)
	}
	waitFor(t, 20*time.Second, "visibility of the experiment", func() bool {
		resp, err := c.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{
			Query: "GpugovExperimentState = 'finished' AND GpugovPool = '" + testPool + "'"})
		return err == nil && len(resp.GetExecutions()) == 1
	})
	record(t, c, temporalx.ExperimentWorkflowID(e.ID), "", "experiment-inconclusive-after-worker-restart")
}

// TestExperimentDecisionsOnDevServer: a breach at the first check rolls
// back at once; a kept candidate holds until SignalExperiment promotes it;
// an abort mid-window restores the baseline; a decision to an ended
// workflow is ErrExperimentClosed.
func TestExperimentDecisionsOnDevServer(t *testing.T) {
	dev := temporaltest.Start(t)
	c := dev.Client
	st := newStore(t, 1)
	base, cand := expPolicies(t, st)
	w := experimentWorker(t, c, st)
	defer w.Stop()
	ctx := context.Background()

	// Rolled back: one job submitted in the window breaches a cap of 0.
	rb := liveExperiment(t, st, base, cand, 20*time.Second, 0, 1)
	if err := workflows.StartExperiment(ctx, c, rb.ID); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 20*time.Second, "switch", func() bool {
		h, _ := st.ActivePolicyHash(ctx)
		return h == cand
	})
	submitExperimentJob(t, st, time.Now())
	res := experimentResult(t, c, rb.ID, time.Minute)
	if res.Verdict != vocab.VerdictRolledBack || !strings.Contains(res.Detail, "total submitted 1 job > 0 jobs") {
		t.Fatalf("result %+v, want rolled back with the numbers", res)
	}
	if got, _ := st.ActivePolicyHash(ctx); got != base {
		t.Fatalf("active %s after the rollback, want the baseline", got)
	}
	if err := workflows.SignalExperiment(ctx, c, rb.ID, workflows.ExperimentSignal{Action: "promote", Actor: "admin"}); err != temporalx.ErrExperimentClosed {
		t.Fatalf("promote after the end: %v, want ErrExperimentClosed", err)
	}
	record(t, c, temporalx.ExperimentWorkflowID(rb.ID), "", "experiment-rolled-back")

	// Kept, then promoted: at most two jobs in the baseline window (the
	// rollback's and one more), four in the candidate's.
	submitExperimentJob(t, st, time.Now().Add(-time.Second))
	kept := liveExperiment(t, st, base, cand, 4*time.Second, 100, 1)
	if err := workflows.StartExperiment(ctx, c, kept.ID); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 20*time.Second, "switch", func() bool {
		e, _ := st.GetExperiment(ctx, kept.ID)
		return e.State == vocab.ExperimentRunning
	})
	for range 4 {
		submitExperimentJob(t, st, time.Now())
	}
	waitFor(t, 30*time.Second, "verdict", func() bool {
		e, _ := st.GetExperiment(ctx, kept.ID)
		return e.Verdict != ""
	})
	if e, _ := st.GetExperiment(ctx, kept.ID); e.Verdict != vocab.VerdictKept {
		t.Fatalf("verdict %s (%s), want kept", e.Verdict, e.Outcome.Reason)
	}
	if err := workflows.SignalExperiment(ctx, c, kept.ID, workflows.ExperimentSignal{Action: "keep"}); err == nil {
		t.Fatal("an unknown action was sent")
	}
	if err := workflows.SignalExperiment(ctx, c, kept.ID, workflows.ExperimentSignal{Action: "promote", Actor: "admin-alice", Reason: "ship"}); err != nil {
		t.Fatal(err)
	}
	if res := experimentResult(t, c, kept.ID, 30*time.Second); !res.Promoted || res.Verdict != vocab.VerdictKept {
		t.Fatalf("result %+v, want kept and promoted", res)
	}
	if got, _ := st.ActivePolicyHash(ctx); got != cand {
		t.Fatalf("active %s after the promotion, want the candidate", got)
	}
	record(t, c, temporalx.ExperimentWorkflowID(kept.ID), "", "experiment-kept-promoted")

	// Aborted mid-window: the promoted candidate is now the baseline.
	ab := liveExperiment(t, st, cand, base, time.Minute, 100, 1)
	if err := workflows.StartExperiment(ctx, c, ab.ID); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 20*time.Second, "a check", func() bool { return len(checkNumbers(t, st, ab.ID)) >= 1 })
	if err := workflows.SignalExperiment(ctx, c, ab.ID, workflows.ExperimentSignal{Action: "abort", Actor: "admin-bob", Reason: "enough"}); err != nil {
		t.Fatal(err)
	}
	if res := experimentResult(t, c, ab.ID, 30*time.Second); res.State != vocab.ExperimentAborted {
		t.Fatalf("result %+v, want aborted", res)
	}
	if got, _ := st.ActivePolicyHash(ctx); got != cand {
		t.Fatalf("active %s after the abort, want its baseline", got)
	}
	evs, _ := st.ExperimentEvents(ctx, ab.ID)
	kinds := make([]string, len(evs))
	for i, ev := range evs {
		kinds[i] = ev.Kind
	}
	if !slices.Equal(kinds[len(kinds)-2:], []string{store.ExperimentEventAborted, store.ExperimentEventReverted}) {
		t.Fatalf("timeline %v", kinds)
	}
	record(t, c, temporalx.ExperimentWorkflowID(ab.ID), "", "experiment-aborted")
}

// submitExperimentJob stores a job of p1 submitted at at.
func submitExperimentJob(t *testing.T, st *store.Store, at time.Time) {
	t.Helper()
	if _, _, err := st.CreateJob(context.Background(), &store.NewJob{Project: "vision", Queue: testQueue, Tier: vocab.TierStandard,
		SubmitTime: at, Request: scheduling.ResourceRequest{GPUs: 1, Pool: testPool}}); err != nil {
		t.Fatal(err)
	}
}

// TestFailedExperimentWorkflowIsStartedAgain: an experiment that still
// holds its pools after its workflow ended without completing (terminated
// here; a non-retryable store error fails it alike) gets a new run from
// the reconciler, so it is not left holding the service with nothing to
// take an abort; a running one is reused.
func TestFailedExperimentWorkflowIsStartedAgain(t *testing.T) {
	dev := temporaltest.Start(t)
	c := dev.Client
	st := newStore(t, 1)
	base, cand := expPolicies(t, st)
	e := liveExperiment(t, st, base, cand, time.Minute, 100, 5)
	ctx := context.Background()
	wid := temporalx.ExperimentWorkflowID(e.ID)
	if err := workflows.StartExperiment(ctx, c, e.ID); err != nil {
		t.Fatal(err)
	}
	first, err := c.DescribeWorkflow(ctx, wid, "")
	if err != nil {
		t.Fatal(err)
	}
	if err := workflows.StartExperiment(ctx, c, e.ID); err != nil {
		t.Fatal(err)
	}
	if again, err := c.DescribeWorkflow(ctx, wid, ""); err != nil ||
		again.RawResponse.GetWorkflowExecutionInfo().GetExecution().GetRunId() != first.RawResponse.GetWorkflowExecutionInfo().GetExecution().GetRunId() {
		t.Fatalf("a retried start of a running workflow started another run (%v)", err)
	}
	if err := c.TerminateWorkflow(ctx, wid, "", "the test fails it"); err != nil {
		t.Fatal(err)
	}
	if n, err := workflows.ReconcileExperimentWorkflows(ctx, c, st.HoldingExperimentIDs); err != nil || n != 1 {
		t.Fatalf("reconcile: %d, %v", n, err)
	}
	next, err := c.DescribeWorkflow(ctx, wid, "")
	if err != nil {
		t.Fatal(err)
	}
	info := next.RawResponse.GetWorkflowExecutionInfo()
	if info.GetExecution().GetRunId() == first.RawResponse.GetWorkflowExecutionInfo().GetExecution().GetRunId() || info.GetStatus() != enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING {
		t.Fatalf("after the termination: run %s status %s, want a new running run", info.GetExecution().GetRunId(), info.GetStatus())
	}
}
