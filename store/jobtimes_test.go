package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/gpugov/gpugov/internal/scheduling"
	"github.com/gpugov/gpugov/internal/vocab"
	"github.com/gpugov/gpugov/store"
)

// A job's StartedAt is its first run's start and its EndedAt the instant it
// reached a final state; LastRun tells how its latest run ended and why.
func TestJobStartedAndEndedAt(t *testing.T) {
	t.Parallel()
	s, _ := newStore(t)
	ctx := context.Background()
	if err := s.UpsertInventory(ctx, []scheduling.Pool{testPool("p", 1, 2)}); err != nil {
		t.Fatal(err)
	}
	job := submit(t, s, "vision", "p", 1, 0)
	get := func() *store.Job {
		t.Helper()
		j, err := s.GetJob(ctx, job.ID)
		if err != nil {
			t.Fatal(err)
		}
		return j
	}
	if j := get(); j.StartedAt != nil || j.EndedAt != nil {
		t.Fatalf("new job has started_at %v, ended_at %v", j.StartedAt, j.EndedAt)
	}
	start := t0.Add(time.Minute)
	out, err := s.ApplyCycle(ctx, "c1", &scheduling.Result{PolicyVersion: "v1", At: start,
		Placements: []scheduling.Placement{place(job.ID, "p", "p-n0000", 1000, "GPU-p-0000-0")}}, start)
	if err != nil || len(out.Placed) != 1 {
		t.Fatalf("placement: %+v, %v", out, err)
	}
	runID, err := s.MarkRunning(ctx, job.ID, out.Placed[0].AllocationID, 0, start)
	if err != nil {
		t.Fatal(err)
	}
	if j := get(); j.StartedAt == nil || !j.StartedAt.Equal(start) || j.EndedAt != nil {
		t.Fatalf("running job: started_at %v (want %v), ended_at %v", j.StartedAt, start, j.EndedAt)
	}
	if r, err := s.LastRun(ctx, job.ID); err != nil || r == nil || r.ID != runID || r.Number != 1 || r.Outcome != "" || r.EndedAt != nil {
		t.Fatalf("last run while running: %+v, %v", r, err)
	}
	end := start.Add(time.Hour)
	if err := s.FinishRun(ctx, job.ID, runID, vocab.RunFailed, "node failure: no agent on node p-n0000", end); err != nil {
		t.Fatal(err)
	}
	if j := get(); j.StartedAt == nil || !j.StartedAt.Equal(start) || j.EndedAt == nil {
		t.Fatalf("finished job: started_at %v (want %v), ended_at %v", j.StartedAt, start, j.EndedAt)
	}
	r, err := s.LastRun(ctx, job.ID)
	if err != nil || r == nil || r.Outcome != vocab.RunFailed || r.Detail != "node failure: no agent on node p-n0000" ||
		r.EndedAt == nil || !r.EndedAt.Equal(end) {
		t.Fatalf("last run after the failure: %+v, %v", r, err)
	}
	other := submit(t, s, "vision", "p", 1, 0)
	if r, err := s.LastRun(ctx, other.ID); err != nil || r != nil {
		t.Fatalf("last run of a job that never ran: %+v, %v", r, err)
	}
}
