package api

import (
	"context"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/gpugov/gpugov/internal/scheduling"
	"github.com/gpugov/gpugov/internal/temporalx"
	"github.com/gpugov/gpugov/internal/vocab"
	"github.com/gpugov/gpugov/workflows"
)

// TestPendingJobsListsJobsThatMayLackAWorkflow submits jobs while Temporal is
// down (202), lets one of them go through a scheduling cycle (state waiting)
// and cancels another: PendingJobs, paged two at a time, yields every
// submitted or waiting job once, with the attributes a submission starts the
// workflow with, and the cancelled one while it was cancelled within
// workflows.ReconcileCancelledWithin (its workflow may never have been
// started), not after.
func TestPendingJobsListsJobsThatMayLackAWorkflow(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t)
	env.wf.startErr = errTemporalDown
	var pending []string
	for i := 0; i < 3; i++ {
		r := env.submit(tokAlice, validSpec(), "")
		if r.status != http.StatusAccepted {
			t.Fatalf("status %d: %s", r.status, r.body)
		}
		var j Job
		r.decode(t, &j)
		pending = append(pending, j.ID)
	}
	var cancelled Job
	env.do(http.MethodPost, "/v1/jobs", tokAlice, validSpec()).decode(t, &cancelled)
	if r := env.do(http.MethodPost, "/v1/jobs/"+cancelled.ID+"/cancel", tokAlice, nil); r.status != http.StatusOK {
		t.Fatalf("cancel: %d %s", r.status, r.body)
	}
	applyWait(t, env, "c1", time.Now(), scheduling.WaitStatus{JobID: pending[1], Reason: vocab.ReasonCapacityBusy, Rank: 1})

	var listed []string
	attrs := map[string]temporalx.JobAttributes{}
	err := PendingJobs{Store: env.server.store, PageSize: 2}.EachPendingJob(context.Background(),
		func(id string, a temporalx.JobAttributes) {
			listed = append(listed, id)
			attrs[id] = a
		})
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(listed)
	want := append(slices.Clone(pending), cancelled.ID)
	slices.Sort(want)
	if !slices.Equal(listed, want) {
		t.Fatalf("listed %v, want %v", listed, want)
	}
	if a := attrs[pending[1]]; a != (temporalx.JobAttributes{Queue: "train", Tier: "standard", Pool: "a100-east", State: "waiting"}) {
		t.Fatalf("attributes of the waiting job: %+v", a)
	}
	if a := attrs[cancelled.ID]; a.State != "cancelled" || a.Queue != "train" {
		t.Fatalf("attributes of the cancelled job: %+v", a)
	}

	// Past the horizon the cancelled job is no longer listed.
	later := func() time.Time { return time.Now().Add(workflows.ReconcileCancelledWithin + time.Minute) }
	listed = nil
	err = PendingJobs{Store: env.server.store, PageSize: 2, Now: later}.EachPendingJob(context.Background(),
		func(id string, _ temporalx.JobAttributes) { listed = append(listed, id) })
	if err != nil {
		t.Fatal(err)
	}
	if slices.Contains(listed, cancelled.ID) || len(listed) != len(pending) {
		t.Fatalf("listed %v past the cancelled horizon, want only %v", listed, pending)
	}
}

// A store error ends the listing with that error.
func TestPendingJobsStoreError(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t)
	env.store.Close()
	err := PendingJobs{Store: env.server.store}.EachPendingJob(context.Background(), func(string, temporalx.JobAttributes) {
		t.Fatal("a job listed from a closed store")
	})
	if err == nil {
		t.Fatal("no error from a closed store")
	}
}
