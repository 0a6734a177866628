package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/gpugov/gpugov/internal/scheduling"
	"github.com/gpugov/gpugov/internal/vocab"
)

// TestHeldTimeEarnsNoAging: the stored aging clock stops while the job's
// reason earns no aging (held) and starts again when it waits for GPUs, so
// the snapshot's eligible wait and the credit carried into accrued_aging_s
// at placement leave the hold out (docs/design.md §1, wait reasons).
func TestHeldTimeEarnsNoAging(t *testing.T) {
	t.Parallel()
	pool := testPool("p", 1, 1)
	s := newStoreWith(t, pool)
	ctx := context.Background()
	j := submit(t, s, "vision", "p", 1, 0) // submitted at t0
	at := func(m int) time.Time { return t0.Add(time.Duration(m) * time.Minute) }
	wait := func(cycle string, m int, reason vocab.WaitReason) {
		t.Helper()
		if _, err := s.ApplyCycle(ctx, cycle, &scheduling.Result{Waiting: []scheduling.WaitStatus{{JobID: j.ID,
			Reason: reason, Detail: string(reason)}}}, at(m)); err != nil {
			t.Fatal(err)
		}
	}
	pending := func(m int) scheduling.PendingJob {
		t.Helper()
		snap, err := s.LoadSnapshot(ctx, at(m))
		if err != nil || len(snap.Pending) != 1 {
			t.Fatalf("snapshot at minute %d: %v, %v", m, snap, err)
		}
		return snap.Pending[0]
	}
	if pj := pending(0); pj.AgingPaused || !pj.AgingSince.Equal(t0) {
		t.Fatalf("after submit: paused %v since %v, want running from the submit", pj.AgingPaused, pj.AgingSince)
	}
	wait("c1", 0, vocab.ReasonCapacityBusy)
	wait("c2", 2, vocab.ReasonHeld) // 2 eligible minutes
	wait("c3", 5, vocab.ReasonHeld)
	if pj := pending(6); !pj.AgingPaused || pj.AccruedAgingS != 120 {
		t.Fatalf("while held: paused %v accrued %v, want paused at 120 s", pj.AgingPaused, pj.AccruedAgingS)
	}
	wait("c4", 10, vocab.ReasonCapacityBusy) // released after 8 held minutes
	if pj := pending(11); pj.AgingPaused || pj.AccruedAgingS != 120 || !pj.AgingSince.Equal(at(10)) {
		t.Fatalf("after the release: paused %v accrued %v since %v, want running from minute 10 over 120 s",
			pj.AgingPaused, pj.AccruedAgingS, pj.AgingSince)
	}
	wait("c5", 11, vocab.ReasonFragmented) // another reason that earns: the stretch goes on
	if _, err := s.ApplyCycle(ctx, "c6", &scheduling.Result{Placements: []scheduling.Placement{
		place(j.ID, "p", pool.Nodes[0].Name, 1000, pool.Nodes[0].GPUs[0].UUID)}}, at(12)); err != nil {
		t.Fatal(err)
	}
	if job, _ := s.GetJob(ctx, j.ID); job.AccruedAgingS != 240 {
		t.Fatalf("accrued aging after placement %v s, want 240 (2 + 2 eligible minutes; 720 would count the hold)", job.AccruedAgingS)
	}
	if n := queryInt(t, s, `SELECT count(*) FROM jobs WHERE id = $1 AND aging_since IS NULL`, j.ID); n != 1 {
		t.Fatal("a placed job keeps a running aging clock")
	}
}
