package store_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/gpugov/gpugov/internal/scheduling"
	"github.com/gpugov/gpugov/internal/vocab"
	"github.com/gpugov/gpugov/store/storetest"
)

// TestWaitStateMirror checks that the pending jobs' stored wait state the
// snapshot reads from job_queue (migration 00340) follows every writer of
// jobs' reason, explanation digest and explained_at — a cycle, a placement,
// a requeue, a hold, a cancel, a bare SQL update — so that a concurrent
// change between two cycles is seen by the next one: its snapshot shows the
// new reason, and its ApplyCycle rewrites the job instead of keeping an
// explanation that is no longer stored (docs/design.md §8, "The whole cycle
// at scale").
func TestWaitStateMirror(t *testing.T) {
	t.Parallel()
	s := newStoreWith(t, testPool("p", 1, 4))
	ctx := context.Background()
	a, b, c, d := submit(t, s, "vision", "p", 1, 0), submit(t, s, "vision", "p", 1, 0),
		submit(t, s, "vision", "p", 1, 0), submit(t, s, "vision", "p", 1, 0)
	at := func(sec int) time.Time { return t0.Add(time.Duration(sec) * time.Second) }
	mirrorCurrent := func(when string) {
		t.Helper()
		if n := queryInt(t, s, `
			SELECT count(*) FROM job_queue q JOIN jobs j ON j.id = q.job_id
			WHERE (q.reason, q.explanation_digest, q.explained_at) IS DISTINCT FROM (j.reason, j.explanation_digest, j.explained_at)`); n != 0 {
			t.Fatalf("%s: %d job_queue rows whose wait state differs from jobs'", when, n)
		}
	}
	waits := func(ids ...string) []scheduling.WaitStatus {
		var ws []scheduling.WaitStatus
		for i, id := range ids {
			ws = append(ws, scheduling.WaitStatus{JobID: id, Reason: vocab.ReasonCapacityBusy, Detail: "0 of 4 free", Rank: i + 1})
		}
		return ws
	}
	stored := func(snap *scheduling.Snapshot) map[string]vocab.WaitReason {
		m := map[string]vocab.WaitReason{}
		for _, p := range snap.Pending {
			m[p.ID] = p.StoredReason
		}
		return m
	}
	snap, err := s.LoadSnapshot(ctx, at(0))
	if err != nil {
		t.Fatal(err)
	}
	if len(snap.Pending) != 4 {
		t.Fatalf("%d pending, want 4", len(snap.Pending))
	}
	if out, err := s.ApplyCycle(ctx, "mirror-0", &scheduling.Result{Waiting: waits(a.ID, b.ID, c.ID, d.ID)}, at(0)); err != nil || out.WaitTransitions != 4 {
		t.Fatalf("first cycle: %+v, %v", out, err)
	}
	mirrorCurrent("after the first cycle")

	// Between cycles: a is placed and requeued (its reason and digest
	// cleared), c's reason is changed by a bare update, d is held, and b
	// stays as the cycle left it.
	node, gpu := storetest.NodeName("p", 0), storetest.GPUName("p", 0, 0)
	out, err := s.ApplyCycle(ctx, "mirror-place", &scheduling.Result{Placements: []scheduling.Placement{
		place(a.ID, "p", node, 1000, gpu)}}, at(1))
	if err != nil || len(out.Placed) != 1 {
		t.Fatalf("place a: %+v, %v", out, err)
	}
	mirrorCurrent("after the placement")
	if err := s.ReleasePlacement(ctx, a.ID, out.Placed[0].AllocationID, vocab.RunRequeued, "requeued", at(2)); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Pool().Exec(ctx, `UPDATE jobs SET reason = 'quota_exhausted', explanation_digest = NULL WHERE id = $1`, c.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := s.SetHold(ctx, d.ID, true, "alice", "maintenance"); err != nil {
		t.Fatal(err)
	}
	mirrorCurrent("after the requeue, the update and the hold")

	snap, err = s.LoadSnapshot(ctx, at(5))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]vocab.WaitReason{a.ID: "", b.ID: vocab.ReasonCapacityBusy, c.ID: vocab.ReasonQuotaExhausted,
		d.ID: vocab.ReasonCapacityBusy}
	if got := stored(snap); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("stored reasons at 5 s: %v, want %v", got, want)
	}
	// b's explanation is current and kept; a's and c's were cleared, so
	// they are written again although the cycle says what it said before.
	out, err = s.ApplyCycle(ctx, "mirror-5", &scheduling.Result{Waiting: waits(a.ID, b.ID, c.ID)}, at(5))
	if err != nil {
		t.Fatal(err)
	}
	if out.ExplanationsKept != 1 {
		t.Fatalf("cycle at 5 s: %+v, want only b kept", out)
	}
	for _, id := range []string{a.ID, c.ID} {
		var explained time.Time
		if err := s.Pool().QueryRow(ctx, `SELECT explained_at FROM job_queue WHERE job_id = $1`, id).Scan(&explained); err != nil {
			t.Fatal(err)
		}
		if !explained.Equal(at(5)) {
			t.Fatalf("job %s explained at %s in job_queue, want %s", id, explained, at(5))
		}
	}
	mirrorCurrent("after the second cycle")

	if err := s.CancelJob(ctx, b.ID, "alice", "not needed"); err != nil {
		t.Fatal(err)
	}
	mirrorCurrent("after the cancel")
	snap, err = s.LoadSnapshot(ctx, at(10))
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := stored(snap)[b.ID]; ok {
		t.Fatalf("cancelled job %s still pending in the snapshot", b.ID)
	}
	if n := queryInt(t, s, `SELECT count(*) FROM job_queue WHERE reason IS NOT NULL AND state IN ('submitted', 'waiting')`); n != 3 {
		t.Fatalf("%d pending job_queue rows with a reason, want 3", n)
	}
}
