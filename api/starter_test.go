package api

import (
	"context"
	"net/http"
	"slices"
	"testing"
)

// With WithAsyncStarts a submission is answered 201 once committed, before
// its workflow start (held here) has happened; Close waits for the start,
// which is followed by the scheduler's wake-up.
func TestAsyncStartAnswersBeforeTheWorkflowStarts(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t, WithAsyncStarts(1, 8))
	release := make(chan struct{})
	env.wf.startHook = func(string) { <-release }
	r := env.submit(tokAlice, validSpec(), "async-1")
	if r.status != http.StatusCreated {
		t.Fatalf("status %d: %s", r.status, r.body)
	}
	var j Job
	r.decode(t, &j)
	if _, err := env.store.GetJob(context.Background(), j.ID); err != nil {
		t.Fatalf("201 before the job was committed: %v", err)
	}
	if got := env.wf.startedJobs(); len(got) != 0 {
		t.Fatalf("started %v while the start was held", got)
	}
	close(release)
	env.server.Close()
	if got := env.wf.startedJobs(); !slices.Equal(got, []string{j.ID}) {
		t.Fatalf("started %v, want [%s]", got, j.ID)
	}
	if env.wf.notified != 1 {
		t.Fatalf("scheduler notified %d times, want 1", env.wf.notified)
	}
}

// A background start that fails leaves the committed job to the reconciler,
// which starts it once Temporal answers again.
func TestAsyncStartFailureLeftToTheReconciler(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t, WithAsyncStarts(2, 8))
	env.wf.startErr = errTemporalDown
	var j Job
	r := env.submit(tokAlice, validSpec(), "")
	if r.status != http.StatusCreated {
		t.Fatalf("status %d: %s", r.status, r.body)
	}
	r.decode(t, &j)
	env.server.Close()
	if env.wf.notified != 0 {
		t.Fatal("scheduler notified although the workflow did not start")
	}
	stored, err := env.store.GetJob(context.Background(), j.ID)
	if err != nil || stored.State != "submitted" {
		t.Fatalf("stored job %+v, %v; want it submitted", stored, err)
	}
	env.wf.startErr = nil
	if res, err := ReconcileJobWorkflows(context.Background(), env.server.store, env.wf, 0); err != nil || res.Checked != 1 {
		t.Fatalf("reconcile: %+v, %v", res, err)
	}
	if got := env.wf.startedJobs(); !slices.Equal(got, []string{j.ID}) {
		t.Fatalf("started %v, want [%s]", got, j.ID)
	}
}

// When the queue is full the request starts its own workflow (back-pressure)
// and answers only after that start.
func TestAsyncStartQueueFullStartsInTheRequest(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t, WithAsyncStarts(1, 1))
	entered, release := make(chan string, 1), make(chan struct{})
	var first string
	env.wf.startHook = func(id string) {
		if first == "" {
			first = id
			entered <- id
			<-release
		}
	}
	ids := make([]string, 3)
	for i := range ids {
		r := env.submit(tokAlice, validSpec(), "")
		if r.status != http.StatusCreated {
			t.Fatalf("submission %d: status %d: %s", i, r.status, r.body)
		}
		var j Job
		r.decode(t, &j)
		ids[i] = j.ID
		if i == 0 {
			<-entered // the worker holds the first start; the queue's one slot is free
		}
	}
	// The second waits in the queue; the third found it full and started itself.
	if got := env.wf.startedJobs(); !slices.Equal(got, []string{ids[2]}) {
		t.Fatalf("started %v before release, want only the third %s", got, ids[2])
	}
	close(release)
	env.server.Close()
	got := env.wf.startedJobs()
	slices.Sort(got)
	want := slices.Clone(ids)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Fatalf("started %v, want %v", got, want)
	}
}
