package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/gpugov/gpugov/internal/scheduling"
	"github.com/gpugov/gpugov/internal/vocab"
)

// A hold shows in the job's wait history when it is made, naming who held
// it: a hold released within one scheduling cycle left no held event (only
// its audit entries), since the event was opened only by a cycle that saw
// the job held. A cycle that then sees the reason held extends the event
// rather than opening a second one or rewriting who held it, and a cycle
// read before the hold does not end it.
func TestHoldOpensItsWaitEvent(t *testing.T) {
	t.Parallel()
	pool := testPool("p", 1, 1)
	s := newStoreWith(t, pool)
	ctx := context.Background()
	cycleAt := func(d time.Duration) time.Time { return time.Now().Add(d).Truncate(time.Microsecond) }
	wait := func(id, jobID string, reason vocab.WaitReason, at time.Time) *struct{ tr, stale int } {
		t.Helper()
		detail, re := string(reason), ""
		if reason == vocab.ReasonHeld {
			detail, re = "held by its owner or an operator", scheduling.HeldReEvaluate
		}
		out, err := s.ApplyCycle(ctx, id, &scheduling.Result{Waiting: []scheduling.WaitStatus{{JobID: jobID,
			Reason: reason, Detail: detail, ReEvaluate: re}}}, at)
		if err != nil {
			t.Fatal(err)
		}
		return &struct{ tr, stale int }{out.WaitTransitions, out.StaleWaits}
	}

	// A short hold: held and released between two cycles.
	short := submit(t, s, "vision", "p", 1, 0)
	wait("c1", short.ID, vocab.ReasonCapacityBusy, cycleAt(-time.Minute))
	if _, err := s.SetHold(ctx, short.ID, true, "alice", "dataset broken"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.SetHold(ctx, short.ID, false, "alice", "fixed"); err != nil {
		t.Fatal(err)
	}
	// The hold cleared the stored explanation's digest: a cycle that finds
	// the released job's explanation unchanged would otherwise skip it and
	// leave the held event open for good (found by a newcomer: hold, then
	// release within a second, and `get` said "held" a minute later).
	if got := queryInt(t, s, `SELECT count(*) FROM jobs WHERE id = $1 AND explanation_digest IS NOT NULL`, short.ID); got != 0 {
		t.Fatalf("the hold kept the stored explanation's digest")
	}
	if got := queryInt(t, s, `SELECT count(*) FROM job_queue WHERE job_id = $1 AND explanation_digest IS NOT NULL`, short.ID); got != 0 {
		t.Fatalf("job_queue's mirror kept the stored explanation's digest after the hold")
	}
	wait("c2", short.ID, vocab.ReasonCapacityBusy, cycleAt(time.Second))
	events, err := s.JobWaitEvents(ctx, short.ID)
	if err != nil {
		t.Fatal(err)
	}
	if len(events) > 0 && events[0].Reason == vocab.ReasonNotYetEvaluated { // submitted at t0, before c1
		events = events[1:]
	}
	var reasons []vocab.WaitReason
	for _, e := range events {
		reasons = append(reasons, e.Reason)
	}
	if len(events) != 3 || events[1].Reason != vocab.ReasonHeld || events[1].Detail != "held by alice: dataset broken" ||
		events[1].ReEvaluate != scheduling.HeldReEvaluate || events[1].EndedAt == nil || events[0].EndedAt == nil ||
		!events[0].EndedAt.Equal(events[1].StartedAt) || events[2].Reason != vocab.ReasonCapacityBusy || events[2].EndedAt != nil {
		t.Fatalf("short hold: events %v %+v, want capacity_busy, held by alice (closed), capacity_busy", reasons, events)
	}

	// A hold a cycle then sees: one held event, its detail kept; a cycle
	// whose snapshot predates the hold leaves it open.
	long := submit(t, s, "vision", "p", 1, 0)
	if _, err := s.SetHold(ctx, long.ID, true, "olga", ""); err != nil { // never evaluated before
		t.Fatal(err)
	}
	if got := wait("c3", long.ID, vocab.ReasonCapacityBusy, cycleAt(2*time.Second)); got.stale != 1 || got.tr != 0 {
		t.Fatalf("stale cycle after the hold: %+v, want the status left as stale", got)
	}
	for i, c := range []string{"c4", "c5"} {
		if got := wait(c, long.ID, vocab.ReasonHeld, cycleAt(time.Duration(3+i)*time.Second)); got.tr != 0 {
			t.Fatalf("cycle %s opened %d events for a held job with its held event open", c, got.tr)
		}
	}
	events, err = s.JobWaitEvents(ctx, long.ID)
	if err != nil {
		t.Fatal(err)
	}
	n := len(events)
	if n == 0 || events[n-1].Reason != vocab.ReasonHeld || events[n-1].Detail != "held by olga" || events[n-1].EndedAt != nil {
		t.Fatalf("long hold: events %+v, want the held event by olga open, last", events)
	}
	for _, e := range events[:n-1] {
		if e.Reason != vocab.ReasonNotYetEvaluated || e.EndedAt == nil {
			t.Fatalf("long hold: before the held event %+v, want only its not_yet_evaluated wait", e)
		}
	}
	if got := queryInt(t, s, `SELECT count(*) FROM wait_events WHERE job_id = $1 AND reason = 'held'`, long.ID); got != 1 {
		t.Fatalf("%d held events, want 1", got)
	}
}
