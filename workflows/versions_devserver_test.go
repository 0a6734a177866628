package workflows_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpugov/gpugov/internal/executor"
	"github.com/gpugov/gpugov/internal/scheduling"
	"github.com/gpugov/gpugov/internal/temporalx"
	"github.com/gpugov/gpugov/internal/temporalx/temporaltest"
	"github.com/gpugov/gpugov/internal/vocab"
	"github.com/gpugov/gpugov/store"
	"github.com/gpugov/gpugov/workflows"
)

// hangAlways makes every run attempt hang at its first checkpoint from
// atStep on, like a worker that died for good: no more heartbeats, no
// result, no answer to a cancellation.
type hangAlways struct {
	store   *store.Store
	atStep  int64
	release chan struct{}
	once    sync.Once
	hung    chan struct{}
}

func (h *hangAlways) RecordCheckpoint(ctx context.Context, jobID, runID string, cp scheduling.Checkpoint) error {
	if cp.Step >= h.atStep {
		h.once.Do(func() { close(h.hung) })
		<-h.release
		return errors.New("worker died")
	}
	return h.store.RecordCheckpoint(ctx, jobID, runID, cp)
}

// TestLostRunAfterCancelOnDevServer: a job is cancelled while its run's
// worker is dead (it stopped heartbeating and never confirms the stop). The
// run activity times out after the cancel was asked for, and the job ends
// cancelled with its allocation released (the lost-run-stops branch, version
// 1), not failed. Its history (recorded as
// testdata/job-cancelled-run-lost.json) carries the version marker that
// TestReplayVersionedBranches checks.
func TestLostRunAfterCancelOnDevServer(t *testing.T) {
	dev := temporaltest.Start(t)
	c := dev.Client
	st := newStore(t, 1)
	h := &hangAlways{store: st, atStep: 20, release: make(chan struct{}), hung: make(chan struct{})}
	startWorkers(t, c, st, &executor.SimulatedExecutor{Checkpoints: h, SpeedFactor: 10, HeartbeatInterval: 100 * time.Millisecond})
	t.Cleanup(func() { close(h.release) }) // runs before the workers stop

	job := submitJob(t, st, jobSpec{gpus: 1, runSeconds: 1000, checkpointInterval: 20})
	placed := placeJob(t, st, job.ID)
	run := startJob(t, c, &workflows.JobInput{JobID: job.ID, HeartbeatTimeoutSeconds: 2})
	ctx := context.Background()
	if err := c.SignalWorkflow(ctx, run.GetID(), "", temporalx.SignalPlaced, placed); err != nil {
		t.Fatal(err)
	}
	select {
	case <-h.hung:
	case <-time.After(time.Minute):
		t.Fatal("the run never reached its first checkpoint")
	}
	if err := st.CancelJob(ctx, job.ID, "carol", "not needed"); err != nil {
		t.Fatal(err)
	}
	if err := c.SignalWorkflow(ctx, run.GetID(), "", temporalx.SignalCancel, temporalx.CancelSignal{Actor: "carol", Reason: "not needed"}); err != nil {
		t.Fatal(err)
	}
	res := waitJob(t, run, 2*time.Minute)
	if res.State != vocab.JobCancelled || !strings.Contains(res.Detail, "the run's worker was lost before it confirmed the stop") {
		t.Fatalf("result %+v, want cancelled with the lost worker named", res)
	}
	if !allocationReleased(t, st, placed.AllocationID) || jobState(t, st, job.ID) != vocab.JobCancelled {
		t.Fatal("allocation not released or job not cancelled in the store")
	}
	if !hasVersionMarker(t, history(t, c, run.GetID(), run.GetRunID()), "lost-run-stops", 1) {
		t.Fatal("no lost-run-stops version 1 marker in the history")
	}
	record(t, c, run.GetID(), run.GetRunID(), "job-cancelled-run-lost")
}
