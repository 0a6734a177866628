package api

import (
	"context"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/gpugov/gpugov/internal/scheduling"
	"github.com/gpugov/gpugov/internal/vocab"
)

// TestReconcileStartsDeferredWorkflows submits jobs while Temporal is down
// (202), lets one of them go through a scheduling cycle (state waiting), and
// checks that a reconcile pass starts the workflow of every pending job but
// not of finished ones.
func TestReconcileStartsDeferredWorkflows(t *testing.T) {
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

	// Still down: every start fails and is reported.
	res, err := ReconcileJobWorkflows(context.Background(), env.server.store, env.wf, 2)
	if err == nil || res != (ReconcileResult{Checked: 3, Failed: 3}) {
		t.Fatalf("while down: %+v, %v", res, err)
	}
	env.wf.startErr = nil
	res, err = ReconcileJobWorkflows(context.Background(), env.server.store, env.wf, 2)
	if err != nil || res != (ReconcileResult{Checked: 3}) {
		t.Fatalf("after recovery: %+v, %v", res, err)
	}
	started := env.wf.startedJobs()
	slices.Sort(started)
	want := slices.Clone(pending)
	slices.Sort(want)
	if !slices.Equal(started, want) {
		t.Fatalf("started %v, want %v", started, want)
	}
}
