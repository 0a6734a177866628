package store_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/gpugov/gpugov/internal/scheduling"
	"github.com/gpugov/gpugov/internal/vocab"
)

// TestSnapshotReclaimFields checks what the snapshot gives the planner for
// borrowing that gives back (docs/design.md §5): a pending job's preemption
// in progress carries its notice time; once the victim is released, the job
// (still pending) carries the release and the requeued victim its preemption.
func TestSnapshotReclaimFields(t *testing.T) {
	t.Parallel()
	s, _ := newStore(t)
	ctx := context.Background()
	pool := testPool("p", 1, 2)
	if err := s.UpsertInventory(ctx, []scheduling.Pool{pool}); err != nil {
		t.Fatal(err)
	}
	n := pool.Nodes[0]
	victim := submit(t, s, "nlp", "p", 2, 0)
	lender := submit(t, s, "vision", "p", 2, 0)
	out, err := s.ApplyCycle(ctx, "c1", &scheduling.Result{Placements: []scheduling.Placement{
		place(victim.ID, "p", n.Name, 1000, n.GPUs[0].UUID, n.GPUs[1].UUID)}}, t0)
	if err != nil || len(out.Placed) != 1 {
		t.Fatalf("place: %+v %v", out, err)
	}
	run, err := s.MarkRunning(ctx, victim.ID, out.Placed[0].AllocationID, 0, t0)
	if err != nil {
		t.Fatal(err)
	}
	at := t0.Add(time.Minute)
	started, err := s.ApplyCycle(ctx, "c2", &scheduling.Result{Preemptions: []scheduling.PreemptionProposal{{
		ForJobID: lender.ID, Pool: "p", Act: true,
		Victims: []scheduling.Victim{{JobID: victim.ID, AllocationID: out.Placed[0].AllocationID, GPUs: 2}}}}}, at)
	if err != nil || len(started.Preemptions) != 1 {
		t.Fatalf("preemption: %+v %v", started, err)
	}
	notice := at.Add(2 * time.Second)
	if _, err := s.NoticePreemption(ctx, started.Preemptions[0].PreemptionID, "wf", notice); err != nil {
		t.Fatal(err)
	}
	pendingOf := func(snap *scheduling.Snapshot, id string) *scheduling.PendingJob {
		i := slices.IndexFunc(snap.Pending, func(p scheduling.PendingJob) bool { return p.ID == id })
		if i < 0 {
			return nil
		}
		return &snap.Pending[i]
	}
	snap, err := s.LoadSnapshot(ctx, notice)
	if err != nil {
		t.Fatal(err)
	}
	if l := pendingOf(snap, lender.ID); l == nil || !l.PreemptionNoticeAt.Equal(notice) || !l.VictimsReleasedAt.IsZero() {
		t.Fatalf("lender during the preemption: %+v, want notice %v and no release", l, notice)
	}

	released := notice.Add(5 * time.Second)
	if err := s.FinishRun(ctx, victim.ID, run, vocab.RunPreempted, "preempted", released); err != nil {
		t.Fatal(err)
	}
	snap, err = s.LoadSnapshot(ctx, released)
	if err != nil {
		t.Fatal(err)
	}
	l, v := pendingOf(snap, lender.ID), pendingOf(snap, victim.ID)
	if l == nil || len(l.PreemptionInProgress) != 0 || !l.PreemptionNoticeAt.IsZero() || !l.VictimsReleasedAt.Equal(released) {
		t.Fatalf("lender after the release: %+v, want the release at %v", l, released)
	}
	if v == nil || len(v.RecentPreemptions) != 1 || !v.RecentPreemptions[0].Equal(released) {
		t.Fatalf("requeued victim %+v, want its preemption at %v", v, released)
	}
}
