package store_test

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/gpugov/gpugov/internal/experiment"
	"github.com/gpugov/gpugov/internal/governance"
	"github.com/gpugov/gpugov/internal/policy"
	"github.com/gpugov/gpugov/internal/queuereport"
	"github.com/gpugov/gpugov/internal/vocab"
	"github.com/gpugov/gpugov/store"
	"github.com/gpugov/gpugov/store/storetest"
)

// runningOn submits a vision job in pool p, places it on GPU g of node 0 at
// t0 and starts its run from startStep; it returns the job, allocation and run.
func runningOn(t *testing.T, s *store.Store, g int, startStep int64) (*store.Job, string, string) {
	t.Helper()
	j := submit(t, s, "vision", "p", 1, 1000)
	out := storetest.Place(t, s, "place-"+j.ID, t0, place(j.ID, "p", storetest.NodeName("p", 0), 1000, storetest.GPUName("p", 0, g)))
	run, err := s.MarkRunning(context.Background(), j.ID, out.Placed[0].AllocationID, startStep, t0)
	if err != nil {
		t.Fatal(err)
	}
	return j, out.Placed[0].AllocationID, run
}

// evidenceOf returns the reclaim evidence of allocation alloc.
func evidenceOf(t *testing.T, s *store.Store, alloc string, since time.Time) *governance.Evidence {
	t.Helper()
	evs, err := s.ReclaimEvidence(context.Background(), since)
	if err != nil {
		t.Fatal(err)
	}
	for i := range evs {
		if evs[i].AllocationID == alloc {
			return &evs[i]
		}
	}
	t.Fatalf("no evidence of allocation %s", alloc)
	return nil
}

// TestObserveRunStepsRecordsProgress checks the progress rule: a step at the
// run's start step is no progress, a higher one is progress observed at the
// scan's instant, the same step again keeps that instant, an ended run is
// ignored; ReclaimEvidence carries the instant.
func TestObserveRunStepsRecordsProgress(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newStoreWith(t, testPool("p", 1, 2))
	_, alloc, run := runningOn(t, s, 0, 10)
	_, _, ended := runningOn(t, s, 1, 0)
	if err := s.FinishRun(ctx, "", ended, vocab.RunSucceeded, "done", t0.Add(time.Minute)); err == nil {
		t.Fatal("FinishRun without the job ID succeeded")
	}
	var endedJob string
	if err := s.Pool().QueryRow(ctx, `SELECT job_id FROM runs WHERE id = $1`, ended).Scan(&endedJob); err != nil {
		t.Fatal(err)
	}
	if err := s.FinishRun(ctx, endedJob, ended, vocab.RunSucceeded, "done", t0.Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	for _, step := range []struct {
		at   time.Duration
		step int64
		want time.Duration // 0: no progress seen yet
	}{
		{1 * time.Minute, 10, 0},
		{2 * time.Minute, 15, 2 * time.Minute},
		{3 * time.Minute, 15, 2 * time.Minute},
		{4 * time.Minute, 12, 2 * time.Minute}, // lower: ignored
		{5 * time.Minute, 20, 5 * time.Minute},
	} {
		got, err := s.ObserveRunSteps(ctx, []store.RunStep{{RunID: run, Step: step.step}, {RunID: ended, Step: 99}, {RunID: "r-none", Step: 1}},
			t0.Add(step.at))
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := got[ended]; ok || len(got) > 1 {
			t.Fatalf("at +%s: %v, want only run %s", step.at, got, run)
		}
		if at, ok := got[run]; ok != (step.want > 0) || (ok && !at.Equal(t0.Add(step.want))) {
			t.Fatalf("at +%s step %d: progress %v (%v), want +%s", step.at, step.step, at, ok, step.want)
		}
	}
	ev := evidenceOf(t, s, alloc, t0)
	if ev.LastProgressAt == nil || !ev.LastProgressAt.Equal(t0.Add(5*time.Minute)) {
		t.Fatalf("evidence progress %v, want +5m", ev.LastProgressAt)
	}
	if got, err := s.ObserveRunSteps(ctx, nil, t0); err != nil || len(got) != 0 {
		t.Fatalf("no steps: %v %v", got, err)
	}
}

// TestCompleteJob checks the owner's business-complete declaration: refused
// for a job holding no GPUs, recorded once on the running job's allocation
// with its audit entry, carried by the reclaim evidence, and classified
// completed.
func TestCompleteJob(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newStoreWith(t, testPool("p", 1, 1))
	pending := submit(t, s, "vision", "p", 1, 1000)
	if _, _, err := s.CompleteJob(ctx, pending.ID, "vision", "done", t0); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("pending job: %v, want ErrConflict", err)
	}
	if _, _, err := s.CompleteJob(ctx, "j-none", "vision", "done", t0); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("unknown job: %v, want ErrNotFound", err)
	}
	if _, _, err := s.CompleteJob(ctx, pending.ID, "", "done", t0); !errors.Is(err, store.ErrInvalid) {
		t.Fatalf("no actor: %v, want ErrInvalid", err)
	}
	if err := s.CancelJob(ctx, pending.ID, "vision", "not needed"); err != nil {
		t.Fatal(err)
	}
	j, alloc, run := runningOn(t, s, 0, 0)
	at := t0.Add(time.Hour)
	c, first, err := s.CompleteJob(ctx, j.ID, "vision", "model exported; uploading logs", at)
	if err != nil || !first {
		t.Fatalf("complete: %+v %v %v", c, first, err)
	}
	want := store.JobCompletion{JobID: j.ID, AllocationID: alloc, RunID: run, DeclaredBy: "vision", DeclaredAt: at, Reason: "model exported; uploading logs"}
	if *c != want {
		t.Fatalf("completion %+v, want %+v", *c, want)
	}
	again, first, err := s.CompleteJob(ctx, j.ID, "ops", "again", at.Add(time.Minute))
	if err != nil || first || *again != want {
		t.Fatalf("second declaration: %+v %v %v, want the first unchanged", again, first, err)
	}
	entries, err := s.AuditFor(ctx, j.ID, 0)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range entries {
		if e.Action == store.AuditCompleteJob {
			n++
			if e.Actor != "vision" || e.Reason != want.Reason || e.Evidence["allocation_id"] != alloc || e.Evidence["run_id"] != run ||
				e.Evidence["state"] != "running" || e.Evidence["gpus"] != 1.0 {
				t.Errorf("audit entry %+v", e)
			}
		}
	}
	if n != 1 {
		t.Fatalf("%d complete_job entries, want 1", n)
	}
	ev := evidenceOf(t, s, alloc, at)
	if ev.Completion == nil || ev.Completion.By != "vision" || !ev.Completion.At.Equal(at) {
		t.Fatalf("evidence completion %+v", ev.Completion)
	}
	if f, ok := governance.Classify(ev, policy.Default(), at.Add(time.Minute)); !ok || f.Class != vocab.ClassCompleted {
		t.Fatalf("classified %+v (%v), want completed", f, ok)
	}
}

// releasedReclaim records an idle reclaim of a running job's allocation at
// `at` and releases it; it returns the reclaim.
func releasedReclaim(t *testing.T, s *store.Store, g int, at time.Time) *store.Reclaim {
	t.Helper()
	ctx := context.Background()
	j, alloc, run := runningOn(t, s, g, 0)
	r, opened, err := s.OpenReclaim(ctx, store.NewReclaim{
		Evidence: governance.Evidence{AllocationID: alloc, JobID: j.ID, Project: "vision", Queue: "train", Pool: "p",
			Node: storetest.NodeName("p", 0), GPUs: 1, RunID: run, JobState: vocab.JobRunning, GrantedAt: t0},
		Finding:  governance.Finding{Class: vocab.ClassIdle, Basis: "0% GPU for 30 min"},
		Decision: governance.ModeDecision{Mode: vocab.ModeAuto, Configured: vocab.ModeAuto, Stage: vocab.StageAutomate, Why: "rule"},
		At:       at})
	if err != nil || !opened {
		t.Fatalf("open reclaim: %v %v", opened, err)
	}
	if r, err = s.ReleaseReclaimed(ctx, r.ID, vocab.ActorReclaim, at); err != nil || r.State != vocab.ReclaimReleased {
		t.Fatalf("release: %+v %v", r, err)
	}
	return r
}

// TestDisputeAfterRelease checks the dispute of a released reclaim: within
// the window it is recorded once (audited) and counted by FalseReclaims
// (filtered by pool and time); after the window, before a release, without
// a reason or for no reclaim it is refused; a keep counts too; an
// operator's rejection stops the count and is audited.
func TestDisputeAfterRelease(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newStoreWith(t, testPool("p", 1, 4))
	window := 72 * time.Hour
	recent := releasedReclaim(t, s, 0, t0)
	old := releasedReclaim(t, s, 1, t0.Add(-100*time.Hour))

	if _, _, err := s.DisputeReleasedReclaim(ctx, recent.ID, "vision", " ", window, t0.Add(time.Hour)); !errors.Is(err, store.ErrInvalid) {
		t.Fatalf("blank reason: %v, want ErrInvalid", err)
	}
	if _, _, err := s.DisputeReleasedReclaim(ctx, "rc-none", "vision", "x", window, t0); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("unknown reclaim: %v, want ErrNotFound", err)
	}
	if _, _, err := s.DisputeReleasedReclaim(ctx, old.ID, "vision", "it was training", window, t0.Add(time.Hour)); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("after the window: %v, want ErrConflict", err)
	}
	at := t0.Add(71 * time.Hour)
	r, recorded, err := s.DisputeReleasedReclaim(ctx, recent.ID, "vision", "the job was loading data from tape", window, at)
	if err != nil || !recorded || !r.Disputed || !r.DisputeAfterRelease || r.DisputedAt == nil || !r.DisputedAt.Equal(at) ||
		r.DisputeBy != "vision" || r.State != vocab.ReclaimReleased || !r.FalseReclaim() {
		t.Fatalf("dispute: %+v %v %v", r, recorded, err)
	}
	if _, recorded, err := s.DisputeReleasedReclaim(ctx, recent.ID, "vision", "again", window, at.Add(time.Minute)); err != nil || recorded {
		t.Fatalf("second dispute: recorded %v, %v", recorded, err)
	}

	// A keep before the release is a dispute too.
	j, alloc, _ := runningOn(t, s, 2, 0)
	kept, _, err := s.OpenReclaim(ctx, store.NewReclaim{
		Evidence: governance.Evidence{AllocationID: alloc, JobID: j.ID, Project: "vision", Queue: "train", Pool: "p", GPUs: 1},
		Finding:  governance.Finding{Class: vocab.ClassIdle, Basis: "idle"},
		Decision: governance.ModeDecision{Mode: vocab.ModeNotify, Configured: vocab.ModeNotify, Stage: vocab.StageAutomate}, At: at})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.DisputeReleasedReclaim(ctx, kept.ID, "vision", "not released", window, at); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("dispute before the release: %v, want ErrConflict", err)
	}
	if _, first, err := s.DisputeReclaim(ctx, kept.ID, "vision", "still needed", at.Add(time.Minute)); err != nil || !first {
		t.Fatalf("keep: %v %v", first, err)
	}

	count := func(from, to time.Time, pools ...string) int {
		t.Helper()
		n, err := s.FalseReclaims(ctx, from, to, pools)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	if n := count(t0, t0.Add(100*time.Hour)); n != 2 {
		t.Fatalf("false reclaims %d, want 2 (the dispute and the keep)", n)
	}
	if n := count(t0, t0.Add(100*time.Hour), "p", "q"); n != 2 {
		t.Fatalf("pools p, q: %d, want 2", n)
	}
	if n := count(t0, t0.Add(100*time.Hour), "q"); n != 0 {
		t.Fatalf("pool q: %d, want 0", n)
	}
	if n := count(t0, at); n != 0 {
		t.Fatalf("window ending at the dispute (exclusive): %d, want 0", n)
	}

	if _, _, err := s.RejectDispute(ctx, old.ID, "ops", "no dispute", at); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("reject without a dispute: %v, want ErrConflict", err)
	}
	if _, _, err := s.RejectDispute(ctx, recent.ID, "ops", "", at); !errors.Is(err, store.ErrInvalid) {
		t.Fatalf("reject without a reason: %v, want ErrInvalid", err)
	}
	r, recorded, err = s.RejectDispute(ctx, recent.ID, "ops", "GPU at 0% for 6 h, no progress lines", at.Add(2*time.Hour))
	if err != nil || !recorded || r.FalseReclaim() || r.DisputeRejectedBy != "ops" || r.DisputeRejectedAt == nil {
		t.Fatalf("reject: %+v %v %v", r, recorded, err)
	}
	if _, recorded, err := s.RejectDispute(ctx, recent.ID, "ops", "again", at.Add(3*time.Hour)); err != nil || recorded {
		t.Fatalf("second rejection: %v %v", recorded, err)
	}
	if n := count(t0, t0.Add(100*time.Hour)); n != 1 {
		t.Fatalf("false reclaims after the rejection %d, want 1 (the keep)", n)
	}
	// The experiments' governance metrics count them alike.
	g, err := s.GovernanceMetrics(ctx, queuereport.Window{From: t0, To: t0.Add(100 * time.Hour)}, experiment.Scope{}, t0.Add(100*time.Hour))
	if err != nil || g.FalseReclaims != 1 {
		t.Fatalf("GovernanceMetrics false reclaims %d (%v), want 1", g.FalseReclaims, err)
	}

	entries, _, err := s.ListAudit(ctx, store.AuditFilter{Subject: recent.JobID})
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]store.AuditEntry{}
	for _, e := range entries {
		if _, dup := seen[e.Action]; dup && (e.Action == store.AuditReclaimDispute || e.Action == store.AuditReclaimDisputeReject) {
			t.Errorf("%s audited twice", e.Action)
		}
		seen[e.Action] = e
	}
	d := seen[store.AuditReclaimDispute]
	if d.Actor != "vision" || d.Reason != "the job was loading data from tape" || d.Evidence["after_release"] != true ||
		d.Evidence["reclaim_id"] != recent.ID || d.Evidence["dispute_window_s"] != window.Seconds() || d.Evidence["released_at"] == nil {
		t.Errorf("dispute entry %+v", d)
	}
	rj := seen[store.AuditReclaimDisputeReject]
	if rj.Actor != "ops" || rj.Evidence["disputed_by"] != "vision" || rj.Evidence["disputed_at"] == nil {
		t.Errorf("rejection entry %+v", rj)
	}
	for _, a := range []string{store.AuditReclaimOpen, store.AuditReclaimRelease} {
		if seen[a].Actor != vocab.ActorReclaim || seen[a].Evidence["reclaim_id"] != recent.ID {
			t.Errorf("%s entry %+v", a, seen[a])
		}
	}
}

// TestListAuditFiltersAndPages checks GET /v1/audit's store side: newest
// first, each filter, the time bounds (since inclusive, until exclusive)
// and pages joined by the cursor.
func TestListAuditFiltersAndPages(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, _ := newStore(t)
	for i := range 25 {
		actor, action := "ops", "hold"
		if i%2 == 1 {
			actor, action = "vision", "release_hold"
		}
		if err := s.AppendAudit(ctx, store.AuditEntry{At: t0.Add(time.Duration(i) * time.Minute), Actor: actor, Action: action,
			Subject: "j-" + strconv.Itoa(i%3), Reason: "r" + strconv.Itoa(i), Evidence: map[string]any{"i": i}}); err != nil {
			t.Fatal(err)
		}
	}
	list := func(f store.AuditFilter) ([]store.AuditEntry, string) {
		t.Helper()
		es, next, err := s.ListAudit(ctx, f)
		if err != nil {
			t.Fatal(err)
		}
		return es, next
	}
	all, next := list(store.AuditFilter{})
	if len(all) != 25 || next != "" || all[0].Reason != "r24" || all[24].Reason != "r0" || all[0].Evidence["i"] != 24.0 {
		t.Fatalf("all: %d entries, next %q, first %+v", len(all), next, all[0])
	}
	var paged []store.AuditEntry
	cursor := int64(0)
	for pages := 0; ; pages++ {
		es, next := list(store.AuditFilter{Limit: 10, BeforeID: cursor})
		paged = append(paged, es...)
		if next == "" {
			if pages != 2 {
				t.Fatalf("%d pages, want 3", pages+1)
			}
			break
		}
		var err error
		if cursor, err = strconv.ParseInt(next, 10, 64); err != nil {
			t.Fatal(err)
		}
	}
	for i := range all {
		if paged[i].ID != all[i].ID {
			t.Fatalf("page order differs at %d", i)
		}
	}
	for _, tc := range []struct {
		name string
		f    store.AuditFilter
		want int
	}{
		{"actor", store.AuditFilter{Actor: "vision"}, 12},
		{"action", store.AuditFilter{Action: "hold"}, 13},
		{"subject", store.AuditFilter{Subject: "j-0"}, 9},
		{"since", store.AuditFilter{Since: t0.Add(20 * time.Minute)}, 5},
		{"until", store.AuditFilter{Until: t0.Add(20 * time.Minute)}, 20},
		{"window", store.AuditFilter{Since: t0.Add(5 * time.Minute), Until: t0.Add(10 * time.Minute)}, 5},
		{"combined", store.AuditFilter{Actor: "ops", Subject: "j-0", Since: t0.Add(6 * time.Minute)}, 4},
		{"none", store.AuditFilter{Action: "drill"}, 0},
	} {
		if es, _ := list(tc.f); len(es) != tc.want {
			t.Errorf("%s: %d entries, want %d", tc.name, len(es), tc.want)
		}
	}
	if es, _ := list(store.AuditFilter{Limit: 5000}); len(es) != 25 {
		t.Fatalf("a limit above MaxListLimit: %d entries", len(es))
	}
}
