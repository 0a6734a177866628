package api

import (
	"context"
	"net/http"
	"slices"
	"sync"
	"testing"

	"github.com/gpugov/gpugov/internal/temporalx"
)

// recordingQueue is a StartQueue that takes offers while accept is true and
// records them; workflows.Starter, the real one, is tested in workflows/.
type recordingQueue struct {
	mu      sync.Mutex
	accept  bool
	offered []string
	attrs   []temporalx.JobAttributes
}

func (q *recordingQueue) Offer(jobID string, attrs temporalx.JobAttributes) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	if !q.accept {
		return false
	}
	q.offered = append(q.offered, jobID)
	q.attrs = append(q.attrs, attrs)
	return true
}

// With a StartQueue a new job is answered 201 once committed and its start
// is handed to the queue, not made in the request; a repeated
// Idempotency-Key starts the workflow in the request (200), confirming it.
func TestStartQueueTakesNewJobsStarts(t *testing.T) {
	t.Parallel()
	q := &recordingQueue{accept: true}
	env := newTestEnv(t, WithStartQueue(q))
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
		t.Fatalf("the request started %v itself", got)
	}
	if !slices.Equal(q.offered, []string{j.ID}) {
		t.Fatalf("offered %v, want [%s]", q.offered, j.ID)
	}
	if a := q.attrs[0]; a != (temporalx.JobAttributes{Queue: "train", Tier: "standard", Pool: "a100-east", State: "submitted"}) {
		t.Fatalf("offered attributes %+v", a)
	}

	r = env.submit(tokAlice, validSpec(), "async-1")
	if r.status != http.StatusOK {
		t.Fatalf("repeated key: status %d: %s", r.status, r.body)
	}
	if got := env.wf.startedJobs(); !slices.Equal(got, []string{j.ID}) {
		t.Fatalf("repeated key started %v, want [%s]", got, j.ID)
	}
	if len(q.offered) != 1 {
		t.Fatalf("repeated key offered again: %v", q.offered)
	}
}

// When the queue refuses (full or closed) the request starts the workflow
// itself (back-pressure) with the synchronous answers: 201 once started, 202
// when the start fails.
func TestStartQueueRefusedStartsInTheRequest(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t, WithStartQueue(&recordingQueue{}))
	r := env.submit(tokAlice, validSpec(), "")
	if r.status != http.StatusCreated {
		t.Fatalf("status %d: %s", r.status, r.body)
	}
	var j Job
	r.decode(t, &j)
	if got := env.wf.startedJobs(); !slices.Equal(got, []string{j.ID}) {
		t.Fatalf("started %v, want [%s]", got, j.ID)
	}
	if env.wf.notified != 1 {
		t.Fatalf("scheduler notified %d times, want 1", env.wf.notified)
	}
	env.wf.startErr = errTemporalDown
	if r := env.submit(tokAlice, validSpec(), ""); r.status != http.StatusAccepted {
		t.Fatalf("failed start: status %d: %s", r.status, r.body)
	}
}
