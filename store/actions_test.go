package store_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/gpugov/gpugov/internal/scheduling"
	"github.com/gpugov/gpugov/internal/vocab"
	"github.com/gpugov/gpugov/store"
)

// TestSetPrerequisite sets a prerequisite ready, checks the job, the
// scheduler's snapshot and the audit entry with before and after, and that a
// repeat, an unknown name and a final job change nothing.
func TestSetPrerequisite(t *testing.T) {
	t.Parallel()
	s, _ := newStore(t)
	ctx := context.Background()
	j, _, err := s.CreateJob(ctx, &store.NewJob{Project: "vision", Queue: "train", Tier: vocab.TierStandard,
		Request:       scheduling.ResourceRequest{GPUs: 1, Pool: "p"},
		Prerequisites: []scheduling.Prerequisite{{Name: "image", Ready: true}, {Name: "data", Message: "staging"}}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.LoadSnapshot(ctx, time.Now()); err != nil { // fills the snapshot cache
		t.Fatal(err)
	}
	changed, err := s.SetPrerequisite(ctx, j.ID, "data", true, "staged to /scratch", "alice")
	if err != nil || !changed {
		t.Fatalf("set: changed=%v err=%v", changed, err)
	}
	got, _ := s.GetJob(ctx, j.ID)
	want := []scheduling.Prerequisite{{Name: "image", Ready: true}, {Name: "data", Ready: true, Message: "staged to /scratch"}}
	if len(got.Prerequisites) != 2 || got.Prerequisites[0] != want[0] || got.Prerequisites[1] != want[1] {
		t.Fatalf("prerequisites %+v", got.Prerequisites)
	}
	snap, err := s.LoadSnapshot(ctx, time.Now())
	if err != nil || len(snap.Pending) != 1 || !snap.Pending[0].Prerequisites[1].Ready {
		t.Fatalf("snapshot: %v %+v", err, snap)
	}
	audit, _ := s.AuditFor(ctx, j.ID, 0)
	last := audit[len(audit)-1]
	before, _ := last.Evidence["before"].(map[string]any)
	after, _ := last.Evidence["after"].(map[string]any)
	if last.Action != store.AuditSetPrerequisite || last.Actor != "alice" || last.Evidence["name"] != "data" ||
		before["ready"] != false || before["message"] != "staging" || after["ready"] != true || after["message"] != "staged to /scratch" {
		t.Fatalf("audit %+v", last)
	}

	// The same values again: nothing changes, nothing is audited.
	if changed, err := s.SetPrerequisite(ctx, j.ID, "data", true, "staged to /scratch", "alice"); err != nil || changed {
		t.Fatalf("repeat: changed=%v err=%v", changed, err)
	}
	if _, err := s.SetPrerequisite(ctx, j.ID, "weights", true, "", "alice"); !errors.Is(err, store.ErrNoPrerequisite) ||
		!errors.Is(err, store.ErrNotFound) {
		t.Fatalf("unknown prerequisite: %v", err)
	}
	if _, err := s.SetPrerequisite(ctx, "j-missing", "data", true, "", "alice"); !errors.Is(err, store.ErrNotFound) ||
		errors.Is(err, store.ErrNoPrerequisite) {
		t.Fatalf("unknown job: %v", err)
	}
	if err := s.CancelJob(ctx, j.ID, "alice", "done"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.SetPrerequisite(ctx, j.ID, "data", false, "", "alice"); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("final job: %v", err)
	}
	if n := len(mustAudit(t, s, j.ID)); n != len(audit)+1 { // + the cancel
		t.Fatalf("%d audit entries, want %d", n, len(audit)+1)
	}
}

// TestAmendJob amends a waiting job's request after a snapshot cached it:
// the next snapshot sees the new request with the submit time, wait start and
// carried aging kept; the audit has before and after; a cycle placing the
// old shape is refused; pool changes, placed jobs and repeats are refused or
// change nothing.
func TestAmendJob(t *testing.T) {
	t.Parallel()
	s, _ := newStore(t)
	ctx := context.Background()
	if err := s.UpsertInventory(ctx, []scheduling.Pool{testPool("p", 1, 4)}); err != nil {
		t.Fatal(err)
	}
	j := submit(t, s, "vision", "p", 4, 0)
	if _, err := s.Pool().Exec(ctx, `UPDATE jobs SET accrued_aging_s = 120 WHERE id = $1`, j.ID); err != nil {
		t.Fatal(err)
	}
	snap, err := s.LoadSnapshot(ctx, t0.Add(time.Minute))
	if err != nil || snap.Pending[0].Request.GPUs != 4 {
		t.Fatalf("snapshot before: %v", err)
	}
	agingSince, oldVersion := snap.Pending[0].AgingSince, snap.Pending[0].RequestVersion
	req := scheduling.ResourceRequest{GPUs: 2, Pool: "p", Topology: scheduling.TopologySameNode, CPUMilli: 4000, MemoryMiB: 16384}
	changed, err := s.AmendJob(ctx, j.ID, req, "alice", "fit one node")
	if err != nil || !changed {
		t.Fatalf("amend: changed=%v err=%v", changed, err)
	}
	snap, err = s.LoadSnapshot(ctx, t0.Add(2*time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	pj := snap.Pending[0]
	if pj.Request.GPUs != 2 || pj.Request.Topology != scheduling.TopologySameNode || !pj.SubmitTime.Equal(t0) ||
		!pj.WaitingSince.Equal(j.WaitingSince) || pj.AccruedAgingS != 120 || !pj.AgingSince.Equal(agingSince) {
		t.Fatalf("snapshot after amend: %+v", pj)
	}
	audit := mustAudit(t, s, j.ID)
	last := audit[len(audit)-1]
	before, _ := last.Evidence["before"].(map[string]any)
	after, _ := last.Evidence["after"].(map[string]any)
	if last.Action != store.AuditAmendResources || last.Actor != "alice" || last.Reason != "fit one node" ||
		before["gpus"] != float64(4) || after["gpus"] != float64(2) || after["topology"] != "same-node" {
		t.Fatalf("audit %+v", last)
	}
	if changed, err := s.AmendJob(ctx, j.ID, req, "alice", "again"); err != nil || changed {
		t.Fatalf("repeat: changed=%v err=%v", changed, err)
	}
	moved := req
	moved.Pool = "q"
	var ve *store.ValidationError
	if _, err := s.AmendJob(ctx, j.ID, moved, "alice", ""); !errors.As(err, &ve) || ve.Field != "resources.pool" {
		t.Fatalf("pool change: %v", err)
	}

	// A cycle planned on the snapshot before the amendment cannot grant what
	// it planned, whether the shape it planned differs in count (4 GPUs) or
	// not (2 GPUs planned on the old request).
	if pj.RequestVersion == oldVersion || oldVersion == 0 {
		t.Fatalf("request version %d before the amendment, %d after: want a new one", oldVersion, pj.RequestVersion)
	}
	for i, gpus := range [][]string{{"GPU-p-0000-0", "GPU-p-0000-1", "GPU-p-0000-2", "GPU-p-0000-3"}, {"GPU-p-0000-0", "GPU-p-0000-1"}} {
		stale := place(j.ID, "p", "p-n0000", 1000, gpus...)
		stale.RequestVersion = oldVersion
		out, err := s.ApplyCycle(ctx, fmt.Sprintf("c-stale-%d", i), &scheduling.Result{At: t0, Placements: []scheduling.Placement{stale}}, t0)
		if err != nil || len(out.Placed) != 0 || len(out.Conflicts) != 1 {
			t.Fatalf("stale placement of %d GPUs: %v %+v", len(gpus), err, out)
		}
	}
	ok := place(j.ID, "p", "p-n0000", 1000, "GPU-p-0000-0", "GPU-p-0000-1")
	ok.RequestVersion = pj.RequestVersion
	out, err := s.ApplyCycle(ctx, "c-ok", &scheduling.Result{At: t0, Placements: []scheduling.Placement{ok}}, t0)
	if err != nil || len(out.Placed) != 1 {
		t.Fatalf("placement: %v %+v", err, out)
	}
	if _, err := s.AmendJob(ctx, j.ID, scheduling.ResourceRequest{GPUs: 1, Pool: "p"}, "alice", ""); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("placed job: %v", err)
	}
	if n := len(mustAudit(t, s, j.ID)); n != len(audit)+1 { // + the placement
		t.Fatalf("%d audit entries, want %d", n, len(audit)+1)
	}
}

func mustAudit(t *testing.T, s *store.Store, subject string) []store.AuditEntry {
	t.Helper()
	a, err := s.AuditFor(context.Background(), subject, 0)
	if err != nil {
		t.Fatal(err)
	}
	return a
}
