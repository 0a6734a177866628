package workflows_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"go.temporal.io/sdk/temporal"

	"github.com/gpugov/gpugov/internal/executor"
	"github.com/gpugov/gpugov/internal/scheduling"
	"github.com/gpugov/gpugov/internal/temporalx"
	"github.com/gpugov/gpugov/internal/vocab"
	"github.com/gpugov/gpugov/store"
	"github.com/gpugov/gpugov/workflows"
)

var schedulerID = temporalx.SchedulerWorkflowID(temporalx.DefaultShard)

// releasedSignals returns the allocation-released wake-ups of the scheduler:
// asked for by the store step that released the allocation (version 1), or
// signalled by the workflow (version DefaultVersion).
func releasedSignals(env *testEnv) []sentSignal {
	var out []sentSignal
	for _, s := range env.sent() {
		if s.WorkflowID == schedulerID && s.Name == temporalx.SignalAllocationReleased {
			out = append(out, s)
		}
	}
	return out
}

func TestJobWorkflowRunsToSuccessAndReleases(t *testing.T) {
	st := newStore(t, 2)
	job := submitJob(t, st, jobSpec{gpus: 1, runSeconds: 70, checkpointInterval: 20})
	placed := placeJob(t, st, job.ID)
	env := newTestEnv(t, st, nil)
	env.signalAt(time.Second, temporalx.SignalWaitReason, temporalx.WaitReasonSignal{Reason: vocab.ReasonCapacityBusy})
	env.signalAt(2*time.Second, temporalx.SignalPlaced, placed)

	env.ExecuteWorkflow(workflows.JobWorkflowName, &workflows.JobInput{JobID: job.ID})

	res := env.jobResult(t)
	if res.State != vocab.JobSucceeded || res.Step != 70 || res.AllocationID != placed.AllocationID || res.RunID == "" {
		t.Fatalf("result = %+v, want succeeded at step 70 on %s", res, placed.AllocationID)
	}
	if res.LastCheckpoint == nil || res.LastCheckpoint.Step != 60 {
		t.Fatalf("last checkpoint = %+v, want step 60", res.LastCheckpoint)
	}
	if got := jobState(t, st, job.ID); got != vocab.JobSucceeded {
		t.Fatalf("stored state %s, want succeeded", got)
	}
	if !allocationReleased(t, st, placed.AllocationID) {
		t.Fatal("allocation still held after success")
	}
	stored, err := st.GetJob(context.Background(), job.ID)
	if err != nil || stored.Recovery.LastCheckpoint == nil || stored.Recovery.LastCheckpoint.Step != 60 {
		t.Fatalf("stored recovery evidence %+v (%v), want checkpoint at step 60", stored.Recovery, err)
	}
	rel := releasedSignals(env)
	if len(rel) != 1 {
		t.Fatalf("allocation-released signals %+v", rel)
	}
	states, reasons := env.upserted()
	// `placed` is not upserted (version 2 of local-store-steps): running
	// follows in the same workflow task.
	if want := []string{"submitted", "waiting", "running", "succeeded"}; !slices.Equal(states, want) {
		t.Fatalf("job states upserted %v, want %v", states, want)
	}
	if want := []string{"capacity_busy", ""}; !slices.Equal(reasons, want) {
		t.Fatalf("wait reasons upserted %v, want %v", reasons, want)
	}
}

func TestJobWorkflowCancelledBeforePlacement(t *testing.T) {
	st := newStore(t, 1)
	job := submitJob(t, st, jobSpec{gpus: 1, runSeconds: 60})
	env := newTestEnv(t, st, nil)
	env.RegisterDelayedCallback(func() {
		// As the API does: record the cancellation, then signal.
		if err := st.CancelJob(context.Background(), job.ID, "alice", "wrong data set"); err != nil {
			t.Error(err)
		}
		env.SignalWorkflow(temporalx.SignalCancel, temporalx.CancelSignal{Actor: "alice", Reason: "wrong data set"})
	}, time.Minute)

	env.ExecuteWorkflow(workflows.JobWorkflowName, &workflows.JobInput{JobID: job.ID})

	res := env.jobResult(t)
	if res.State != vocab.JobCancelled || res.AllocationID != "" || res.RunID != "" {
		t.Fatalf("result = %+v, want cancelled without allocation", res)
	}
	if got := jobState(t, st, job.ID); got != vocab.JobCancelled {
		t.Fatalf("stored state %s, want cancelled", got)
	}
	if n := len(env.sent()); n != 0 {
		t.Fatalf("%d signals sent, want none: nothing was released", n)
	}
}

func TestJobWorkflowCancelledThroughTemporalCancelsStoredJob(t *testing.T) {
	st := newStore(t, 1)
	job := submitJob(t, st, jobSpec{gpus: 1, runSeconds: 60})
	env := newTestEnv(t, st, nil)
	env.RegisterDelayedCallback(env.CancelWorkflow, time.Minute)

	env.ExecuteWorkflow(workflows.JobWorkflowName, &workflows.JobInput{JobID: job.ID})

	var canceled *temporal.CanceledError
	if err := env.GetWorkflowError(); !errors.As(err, &canceled) {
		t.Fatalf("workflow error %v, want canceled", err)
	}
	if got := jobState(t, st, job.ID); got != vocab.JobCancelled {
		t.Fatalf("stored state %s, want cancelled (the workflow records it)", got)
	}
}

func TestJobWorkflowCancelRacingPlacementReleasesAllocation(t *testing.T) {
	st := newStore(t, 1)
	job := submitJob(t, st, jobSpec{gpus: 1, runSeconds: 60})
	// A cycle placed the job; the API cancels it (cancel requested) and its
	// cancel signal reaches the workflow before the scheduler's `placed`.
	placed := placeJob(t, st, job.ID)
	if err := st.CancelJob(context.Background(), job.ID, "alice", "not needed"); err != nil {
		t.Fatal(err)
	}
	env := newTestEnv(t, st, nil)
	env.signalAt(time.Second, temporalx.SignalCancel, temporalx.CancelSignal{Actor: "alice", Reason: "not needed"})
	env.signalAt(5*time.Second, temporalx.SignalPlaced, placed)

	env.ExecuteWorkflow(workflows.JobWorkflowName, &workflows.JobInput{JobID: job.ID})

	res := env.jobResult(t)
	if res.State != vocab.JobCancelled || res.AllocationID != placed.AllocationID || res.RunID != "" {
		t.Fatalf("result = %+v, want cancelled holding %s without a run", res, placed.AllocationID)
	}
	if !allocationReleased(t, st, placed.AllocationID) {
		t.Fatal("allocation granted before the cancel is still held")
	}
	if got := jobState(t, st, job.ID); got != vocab.JobCancelled {
		t.Fatalf("stored state %s, want cancelled", got)
	}
	if rel := releasedSignals(env); len(rel) != 1 {
		t.Fatalf("allocation-released signals %+v, want one", rel)
	}
}

func TestJobWorkflowCancelledWhileRunningFinishesRunCancelled(t *testing.T) {
	st := newStore(t, 1)
	job := submitJob(t, st, jobSpec{gpus: 1, runSeconds: 3600})
	placed := placeJob(t, st, job.ID)
	env := newTestEnv(t, st, nil)
	env.signalAt(time.Second, temporalx.SignalPlaced, placed)
	env.RegisterDelayedCallback(func() {
		if err := st.CancelJob(context.Background(), job.ID, "bob", "superseded"); err != nil {
			t.Error(err)
		}
		env.SignalWorkflow(temporalx.SignalCancel, temporalx.CancelSignal{Actor: "bob", Reason: "superseded"})
	}, 1200*time.Millisecond)

	env.ExecuteWorkflow(workflows.JobWorkflowName, &workflows.JobInput{JobID: job.ID, HeartbeatTimeoutSeconds: 2})

	res := env.jobResult(t)
	if res.State != vocab.JobCancelled || res.RunID == "" {
		t.Fatalf("result = %+v, want a cancelled run", res)
	}
	if !allocationReleased(t, st, placed.AllocationID) {
		t.Fatal("allocation still held after cancellation")
	}
	if got := jobState(t, st, job.ID); got != vocab.JobCancelled {
		t.Fatalf("stored state %s, want cancelled", got)
	}
	if n := countRows(t, st, `SELECT count(*) FROM runs WHERE job_id = $1 AND outcome = 'cancelled'`, job.ID); n != 1 {
		t.Fatalf("%d runs finished cancelled, want 1", n)
	}
}

func TestJobWorkflowIgnoresDuplicatePlaced(t *testing.T) {
	st := newStore(t, 1)
	job := submitJob(t, st, jobSpec{gpus: 1, runSeconds: 200})
	placed := placeJob(t, st, job.ID)
	env := newTestEnv(t, st, nil)
	env.signalAt(time.Second, temporalx.SignalPlaced, placed)
	env.signalAt(time.Second, temporalx.SignalPlaced, placed)           // the same signal twice at once
	env.signalAt(1100*time.Millisecond, temporalx.SignalPlaced, placed) // and again while running

	env.ExecuteWorkflow(workflows.JobWorkflowName, &workflows.JobInput{JobID: job.ID})

	res := env.jobResult(t)
	if res.State != vocab.JobSucceeded {
		t.Fatalf("result = %+v, want succeeded", res)
	}
	if n := countRows(t, st, `SELECT count(*) FROM runs WHERE job_id = $1`, job.ID); n != 1 {
		t.Fatalf("%d runs, want 1", n)
	}
	if rel := releasedSignals(env); len(rel) != 1 {
		t.Fatalf("allocation-released signals %+v, want one", rel)
	}
}

func TestJobWorkflowFailedRunReleasesAllocation(t *testing.T) {
	st := newStore(t, 1)
	job := submitJob(t, st, jobSpec{gpus: 1, runSeconds: 100})
	placed := placeJob(t, st, job.ID)
	env := newTestEnv(t, st, nil)
	env.signalAt(time.Second, temporalx.SignalPlaced, placed)

	env.ExecuteWorkflow(workflows.JobWorkflowName, &workflows.JobInput{JobID: job.ID, FailAtStep: 30})

	var appErr *temporal.ApplicationError
	if err := env.GetWorkflowError(); !errors.As(err, &appErr) || appErr.Type() != workflows.ErrTypeJobFailed {
		t.Fatalf("workflow error %v, want %s", err, workflows.ErrTypeJobFailed)
	}
	var res workflows.JobResult
	decodeDetails(t, appErr, &res)
	if res.State != vocab.JobFailed || res.Step != 30 {
		t.Fatalf("failure details %+v, want failed at step 30", res)
	}
	if !allocationReleased(t, st, placed.AllocationID) {
		t.Fatal("allocation still held after failure")
	}
	if got := jobState(t, st, job.ID); got != vocab.JobFailed {
		t.Fatalf("stored state %s, want failed", got)
	}
	if rel := releasedSignals(env); len(rel) != 1 {
		t.Fatalf("allocation-released signals %+v", rel)
	}
}

func TestJobWorkflowRunActivityErrorsExhaustRetries(t *testing.T) {
	st := newStore(t, 1)
	job := submitJob(t, st, jobSpec{gpus: 1, runSeconds: 100})
	placed := placeJob(t, st, job.ID)
	attempts := 0
	// An executor that cannot launch the job on the node.
	launchFails := func(context.Context, *executor.RunInput) (*executor.RunResult, error) {
		attempts++
		return nil, errors.New("image pull failed")
	}
	env := newTestEnv(t, st, launchFails)
	env.signalAt(time.Second, temporalx.SignalPlaced, placed)

	env.ExecuteWorkflow(workflows.JobWorkflowName, &workflows.JobInput{JobID: job.ID, RunAttempts: 2})

	var appErr *temporal.ApplicationError
	if err := env.GetWorkflowError(); !errors.As(err, &appErr) || appErr.Type() != workflows.ErrTypeJobFailed {
		t.Fatalf("workflow error %v, want %s", err, workflows.ErrTypeJobFailed)
	}
	if attempts != 2 {
		t.Fatalf("%d run attempts, want 2", attempts)
	}
	if !allocationReleased(t, st, placed.AllocationID) || jobState(t, st, job.ID) != vocab.JobFailed {
		t.Fatal("allocation not released or job not failed after the run's retries ran out")
	}
}

// crashOnce fails the first attempt's checkpoint at or after a step, as a
// worker dying there would: the attempt ends without a result and the retry
// must resume from the last heartbeat.
type crashOnce struct {
	store   *store.Store
	atStep  int64
	crashed bool
}

func (c *crashOnce) RecordCheckpoint(ctx context.Context, jobID, runID string, cp scheduling.Checkpoint) error {
	if !c.crashed && cp.Step >= c.atStep {
		c.crashed = true
		return errors.New("worker lost")
	}
	return c.store.RecordCheckpoint(ctx, jobID, runID, cp)
}

func TestJobWorkflowRetriedRunResumesFromHeartbeat(t *testing.T) {
	st := newStore(t, 1)
	job := submitJob(t, st, jobSpec{gpus: 1, runSeconds: 100, checkpointInterval: 20})
	placed := placeJob(t, st, job.ID)
	exec := fastExecutor(&crashOnce{store: st, atStep: 60})
	env := newTestEnv(t, st, exec.Run)
	env.signalAt(time.Second, temporalx.SignalPlaced, placed)

	env.ExecuteWorkflow(workflows.JobWorkflowName, &workflows.JobInput{JobID: job.ID})

	res := env.jobResult(t)
	if res.State != vocab.JobSucceeded || res.Step != 100 {
		t.Fatalf("result = %+v, want succeeded", res)
	}
	if !res.ResumedAfterCrash || res.ResumedFromStep != 40 {
		t.Fatalf("result = %+v, want a resume from the checkpoint at step 40", res)
	}
	if n := countRows(t, st, `SELECT count(*) FROM runs WHERE job_id = $1`, job.ID); n != 1 {
		t.Fatalf("%d runs, want 1: a retried attempt is the same run", n)
	}
	// The resume after the crash is a verified resume of the job's profile:
	// it started at the checkpoint's step 40 and went on to 100.
	evs, err := st.ResumeEvidenceOf(context.Background(), job.ID)
	if err != nil || len(evs) != 1 || evs[0].Kind != vocab.EvidenceCrash || evs[0].Outcome != vocab.ResumeVerified ||
		evs[0].Key != "crash/"+res.RunID || evs[0].Profile != job.Recovery.Profile {
		t.Fatalf("resume evidence %+v (%v), want one verified crash resume of %s", evs, err, job.Recovery.Profile)
	}
}
