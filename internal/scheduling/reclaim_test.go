package scheduling

import (
	"strings"
	"testing"
	"time"

	"github.com/gpugov/gpugov/internal/vocab"
)

// lendScenario is one 8-GPU node shared by three projects (docs/design.md §5,
// borrowing that gives back): vision (nominal 4 GPUs) lends, nlp (nominal 2,
// may borrow 6 more) runs nb1 within its nominal quota and b1 (started an
// hour ago) and b2 (five minutes ago, younger than the minimum run time) on
// borrowed quota, 2 GPUs each; idle (nominal 2) uses nothing. Two GPUs are
// free. Vision's standard job "lender" asks for 4 GPUs: within its nominal
// quota, blocked because its quota is lent to nlp.
func lendScenario() (*Snapshot, *Policy) {
	n := mkNode("n1", 8, "A100", 81920, 0)
	s := &Snapshot{Pools: []Pool{mkPool("p", n)}, Quotas: []Quota{
		{Project: "vision", Pool: "p", NominalMilli: 4000},
		{Project: "nlp", Pool: "p", NominalMilli: 2000, BorrowingLimitMilli: 6000},
		{Project: "idle", Pool: "p", NominalMilli: 2000},
	}}
	run := func(id string, ago time.Duration, borrowed bool, gpus ...int) RunningJob {
		var uuids []string
		for _, g := range gpus {
			uuids = append(uuids, n.GPUs[g].UUID)
		}
		r := mkRunning(id, vocab.TierStandard, "p", "n1", ago, uuids...)
		r.Project, r.Allocation.Borrowed, r.RunSeconds = "nlp", borrowed, 7200
		return r
	}
	withRunning(s, run("nb1", 3*time.Hour, false, 0, 1), run("b1", time.Hour, true, 2, 3), run("b2", 5*time.Minute, true, 4, 5))
	l := mkJob("lender", vocab.TierStandard, 4, "p", time.Minute)
	l.Project = "vision"
	s.Pending = []PendingJob{l}
	return s, testPolicy()
}

// nlpJob is a pending standard job of nlp asking for gpus, waiting for age.
func nlpJob(id string, gpus int, age time.Duration) PendingJob {
	j := mkJob(id, vocab.TierStandard, gpus, "p", age)
	j.Project = "nlp"
	return j
}

// TestLenderReclaimsLentQuota: the lender blocked by borrowers gets a
// preemption proposal of borrowed allocations only, the least effective loss
// first (b2, though younger than the minimum run time), and its wait detail
// says its quota is lent out, to whom, and when it comes back.
func TestLenderReclaimsLentQuota(t *testing.T) {
	s, p := lendScenario()
	res := Plan(s, p, t0)
	if len(res.Preemptions) != 1 {
		t.Fatalf("proposals %+v, want one", res.Preemptions)
	}
	pr := res.Preemptions[0]
	if pr.ForJobID != "lender" || !pr.Act || len(pr.Victims) != 1 || pr.Victims[0].JobID != "b2" {
		t.Fatalf("proposal %+v, want lender reclaiming b2 (least loss, borrowed)", pr)
	}
	w := waitOf(res, "lender")
	for _, want := range []string{"quota of project vision is lent out to nlp (4000 milli-GPU)",
		"it comes back by 2026-12-01T12:02:00Z, the grace end of the preemption proposed (120 s)"} {
		if w == nil || w.Reason != vocab.ReasonCapacityBusy || !strings.Contains(w.Detail, want) {
			t.Fatalf("lender wait %+v, want capacity_busy with %q", w, want)
		}
	}

	// nb1 holds nlp's own nominal quota: even a cheaper loss does not make it
	// a victim of a lender of the same tier.
	s.Running[0].StartedAt = t0.Add(-11 * time.Minute)
	s.Running[0].Recovery.LastCheckpoint = &Checkpoint{At: t0.Add(-10 * time.Second)}
	if res := Plan(s, p, t0); len(res.Preemptions) != 1 || res.Preemptions[0].Victims[0].JobID != "b2" {
		t.Fatalf("proposals %+v, want b2 only", res.Preemptions)
	}

	// A stale borrowed mark is not lent quota: with nominal 6000 nlp borrows
	// nothing, and no same-tier job of it may be stopped.
	s.Quotas[1].NominalMilli = 6000
	if res := Plan(s, p, t0); len(res.Preemptions) != 0 {
		t.Fatalf("nlp within its nominal quota: proposals %+v, want none", res.Preemptions)
	}
}

// TestFreedGPUsGoToLender: after its victim was released, the lender is
// placed on the freed GPUs although the requeued borrower ranks above it;
// the borrower waits quota_exhausted naming the lender. Without the release
// on record (no claim) the borrower would take them back, which is the
// preempt/re-borrow thrash the claim prevents.
func TestFreedGPUsGoToLender(t *testing.T) {
	s, p := lendScenario()
	s.Running, s.Allocations = s.Running[:2], s.Allocations[:2] // b2 released
	b2 := nlpJob("b2", 2, 3*time.Hour)                          // requeued: older submit, ranks first
	b2.RecentPreemptions = []time.Time{t0.Add(-10 * time.Second)}
	s.Pending[0].VictimsReleasedAt = t0.Add(-10 * time.Second)
	s.Pending = append([]PendingJob{b2}, s.Pending...)

	res := Plan(s, p, t0)
	if pl := placementOf(res, "lender"); pl == nil || len(pl.GPUs) != 4 || pl.Borrowed {
		t.Fatalf("lender placement %+v, waiting %+v", pl, res.Waiting)
	}
	w := waitOf(res, "b2")
	if w == nil || w.Rank != 1 || w.Reason != vocab.ReasonQuotaExhausted ||
		!strings.Contains(w.Detail, "quota of project vision is being returned to it (job lender waits for it)") ||
		!strings.Contains(w.ReEvaluate, "when job lender of project vision is placed") {
		t.Fatalf("borrower b2 %+v, want rank 1 refused borrowing while vision waits", w)
	}

	s.Pending[1].VictimsReleasedAt = time.Time{}
	res = Plan(s, p, t0)
	if pl := placementOf(res, "b2"); pl == nil || !pl.Borrowed || placementOf(res, "lender") != nil {
		t.Fatalf("without the claim: placements %+v, want b2 re-borrowing (the contrast)", res.Placements)
	}
}

// TestReborrowRefusedWhileLenderWaits: while the lender waits — blocked with
// borrowers in the pool, or with its reclaim in progress — no project may
// borrow in the pool, also ranked above the lender; within nominal quota
// jobs still run. Once the lender no longer waits, borrowing is admitted.
func TestReborrowRefusedWhileLenderWaits(t *testing.T) {
	s, p := lendScenario()
	s.Pending = append([]PendingJob{nlpJob("n3", 1, time.Hour)}, s.Pending...)
	idle := mkJob("i1", vocab.TierStandard, 1, "p", 2*time.Hour) // ranks above the lender's reservation
	idle.Project = "idle"
	s.Pending = append(s.Pending, idle)

	res := Plan(s, p, t0)
	if w := waitOf(res, "n3"); w == nil || w.Reason != vocab.ReasonQuotaExhausted ||
		!strings.Contains(w.Detail, "quota of project vision is being returned to it") {
		t.Fatalf("borrowing n3 %+v, want quota_exhausted naming vision", w)
	}
	if pl := placementOf(res, "i1"); pl == nil || pl.Borrowed {
		t.Fatalf("idle's job within nominal: %+v, want placed", pl)
	}

	// The reclaim in progress: the lender's detail gives the grace end.
	s.Pending[1].PreemptionInProgress = []string{"b2"}
	s.Pending[1].PreemptionNoticeAt = t0.Add(-30 * time.Second)
	res = Plan(s, p, t0)
	if w := waitOf(res, "n3"); w == nil || w.Reason != vocab.ReasonQuotaExhausted {
		t.Fatalf("borrowing n3 during the reclaim %+v, want quota_exhausted", w)
	}
	if w := waitOf(res, "lender"); w == nil || w.Reason != vocab.ReasonPreemptionInProgress ||
		!strings.Contains(w.Detail, "lent out to nlp (4000 milli-GPU); it comes back by 2026-12-01T12:01:30Z, the preemption's grace end") {
		t.Fatalf("lender %+v", w)
	}

	// No lender waiting: n3 borrows idle quota.
	s.Pending = s.Pending[:1]
	if pl := placementOf(Plan(s, p, t0), "n3"); pl == nil || !pl.Borrowed {
		t.Fatalf("n3 without a waiting lender: %+v, want placed on borrowed quota", pl)
	}
}

// TestReclaimAntiThrash: the per-victim preemption limit does not shield a
// borrower from a reclaim (b1 and b2 at the limit are still reclaimed), and
// a job at the limit may not borrow again, so reclaims cannot bounce it; it
// may still run within its project's nominal quota.
func TestReclaimAntiThrash(t *testing.T) {
	s, p := lendScenario()
	limit := []time.Time{t0.Add(-3 * time.Hour), t0.Add(-2 * time.Hour), t0.Add(-time.Hour)}
	for i := 1; i < 3; i++ {
		s.Running[i].RecentPreemptions = limit
	}
	res := Plan(s, p, t0)
	if len(res.Preemptions) != 1 || res.Preemptions[0].Victims[0].JobID != "b2" {
		t.Fatalf("proposals %+v, want b2 reclaimed although at the limit", res.Preemptions)
	}
	// For a tier preemption the limit still holds: a key-project job of a
	// project without quota may stop nb1, not b1 or b2.
	s.Pending[0].Project, s.Pending[0].Tier = "ops", vocab.TierKeyProject
	if res := Plan(s, p, t0); len(res.Preemptions) != 1 || len(res.Preemptions[0].Victims) != 1 ||
		res.Preemptions[0].Victims[0].JobID != "nb1" {
		t.Fatalf("tier preemption beside jobs at the limit: %+v, want nb1 only", res.Preemptions)
	}

	// A requeued borrower at the limit, no lender waiting, idle quota free.
	s, p = lendScenario()
	s.Pending = nil
	back := nlpJob("back", 1, time.Hour)
	back.RecentPreemptions = limit
	s.Pending = append(s.Pending, back)
	w := waitOf(Plan(s, p, t0), "back")
	if w == nil || w.Reason != vocab.ReasonQuotaExhausted ||
		!strings.Contains(w.Detail, "job back was preempted 3 times within 86400 s, the anti-thrash limit: it may run within its project's nominal quota but not borrow before 2026-12-02T09:00:00Z") {
		t.Fatalf("borrower at the limit %+v", w)
	}
	s.Pending[0].RecentPreemptions = limit[1:]
	if pl := placementOf(Plan(s, p, t0), "back"); pl == nil || !pl.Borrowed {
		t.Fatalf("below the limit: %+v, want placed on borrowed quota", pl)
	}
	// Within its nominal quota the limit does not keep it waiting.
	s.Pending[0].RecentPreemptions = limit
	s.Quotas[1].NominalMilli = 8000
	if pl := placementOf(Plan(s, p, t0), "back"); pl == nil || pl.Borrowed {
		t.Fatalf("within nominal at the limit: %+v, want placed", pl)
	}
}

// TestLenderWaitsForUnpreemptibleBorrowers: standing gates (recovery
// evidence) still protect a borrower; the lender's detail says who blocks the
// reclaim and when the borrowers are expected to end, and its claim still
// keeps borrowing out of the pool.
func TestLenderWaitsForUnpreemptibleBorrowers(t *testing.T) {
	s, p := lendScenario()
	for i := 1; i < 3; i++ {
		s.Running[i].Recovery.Checkpointable = false
	}
	s.Running[2].RunSeconds = 0
	s.Pending = append([]PendingJob{nlpJob("n3", 1, time.Hour)}, s.Pending...)
	res := Plan(s, p, t0)
	if len(res.Preemptions) != 0 {
		t.Fatalf("proposals %+v, want none (borrowers not checkpointable)", res.Preemptions)
	}
	w := waitOf(res, "lender")
	want := "quota of project vision is lent out to nlp (4000 milli-GPU); no borrower may be preempted for it (job b1: not checkpointable): " +
		"it comes back as the borrowers' jobs end: job b1 expected at 2026-12-01T13:00:00Z, job b2 at an unknown time (no declared run time) (estimates from declared run times)"
	if w == nil || !strings.Contains(w.Detail, want) {
		t.Fatalf("lender detail %+v\nwant %q", w, want)
	}
	if w := waitOf(res, "n3"); w == nil || w.Reason != vocab.ReasonQuotaExhausted {
		t.Fatalf("borrowing n3 %+v, want quota_exhausted", w)
	}
}
