package activities_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"

	"github.com/gpugov/gpugov/activities"
	"github.com/gpugov/gpugov/internal/scheduling"
	"github.com/gpugov/gpugov/internal/temporalx"
	"github.com/gpugov/gpugov/internal/vocab"
	"github.com/gpugov/gpugov/store"
	"github.com/gpugov/gpugov/store/storetest"
)

const testPool = "p1"

// testNode is the first node of pool p1.
var testNode = storetest.NodeName(testPool, 0)

// gpuUUID is the UUID of GPU i of testNode.
func gpuUUID(i int) string { return storetest.GPUName(testPool, 0, i) }

// newStore opens a store on a fresh database with pool p1 (nodes nodes of
// gpus whole GPUs, stage observe) and queue "train".
func newStore(t testing.TB, nodes, gpus int) *store.Store {
	t.Helper()
	st, _ := storetest.NewStore(t, storetest.Fixture{
		Pools:  []scheduling.Pool{storetest.Pool(testPool, vocab.StageObserve, nodes, gpus)},
		Queues: []scheduling.Queue{storetest.TrainQueue},
	})
	return st
}

// submit stores a checkpointable job of queue "train" in p1 asking for gpus.
func submit(t testing.TB, st *store.Store, gpus int) *store.Job {
	t.Helper()
	return storetest.Submit(t, st, &store.NewJob{
		Project: "vision", Queue: "train", Tier: vocab.TierStandard, RunSeconds: 90.5,
		Request:  scheduling.ResourceRequest{GPUs: gpus, Pool: testPool},
		Recovery: scheduling.RecoveryEvidence{Checkpointable: true, CheckpointIntervalSeconds: 30},
	})
}

// recordingSignaler stands in for the Temporal client at the signal boundary:
// it records `wait-reason` signals and fails those of the jobs in fail.
type recordingSignaler struct {
	mu     sync.Mutex
	sent   map[string][]vocab.WaitReason // by workflow ID
	placed map[string][]string           // `placed` signals' allocation IDs, by workflow ID
	fail   map[string]error
}

func newSignaler() *recordingSignaler {
	return &recordingSignaler{sent: map[string][]vocab.WaitReason{}, fail: map[string]error{}}
}

func (r *recordingSignaler) SignalWorkflow(_ context.Context, workflowID, runID, name string, arg any) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if (name != temporalx.SignalWaitReason && name != temporalx.SignalPlaced) || runID != "" {
		return fmt.Errorf("unexpected signal %s to %s/%s", name, workflowID, runID)
	}
	if err := r.fail[workflowID]; err != nil {
		return err
	}
	if name == temporalx.SignalPlaced {
		if r.placed == nil {
			r.placed = map[string][]string{}
		}
		r.placed[workflowID] = append(r.placed[workflowID], arg.(temporalx.PlacedSignal).AllocationID)
		return nil
	}
	r.sent[workflowID] = append(r.sent[workflowID], arg.(temporalx.WaitReasonSignal).Reason)
	return nil
}

func (r *recordingSignaler) take() map[string][]vocab.WaitReason {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := r.sent
	r.sent = map[string][]vocab.WaitReason{}
	return out
}

// runCycle executes RunCycle through Temporal's activity test environment.
func runCycle(t *testing.T, a *activities.Scheduler, in *activities.RunCycleInput) *activities.RunCycleResult {
	t.Helper()
	var suite testsuite.WorkflowTestSuite
	env := suite.NewTestActivityEnvironment()
	env.RegisterActivity(a)
	val, err := env.ExecuteActivity(a.RunCycle, in)
	if err != nil {
		t.Fatalf("run cycle %s: %v", in.CycleID, err)
	}
	var res activities.RunCycleResult
	if err := val.Get(&res); err != nil {
		t.Fatal(err)
	}
	return &res
}

func TestRunCycleRetriedWithSameIDPlacesOnce(t *testing.T) {
	t.Parallel()
	st := newStore(t, 1, 2)
	a, b := submit(t, st, 1), submit(t, st, 1)
	sched := activities.NewScheduler(activities.Deps{Store: st})

	first := runCycle(t, sched, &activities.RunCycleInput{Shard: "default", CycleID: "c1"})
	if first.Replayed || len(first.Placements) != 2 || first.PolicyVersion == "" {
		t.Fatalf("first attempt %+v, want two placements", first)
	}
	// A retried attempt (the first one's result was lost) re-plans and re-applies c1.
	retry := runCycle(t, sched, &activities.RunCycleInput{Shard: "default", CycleID: "c1"})
	if !retry.Replayed || len(retry.Placements) != 2 {
		t.Fatalf("retry %+v, want the stored outcome replayed", retry)
	}
	for i := range first.Placements {
		if first.Placements[i].AllocationID != retry.Placements[i].AllocationID || first.Placements[i].JobID != retry.Placements[i].JobID {
			t.Fatalf("retry placements %+v differ from %+v", retry.Placements, first.Placements)
		}
	}
	var allocations int
	if err := st.Pool().QueryRow(context.Background(), `SELECT count(*) FROM allocations WHERE job_id IN ($1, $2)`, a.ID, b.ID).Scan(&allocations); err != nil {
		t.Fatal(err)
	}
	if allocations != 2 {
		t.Fatalf("%d allocations, want 2 (one per job)", allocations)
	}
}

func TestRunCycleSignalsOnlyWaitReasonTransitions(t *testing.T) {
	t.Parallel()
	st := newStore(t, 1, 1)
	runner := submit(t, st, 1)
	waiter := submit(t, st, 1)
	sig := newSignaler()
	sched := activities.NewScheduler(activities.Deps{Store: st, Temporal: sig})
	wf := temporalx.JobWorkflowID

	c1 := runCycle(t, sched, &activities.RunCycleInput{Shard: "default", CycleID: "c1"})
	if len(c1.Placements) != 1 || c1.Placements[0].JobID != runner.ID || c1.ReasonChanges != 1 {
		t.Fatalf("cycle 1 %+v", c1)
	}
	if got := sig.take(); len(got) != 1 || len(got[wf(waiter.ID)]) != 1 || got[wf(waiter.ID)][0] != vocab.ReasonCapacityBusy {
		t.Fatalf("cycle 1 signalled %v, want capacity_busy to %s only", got, waiter.ID)
	}

	// Same reason next cycle: no signal.
	c2 := runCycle(t, sched, &activities.RunCycleInput{Shard: "default", CycleID: "c2", PreviousCycleID: "c1"})
	if got := sig.take(); len(got) != 0 || c2.ReasonChanges != 0 {
		t.Fatalf("cycle 2 signalled %v (%d changes), want nothing", got, c2.ReasonChanges)
	}

	// Another worker (a fresh Scheduler) runs the next cycle: it rebuilds what
	// was signalled from the store and signals only the new job.
	other := activities.NewScheduler(activities.Deps{Store: st, Temporal: sig})
	big := submit(t, st, 2) // never fits one GPU
	runCycle(t, other, &activities.RunCycleInput{Shard: "default", CycleID: "c3", PreviousCycleID: "c2"})
	got := sig.take()
	if len(got) != 1 || len(got[wf(big.ID)]) != 1 || got[wf(big.ID)][0] != vocab.ReasonNoMatchingCapacity {
		t.Fatalf("cycle 3 signalled %v, want no_matching_capacity to %s only", got, big.ID)
	}

	// A signal failing for a transient reason is sent again next cycle; one
	// whose workflow is gone (NotFound) is not.
	late := submit(t, st, 1)
	gone := submit(t, st, 1)
	sig.fail[wf(late.ID)] = errors.New("frontend unavailable")
	sig.fail[wf(gone.ID)] = serviceerror.NewNotFound("workflow execution already completed")
	c4 := runCycle(t, other, &activities.RunCycleInput{Shard: "default", CycleID: "c4", PreviousCycleID: "c3"})
	if c4.ReasonChanges != 2 || c4.ReasonSignalsFailed != 1 {
		t.Fatalf("cycle 4 %+v, want 2 changes, 1 failed", c4)
	}
	delete(sig.fail, wf(late.ID))
	runCycle(t, other, &activities.RunCycleInput{Shard: "default", CycleID: "c5", PreviousCycleID: "c4"})
	if got := sig.take(); len(got) != 1 || len(got[wf(late.ID)]) != 1 {
		t.Fatalf("cycle 5 signalled %v, want only the failed signal to %s again", got, late.ID)
	}
}

func TestJobActivities(t *testing.T) {
	t.Parallel()
	st := newStore(t, 1, 1)
	job := submit(t, st, 1)
	now := time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)
	jobs := &activities.Jobs{Store: st, Now: func() time.Time { return now }}
	ctx := context.Background()

	loaded, err := jobs.LoadJob(ctx, &activities.LoadJobInput{JobID: job.ID})
	if err != nil {
		t.Fatal(err)
	}
	want := activities.LoadJobResult{JobID: job.ID, Project: "vision", Queue: "train", Tier: "standard", Pool: testPool,
		State: "submitted", RunSeconds: 91, CheckpointIntervalSeconds: 30}
	if *loaded != want {
		t.Fatalf("LoadJob = %+v, want %+v", *loaded, want)
	}
	if _, err := jobs.LoadJob(ctx, &activities.LoadJobInput{JobID: "j-missing"}); !isNonRetryable(err, activities.ErrTypeNotFound) {
		t.Fatalf("LoadJob(missing) error %v, want non-retryable NotFound", err)
	}

	out := storetest.Place(t, st, "c1", now, storetest.Placement(job.ID, testPool, testNode, 1000, gpuUUID(0)))
	alloc := out.Placed[0].AllocationID
	r1, err := jobs.MarkRunning(ctx, &activities.MarkRunningInput{JobID: job.ID, AllocationID: alloc})
	if err != nil {
		t.Fatal(err)
	}
	r2, err := jobs.MarkRunning(ctx, &activities.MarkRunningInput{JobID: job.ID, AllocationID: alloc})
	if err != nil || r2.RunID != r1.RunID || !r1.StartedAt.Equal(now) {
		t.Fatalf("MarkRunning retry = %+v (%v), want run %s again", r2, err, r1.RunID)
	}
	if _, err := jobs.ReleasePlacement(ctx, &activities.ReleasePlacementInput{JobID: job.ID, AllocationID: alloc, Outcome: "cancelled"}); !isNonRetryable(err, activities.ErrTypeConflict) {
		t.Fatalf("ReleasePlacement of a running allocation: %v, want non-retryable Conflict", err)
	}
	if _, err := jobs.FinishRun(ctx, &activities.FinishRunInput{JobID: job.ID, RunID: r1.RunID, Outcome: "exploded"}); !isNonRetryable(err, activities.ErrTypeInvalidInput) {
		t.Fatalf("FinishRun(bad outcome) error %v, want non-retryable InvalidInput", err)
	}
	for range 2 { // a retry is a no-op
		if _, err := jobs.FinishRun(ctx, &activities.FinishRunInput{JobID: job.ID, RunID: r1.RunID, Outcome: "succeeded", Detail: "exit 0"}); err != nil {
			t.Fatal(err)
		}
	}
	res, err := jobs.CancelJob(ctx, &activities.CancelJobInput{JobID: job.ID, Actor: "alice", Reason: "late"})
	if err != nil || !res.AlreadyFinal {
		t.Fatalf("CancelJob after success = %+v (%v), want AlreadyFinal", res, err)
	}
}

func isNonRetryable(err error, errType string) bool {
	var appErr *temporal.ApplicationError
	return errors.As(err, &appErr) && appErr.NonRetryable() && appErr.Type() == errType
}

// SignalPlacements signals each placement once; a closed or absent workflow
// (NotFound) and a signal refused for good are released back to waiting in
// the store; an error the server may get over fails the activity (retryable);
// without a Temporal client it fails, not retryable.
func TestSignalPlacements(t *testing.T) {
	t.Parallel()
	st := newStore(t, 1, 4)
	var placements []activities.PlacedJob
	for range 4 {
		submit(t, st, 1)
	}
	sched := activities.NewScheduler(activities.Deps{Store: st})
	c1 := runCycle(t, sched, &activities.RunCycleInput{Shard: "default", CycleID: "c1"})
	if len(c1.Placements) != 4 {
		t.Fatalf("cycle 1 placed %d, want 4", len(c1.Placements))
	}
	placements = c1.Placements
	slices.SortFunc(placements, func(x, y activities.PlacedJob) int { return strings.Compare(x.JobID, y.JobID) })
	sig := newSignaler()
	gone, refused, ok := placements[1], placements[2], placements[3]
	sig.fail[temporalx.JobWorkflowID(gone.JobID)] = serviceerror.NewNotFound("workflow not found")
	sig.fail[temporalx.JobWorkflowID(refused.JobID)] = serviceerror.NewInvalidArgument("signal payload too large")
	a := &activities.Scheduler{Store: st, Temporal: sig, SignalConcurrency: 2}
	in := &activities.SignalPlacementsInput{CycleID: "c1", Placements: placements}
	res, err := a.SignalPlacements(context.Background(), in)
	if err != nil {
		t.Fatal(err)
	}
	if res.Signalled != 2 || len(res.Released) != 2 || !strings.Contains(res.Released[0].Error+res.Released[1].Error, "too large") {
		t.Fatalf("result %+v", res)
	}
	for _, p := range []activities.PlacedJob{placements[0], ok} {
		if got := sig.placed[temporalx.JobWorkflowID(p.JobID)]; !slices.Equal(got, []string{p.AllocationID}) {
			t.Fatalf("%s got placed %v", p.JobID, got)
		}
	}
	for _, p := range []activities.PlacedJob{gone, refused} {
		var state string
		if err := st.Pool().QueryRow(context.Background(), `SELECT j.state FROM jobs j JOIN allocations a ON a.job_id = j.id
			WHERE a.id = $1 AND a.released_at IS NOT NULL`, p.AllocationID).Scan(&state); err != nil || state != string(vocab.JobWaiting) {
			t.Fatalf("%s: released allocation's job state %q (%v), want waiting", p.JobID, state, err)
		}
	}
	// A retry releases nothing twice and signals again (a no-op for the job workflow).
	if res, err := a.SignalPlacements(context.Background(), in); err != nil || len(res.Released) != 2 {
		t.Fatalf("retried: %+v, %v", res, err)
	}
	sig.fail[temporalx.JobWorkflowID(ok.JobID)] = serviceerror.NewUnavailable("frontend restarting")
	if _, err := a.SignalPlacements(context.Background(), in); err == nil || isNonRetryable(err, activities.ErrTypeInvalidInput) {
		t.Fatalf("unavailable server: %v, want a retryable error", err)
	}
	if _, err := (&activities.Scheduler{}).SignalPlacements(context.Background(), in); err == nil || !isNonRetryable(err, activities.ErrTypeInvalidInput) {
		t.Fatalf("no Temporal client: %v, want a non-retryable error", err)
	}
	if _, err := a.SignalPlacements(context.Background(), &activities.SignalPlacementsInput{}); err == nil || !isNonRetryable(err, activities.ErrTypeInvalidInput) {
		t.Fatalf("no cycle ID: %v, want a non-retryable error", err)
	}
}

// recordingStarter stands in for workflows.Client's SignalWithStartJob: it
// records the `placed` signal-with-starts by job and answers those of the
// jobs in fail with their error.
type recordingStarter struct {
	mu      sync.Mutex
	started map[string]temporalx.PlacedSignal
	attrs   map[string]temporalx.JobAttributes
	fail    map[string]error
}

func (r *recordingStarter) SignalWithStartJob(_ context.Context, jobID string, attrs temporalx.JobAttributes, signal string, arg any) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if signal != temporalx.SignalPlaced {
		return fmt.Errorf("unexpected signal-with-start %s of %s", signal, jobID)
	}
	if err := r.fail[jobID]; err != nil {
		return err
	}
	r.started[jobID], r.attrs[jobID] = arg.(temporalx.PlacedSignal), attrs
	return nil
}

// SignalPlacements starts, by signal-with-start with the job's workflow
// attributes, the workflow of a placed job that has none (NotFound) and
// counts it in Started; a closed workflow (the starter's
// ErrJobWorkflowClosed) and a job whose cancel was requested are released;
// a starter the server may get over fails the activity, retryable, and
// releases nothing.
func TestSignalPlacementsStartsAbsentWorkflows(t *testing.T) {
	t.Parallel()
	st := newStore(t, 1, 4)
	for range 4 {
		submit(t, st, 1)
	}
	c1 := runCycle(t, activities.NewScheduler(activities.Deps{Store: st}), &activities.RunCycleInput{Shard: "default", CycleID: "c1"})
	if len(c1.Placements) != 4 {
		t.Fatalf("cycle 1 placed %d, want 4", len(c1.Placements))
	}
	ps := c1.Placements
	slices.SortFunc(ps, func(x, y activities.PlacedJob) int { return strings.Compare(x.JobID, y.JobID) })
	signalled, absent, closed, cancelled := ps[0], ps[1], ps[2], ps[3]
	if err := st.CancelJob(context.Background(), cancelled.JobID, "alice", "not needed"); err != nil {
		t.Fatal(err)
	}
	sig := newSignaler()
	for _, p := range []activities.PlacedJob{absent, closed, cancelled} {
		sig.fail[temporalx.JobWorkflowID(p.JobID)] = serviceerror.NewNotFound("workflow not found")
	}
	starter := &recordingStarter{started: map[string]temporalx.PlacedSignal{}, attrs: map[string]temporalx.JobAttributes{},
		fail: map[string]error{closed.JobID: fmt.Errorf("signal-with-start: %w", temporalx.ErrJobWorkflowClosed)}}
	a := activities.NewScheduler(activities.Deps{Store: st, Temporal: sig, JobStarter: starter})
	in := &activities.SignalPlacementsInput{CycleID: "c1", Placements: ps}
	res, err := a.SignalPlacements(context.Background(), in)
	if err != nil {
		t.Fatal(err)
	}
	if res.Signalled != 2 || res.Started != 1 || len(res.Released) != 2 {
		t.Fatalf("result %+v, want 2 signalled of which 1 started, 2 released", res)
	}
	got, ok := starter.started[absent.JobID]
	if !ok || got.AllocationID != absent.AllocationID || got.CycleID != "c1" || got.Node != absent.Node || len(starter.started) != 1 {
		t.Fatalf("started %+v, want only %s with its placement", starter.started, absent.JobID)
	}
	if at := starter.attrs[absent.JobID]; at.Queue != "train" || at.Pool != testPool || at.State != string(vocab.JobPlaced) || at.Tier != "standard" {
		t.Fatalf("start attributes %+v, want the stored job's", at)
	}
	if !slices.Equal(sig.placed[temporalx.JobWorkflowID(signalled.JobID)], []string{signalled.AllocationID}) {
		t.Fatalf("the running workflow got %v", sig.placed)
	}
	if res.Released[0].JobID != closed.JobID || !strings.Contains(res.Released[0].Error, "closed") || res.Released[1].JobID != cancelled.JobID {
		t.Fatalf("released %+v, want the closed job's (named closed) and the cancelled one's", res.Released)
	}
	for id, want := range map[string]vocab.JobState{absent.JobID: vocab.JobPlaced, closed.JobID: vocab.JobWaiting, cancelled.JobID: vocab.JobCancelled} {
		if j, err := st.GetJob(context.Background(), id); err != nil || j.State != want {
			t.Fatalf("%s stored %v (%v), want %s", id, j, err, want)
		}
	}
	// A retry sends the absent job's placement by signal-with-start again
	// (the fake keeps its signal failing NotFound; a real workflow would take
	// it as a repeated `placed`); nothing is released twice.
	if res, err := a.SignalPlacements(context.Background(), in); err != nil || res.Started != 1 || len(res.Released) != 2 {
		t.Fatalf("retried: %+v, %v", res, err)
	}
	starter.fail[absent.JobID] = serviceerror.NewUnavailable("frontend restarting")
	if _, err := a.SignalPlacements(context.Background(), in); err == nil || isNonRetryable(err, activities.ErrTypeInvalidInput) {
		t.Fatalf("unavailable starter: %v, want a retryable error", err)
	}
	if j, err := st.GetJob(context.Background(), absent.JobID); err != nil || j.State != vocab.JobPlaced {
		t.Fatalf("after a failed start the job is %v (%v), want still placed", j, err)
	}
}

// A cycle sends at most MaxReasonSignals wait-reason signals; the changes
// beyond it are sent by the next cycles, each once.
func TestRunCycleDefersReasonSignalsBeyondTheBound(t *testing.T) {
	t.Parallel()
	st := newStore(t, 1, 1)
	submit(t, st, 1) // placed
	for range 3 {
		submit(t, st, 1) // waiting: capacity_busy
	}
	sig := newSignaler()
	sched := activities.NewScheduler(activities.Deps{Store: st, Temporal: sig})
	sched.MaxReasonSignals = 2
	prev := ""
	var sent []int
	for i := range 3 {
		id := fmt.Sprintf("c%d", i+1)
		res := runCycle(t, sched, &activities.RunCycleInput{Shard: "default", CycleID: id, PreviousCycleID: prev})
		prev = id
		n := 0
		for _, rs := range sig.take() {
			n += len(rs)
		}
		sent = append(sent, n)
		if i == 0 && (res.ReasonChanges != 3 || res.ReasonSignalsDeferred != 1) {
			t.Fatalf("cycle 1 %+v, want 3 changes, 1 deferred", res)
		}
	}
	if !slices.Equal(sent, []int{2, 1, 0}) {
		t.Fatalf("signals per cycle %v, want [2 1 0]", sent)
	}
}
