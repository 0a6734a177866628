package scheduling

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/gpugov/gpugov/internal/vocab"
)

// TestRankIsPerPool checks that a wait status's and a placement's rank count
// the jobs of the job's own pool only, whatever the other pools hold.
func TestRankIsPerPool(t *testing.T) {
	p := testPolicy()
	p.Preemption.Enabled = false
	a, b := mkNode("a1", 1, "H100", 81920, 0), mkNode("b1", 1, "H100", 81920, 0)
	s := &Snapshot{Pools: []Pool{mkPool("a", a), mkPool("b", b)}, Pending: []PendingJob{
		mkJob("a-prod", vocab.TierProduction, 1, "a", 0),
		mkJob("b-key", vocab.TierKeyProject, 1, "b", 0),
		mkJob("a-std", vocab.TierStandard, 1, "a", 0),
		mkJob("b-exp", vocab.TierExperiment, 1, "b", 0),
		mkJob("a-exp", vocab.TierExperiment, 1, "a", 0),
	}}
	res := Plan(s, p, t0)
	for id, want := range map[string]int{"a-prod": 1, "b-key": 1, "a-std": 2, "b-exp": 2, "a-exp": 3} {
		got := 0
		if pl := placementOf(res, id); pl != nil {
			got = pl.Rank
		} else if w := waitOf(res, id); w != nil {
			got = w.Rank
		}
		if got != want {
			t.Errorf("%s: rank %d, want %d in its pool", id, got, want)
		}
	}
}

// TestNextEvaluation checks the choice of a status's next re-evaluation: the
// earliest of the aging overtake and the first future expected release
// (marked as an estimate), else the timer, else nothing.
func TestNextEvaluation(t *testing.T) {
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	timer := at(5)
	rel := func(ends ...int) []ExpectedRelease {
		var out []ExpectedRelease
		for i, e := range ends {
			out = append(out, ExpectedRelease{JobID: fmt.Sprintf("r%d", i), Milli: 1000, ExpectedEnd: at(e)})
		}
		return out
	}
	cases := []struct {
		name string
		w    WaitStatus
		tm   time.Time
		want NextEvaluation
	}{
		{"nothing known: the timer", WaitStatus{}, timer, NextEvaluation{At: timer, Kind: vocab.NextEvalTimer}},
		{"no timer period: unknown", WaitStatus{}, time.Time{}, NextEvaluation{}},
		{"overtake", WaitStatus{Overtake: &Overtake{At: at(600)}}, timer,
			NextEvaluation{At: at(600), Kind: vocab.NextEvalAgingOvertake}},
		{"never overtakes: the timer", WaitStatus{Overtake: &Overtake{Never: true}}, timer,
			NextEvaluation{At: timer, Kind: vocab.NextEvalTimer}},
		{"release before the overtake", WaitStatus{Overtake: &Overtake{At: at(600)}, Releases: rel(300, 900)}, timer,
			NextEvaluation{At: at(300), Kind: vocab.NextEvalReleaseEstimate, Estimate: true}},
		{"overtake before the release", WaitStatus{Overtake: &Overtake{At: at(200)}, Releases: rel(300)}, timer,
			NextEvaluation{At: at(200), Kind: vocab.NextEvalAgingOvertake}},
		{"overdue releases are skipped", WaitStatus{Releases: rel(-60, 0, 120)}, timer,
			NextEvaluation{At: at(120), Kind: vocab.NextEvalReleaseEstimate, Estimate: true}},
		{"only overdue releases: the timer", WaitStatus{Releases: rel(-60)}, timer,
			NextEvaluation{At: timer, Kind: vocab.NextEvalTimer}},
	}
	for _, c := range cases {
		if got := nextEvaluation(&c.w, t0, c.tm); got != c.want {
			t.Errorf("%s: %+v, want %+v", c.name, got, c.want)
		}
	}
}

// streamPolicy is testPolicy (tiers 10,000 apart, 100 points per 10 min,
// cap 3,000) without preemption; queues maps queue names to their aging.
func streamPolicy(queues map[string]QueueAging) *Policy {
	p := testPolicy()
	p.Preemption.Enabled = false
	p.Aging.Queues = queues
	return p
}

// TestOvertakeTimeIsExact checks the overtake time against Plan itself: a
// standard job whose queue may age into key-project (cap 15,000) behind a
// key-project job (aging too, capped at 3,000) ranks second one second
// before the computed time and first at it.
func TestOvertakeTimeIsExact(t *testing.T) {
	p := streamPolicy(map[string]QueueAging{"q-standard": {HasCap: true, CapPoints: 15000, HasCeiling: true,
		CeilingTier: vocab.TierKeyProject}})
	n := mkNode("n1", 1, "H100", 81920, 0)
	s := &Snapshot{Pools: []Pool{mkPool("p", n)}, CycleIntervalSeconds: 5, Pending: []PendingJob{
		mkJob("std", vocab.TierStandard, 1, "p", 0), mkJob("key", vocab.TierKeyProject, 1, "p", 0)}}
	withRunning(s, mkRunning("holder", vocab.TierProduction, "p", "n1", time.Hour, "n1-gpu0"))
	w := waitOf(Plan(s, p, t0), "std")
	ot := w.Overtake
	// Both gain 100 per 10 min until key caps at 3,000 (300 min); std
	// then needs 13,000 > 10,000 + credit: it passes at 13,100 (1,310 min;
	// at 13,000 the tie goes to key, the smaller ID at one submit time).
	want := t0.Add(1310 * time.Minute)
	if ot == nil || ot.Never || !ot.At.Equal(want) || ot.AheadJobID != "key" || ot.GapPoints != 10000 ||
		ot.BoundPoints != 15000 || ot.AheadHeadroomPoints != 3000 {
		t.Fatalf("overtake %+v, want at %s behind key by 10000", ot, want)
	}
	if w.Next != (NextEvaluation{At: want, Kind: vocab.NextEvalAgingOvertake}) {
		t.Fatalf("next %+v", w.Next)
	}
	if w := waitOf(Plan(s, p, want.Add(-time.Second)), "std"); w.Rank != 2 {
		t.Fatalf("one second before the overtake: rank %d, want 2", w.Rank)
	}
	if w := waitOf(Plan(s, p, want), "std"); w.Rank != 1 {
		t.Fatalf("at the overtake: rank %d, want 1", w.Rank)
	}
}

// streamRun runs a 1-GPU pool where every 10 minutes the running job ends,
// a new key-project job arrives (two more wait from the start) and Plan
// places the top-ranked job, for steps cycles. It returns the step at which
// job "std" (standard, waiting from the start) was placed (−1: never), its
// wait status of the first cycle, and the last one it had.
func streamRun(t *testing.T, p *Policy, steps int) (placedAt int, first, last *WaitStatus) {
	t.Helper()
	const interval = 10 * time.Minute
	n := mkNode("n1", 1, "H100", 81920, 0)
	pending := []PendingJob{mkJob("std", vocab.TierStandard, 1, "p", 0),
		mkJob("kp-init-a", vocab.TierKeyProject, 1, "p", 0), mkJob("kp-init-b", vocab.TierKeyProject, 1, "p", 0)}
	for k := range steps {
		now := t0.Add(time.Duration(k) * interval)
		arrival := mkJob(fmt.Sprintf("kp-%03d", k), vocab.TierKeyProject, 1, "p", 0)
		arrival.SubmitTime, arrival.WaitingSince = now, now
		pending = append(pending, arrival)
		res := Plan(&Snapshot{Pools: []Pool{mkPool("p", n)}, Pending: pending, CycleIntervalSeconds: 5}, p, now)
		if len(res.Placements) != 1 {
			t.Fatalf("step %d: %d placements, want 1", k, len(res.Placements))
		}
		placed := res.Placements[0].JobID
		if placed == "std" {
			return k, first, last
		}
		w := waitOf(res, "std")
		if first == nil {
			first = w
		}
		last = w
		kept := pending[:0]
		for _, j := range pending {
			if j.ID != placed {
				kept = append(kept, j)
			}
		}
		pending = kept
	}
	return -1, first, last
}

// TestAgingCeilingOvertakesStream is item 7's scenario: a standard job whose
// queue has aging ceiling key-project and a 15,000-point cap overtakes a
// stream of key-project work, by the time the first cycle computed against
// the job directly ahead (which ages too); without the ceiling (the
// policy's 3,000-point cap) it never does and its wait says "never" with the
// numbers; with a 15,000 cap but its own tier as ceiling it never does either.
func TestAgingCeilingOvertakesStream(t *testing.T) {
	const steps = 300
	withCeiling := streamPolicy(map[string]QueueAging{"q-standard": {HasCap: true, CapPoints: 15000, HasCeiling: true,
		CeilingTier: vocab.TierKeyProject}})
	placedAt, first, _ := streamRun(t, withCeiling, steps)
	if first == nil || first.Overtake == nil || first.Overtake.Never {
		t.Fatalf("first cycle: %+v", first)
	}
	bound := first.Overtake.At
	if placedAt < 0 {
		t.Fatalf("with ceiling key-project: never placed in %d cycles; first cycle promised %s", steps, bound)
	}
	placedTime := t0.Add(time.Duration(placedAt) * 10 * time.Minute)
	// The key-project jobs ahead wait about two cycles, so they hold at most
	// 200 points: std (10,000 + 100 per cycle) reaches 20,200 at cycle 102,
	// and the tie goes to it (submitted earlier).
	if placedAt != 102 || placedTime.After(bound) {
		t.Fatalf("placed at cycle %d (%s), want 102 and not after the computed %s", placedAt, placedTime, bound)
	}

	placedAt, _, last := streamRun(t, streamPolicy(nil), steps)
	if placedAt >= 0 {
		t.Fatalf("without the ceiling: placed at cycle %d, want never", placedAt)
	}
	ot := last.Overtake
	if ot == nil || !ot.Never || ot.BoundPoints != 3000 || ot.HeadroomPoints != 0 || ot.GapPoints < 7000 {
		t.Fatalf("without the ceiling: overtake %+v, want never with a 3,000 bound", ot)
	}
	if !strings.Contains(last.ReEvaluate, "aging never lifts rank above job "+ot.AheadJobID) ||
		strings.Contains(last.ReEvaluate, "when aging lifts") || last.Next.Kind != vocab.NextEvalTimer {
		t.Fatalf("without the ceiling: re-evaluate %q, next %+v", last.ReEvaluate, last.Next)
	}

	ownTier := streamPolicy(map[string]QueueAging{"q-standard": {HasCap: true, CapPoints: 15000, HasCeiling: true,
		CeilingTier: vocab.TierStandard}})
	placedAt, _, last = streamRun(t, ownTier, steps)
	if placedAt >= 0 || last.Overtake == nil || !last.Overtake.Never || last.Overtake.BoundPoints != 9999 {
		t.Fatalf("ceiling standard: placed at %d, overtake %+v; want never, bound 9,999 (below key-project's base)",
			placedAt, last.Overtake)
	}
}

// TestNextEvaluationFromRelease checks the release estimate through Plan: a
// capacity_busy job behind no one, whose GPU a running job with a declared
// run time holds, is next re-evaluated at that job's expected end, marked as
// an estimate; with the end past (overdue), at the next timer cycle.
func TestNextEvaluationFromRelease(t *testing.T) {
	p := testPolicy()
	p.Preemption.Enabled = false
	n := mkNode("n1", 1, "H100", 81920, 0)
	s := &Snapshot{Pools: []Pool{mkPool("p", n)}, CycleIntervalSeconds: 5,
		Pending: []PendingJob{mkJob("me", vocab.TierStandard, 1, "p", 0)}}
	r := mkRunning("holder", vocab.TierStandard, "p", "n1", 10*time.Minute, "n1-gpu0")
	r.RunSeconds = 3600
	withRunning(s, r)
	w := waitOf(Plan(s, p, t0), "me")
	want := NextEvaluation{At: t0.Add(50 * time.Minute), Kind: vocab.NextEvalReleaseEstimate, Estimate: true}
	if w == nil || w.Reason != vocab.ReasonCapacityBusy || len(w.Releases) == 0 || w.Next != want {
		t.Fatalf("status %+v, want next %+v", w, want)
	}
	s.Running[0].RunSeconds = 300 // ended 5 minutes ago by its declared run time
	if w := waitOf(Plan(s, p, t0), "me"); w.Next != (NextEvaluation{At: t0.Add(5 * time.Second), Kind: vocab.NextEvalTimer}) {
		t.Fatalf("overdue release: next %+v, want the timer", w.Next)
	}
}
