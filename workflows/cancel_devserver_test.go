package workflows_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/worker"

	"github.com/gpugov/gpugov/activities"
	"github.com/gpugov/gpugov/internal/executor"
	"github.com/gpugov/gpugov/internal/temporalx"
	"github.com/gpugov/gpugov/internal/temporalx/temporaltest"
	"github.com/gpugov/gpugov/internal/vocab"
	"github.com/gpugov/gpugov/workflows"
)

// lateMarkRunning is the store's MarkRunning held until release is closed
// and then committed whatever became of its context: a local activity that
// Temporal's cancellation interrupts mid-transaction and that still commits.
type lateMarkRunning struct {
	jobs    *activities.Jobs
	entered chan struct{}
	release chan struct{}
	once    sync.Once
}

func (l *lateMarkRunning) MarkRunning(ctx context.Context, in *activities.MarkRunningInput) (*activities.MarkRunningResult, error) {
	l.once.Do(func() { close(l.entered) })
	<-l.release
	return l.jobs.MarkRunning(context.WithoutCancel(ctx), in)
}

// TestTemporalCancelDuringMarkRunningOnDevServer cancels a placed job's
// workflow through the Temporal client while its MarkRunning store step runs
// (and commits the run after the cancellation): the workflow ends cancelled,
// and in PostgreSQL the allocation is released, no GPU share stays active,
// the job is cancelled and its one run ended cancelled.
func TestTemporalCancelDuringMarkRunningOnDevServer(t *testing.T) {
	dev := temporaltest.Start(t)
	c := dev.Client
	st := newStore(t, 1)
	late := &lateMarkRunning{jobs: &activities.Jobs{Store: st}, entered: make(chan struct{}), release: make(chan struct{})}
	startWorkersWith(t, c, activities.Deps{Store: st, Temporal: c}, fastExecutor(st), func(svc worker.Worker) {
		svc.RegisterActivityWithOptions(late.MarkRunning, activity.RegisterOptions{Name: "MarkRunning", DisableAlreadyRegisteredCheck: true})
	})
	t.Cleanup(func() {
		select {
		case <-late.release:
		default:
			close(late.release)
		}
	})

	job := submitJob(t, st, jobSpec{gpus: 1, runSeconds: 60})
	placed := placeJob(t, st, job.ID)
	run := startJob(t, c, &workflows.JobInput{JobID: job.ID})
	if err := c.SignalWorkflow(context.Background(), run.GetID(), "", temporalx.SignalPlaced, placed); err != nil {
		t.Fatal(err)
	}
	select {
	case <-late.entered:
	case <-time.After(30 * time.Second):
		t.Fatal("MarkRunning never started")
	}
	if err := c.CancelWorkflow(context.Background(), run.GetID(), run.GetRunID()); err != nil {
		t.Fatal(err)
	}
	// Let the interrupted step commit only once the workflow has seen the
	// cancellation: its history shows the cancel request.
	waitFor(t, 30*time.Second, "cancel request in the history", func() bool {
		for _, e := range history(t, c, run.GetID(), run.GetRunID()).Events {
			if e.GetWorkflowExecutionCancelRequestedEventAttributes() != nil {
				return true
			}
		}
		return false
	})
	close(late.release)

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	err := run.Get(ctx, nil)
	record(t, c, run.GetID(), run.GetRunID(), "job-temporal-cancelled-during-mark-running")
	var cerr *temporal.CanceledError
	if !errors.As(err, &cerr) {
		t.Fatalf("workflow error %v, want a cancellation", err)
	}
	var res workflows.JobResult
	if err := cerr.Details(&res); err != nil {
		t.Fatalf("cancellation details: %v", err)
	}
	if res.State != vocab.JobCancelled || res.AllocationID != placed.AllocationID || res.RunID == "" {
		t.Fatalf("result %+v, want cancelled with its run on %s", res, placed.AllocationID)
	}
	if !allocationReleased(t, st, placed.AllocationID) {
		t.Fatal("allocation still held after the cancellation")
	}
	if n := countRows(t, st, `SELECT count(*) FROM allocation_gpus WHERE allocation_id = $1 AND active`, placed.AllocationID); n != 0 {
		t.Fatalf("%d GPU shares still active", n)
	}
	if got := jobState(t, st, job.ID); got != vocab.JobCancelled {
		t.Fatalf("stored state %s, want cancelled", got)
	}
	if n := countRows(t, st, `SELECT count(*) FROM runs WHERE job_id = $1`, job.ID); n != 1 {
		t.Fatalf("%d runs, want the one MarkRunning created", n)
	}
	if n := countRows(t, st, `SELECT count(*) FROM runs WHERE id = $1 AND ended_at IS NOT NULL AND outcome = 'cancelled'`, res.RunID); n != 1 {
		t.Fatalf("run %s not ended cancelled", res.RunID)
	}
	// No run activity was started for the cancelled job.
	for _, e := range history(t, c, run.GetID(), run.GetRunID()).Events {
		if a := e.GetActivityTaskScheduledEventAttributes(); a != nil && a.GetActivityType().GetName() == executor.RunActivityName {
			t.Fatal("the run activity was scheduled after the cancellation")
		}
	}
}
