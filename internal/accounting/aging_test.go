package accounting

import (
	"testing"
	"time"

	"github.com/gpugov/gpugov/internal/scheduling"
	"github.com/gpugov/gpugov/internal/vocab"
)

func TestAgingClock(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	at := func(m int) time.Time { return t0.Add(time.Duration(m) * time.Minute) }
	c := AgingClock{AccruedS: 30}.Start(at(0))
	if got := c.EligibleS(at(2)); got != 150 {
		t.Fatalf("running 2 min from 30 s: %v s, want 150", got)
	}
	c = c.OnReason(vocab.ReasonHeld, at(2)) // stops at 150
	if c.Running() || c.EligibleS(at(10)) != 150 {
		t.Fatalf("held from minute 2: running %v, %v s at minute 10, want paused at 150", c.Running(), c.EligibleS(at(10)))
	}
	c = c.OnReason(vocab.ReasonHeld, at(5)).OnReason(vocab.ReasonCapacityBusy, at(10))
	c = c.OnReason(vocab.ReasonFragmented, at(11)) // still earning: the stretch is kept from minute 10
	if got := c.EligibleS(at(12)); got != 270 {
		t.Fatalf("earning again from minute 10: %v s at minute 12, want 270", got)
	}
	if c.Start(at(11)).Since != at(10) || c.Stop(at(12)).Stop(at(20)).AccruedS != 270 {
		t.Fatal("Start of a running clock or Stop of a stopped one changed it")
	}
	if got := c.EligibleS(at(9)); got != 30+120 {
		t.Fatalf("before the stretch began: %v s, want the accrued 150", got)
	}
}

// cycleAt runs Plan at now over one pool of one node with one GPU (busy
// unless free) and applies job j's outcome to its clock as the store does:
// a wait status starts or stops it, a placement stops it. It returns the
// outcome's priority and reason ("" when placed).
func cycleAt(t *testing.T, j *scheduling.PendingJob, c *AgingClock, free bool, now time.Time) (scheduling.Priority, vocab.WaitReason) {
	t.Helper()
	node := scheduling.Node{Name: "n1", Schedulable: true,
		GPUs: []scheduling.GPU{{UUID: "g1", Model: "A100", MemoryMiB: 81920, Healthy: true}}}
	snap := &scheduling.Snapshot{
		Pools: []scheduling.Pool{{Name: "p", Available: true, Stage: vocab.StageAutomate, Nodes: []scheduling.Node{node}}},
	}
	if !free {
		a := scheduling.Allocation{ID: "a-other", JobID: "other", Pool: "p", Node: "n1",
			GPUs: []scheduling.GPUShare{{UUID: "g1", Milli: scheduling.MilliPerGPU}}}
		snap.Allocations = []scheduling.Allocation{a}
		snap.Running = []scheduling.RunningJob{{ID: "other", Project: "x", Queue: "q", Tier: vocab.TierProduction,
			Request: scheduling.ResourceRequest{GPUs: 1, Pool: "p"}, StartedAt: now.Add(-time.Minute), Protected: true,
			Allocation: a}}
	}
	j.AccruedAgingS, j.AgingSince, j.AgingPaused = c.AccruedS, c.Since, !c.Running()
	snap.Pending = []scheduling.PendingJob{*j}
	p := scheduling.DefaultPolicy()
	p.FairShare.Enabled = false
	p.Aging.IntervalSeconds = 60 // one step per minute of eligible wait
	res := scheduling.Plan(snap, &p, now)
	if len(res.Placements) == 1 {
		*c = c.Stop(now)
		return res.Placements[0].Priority, ""
	}
	if len(res.Waiting) != 1 {
		t.Fatalf("at %s: %d placements, %d waits", now, len(res.Placements), len(res.Waiting))
	}
	*c = c.OnReason(res.Waiting[0].Reason, now)
	return res.Waiting[0].Priority, res.Waiting[0].Reason
}

// TestHeldTimeEarnsNoAging is issue 11's scenario: a job held for 8 minutes
// and then released is placed with the credit of its eligible wait only
// (the 3 minutes it waited for busy GPUs), not of the 11 minutes since its
// submit.
func TestHeldTimeEarnsNoAging(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	at := func(m int) time.Time { return t0.Add(time.Duration(m) * time.Minute) }
	j := scheduling.PendingJob{ID: "j", Project: "proj", Queue: "q", Tier: vocab.TierStandard, Held: true,
		Request: scheduling.ResourceRequest{GPUs: 1, Pool: "p"}, SubmitTime: t0, WaitingSince: t0}
	c := AgingClock{}.Start(t0) // the store's submit
	for m := 0; m < 8; m++ {
		if _, r := cycleAt(t, &j, &c, true, at(m)); r != vocab.ReasonHeld {
			t.Fatalf("minute %d: reason %q, want held", m, r)
		}
	}
	j.Held = false // released at minute 8; the GPU is busy until minute 11
	for m := 8; m < 11; m++ {
		pr, r := cycleAt(t, &j, &c, false, at(m))
		if r != vocab.ReasonCapacityBusy || pr.AgingCredit != float64(m-8)*100 {
			t.Fatalf("minute %d: reason %q credit %v, want capacity_busy with %v", m, r, pr.AgingCredit, (m-8)*100)
		}
	}
	pr, r := cycleAt(t, &j, &c, true, at(11))
	if r != "" {
		t.Fatalf("minute 11: reason %q, want placed", r)
	}
	if pr.AgingCredit != 300 {
		t.Fatalf("placed with aging credit %v, want 300 (3 eligible minutes × 100; 1100 would count the hold)", pr.AgingCredit)
	}
	if c.Running() || c.AccruedS != 180 {
		t.Fatalf("after placement: clock %+v, want stopped at 180 s", c)
	}
}

// TestNoMatchingCapacityEarnsNoAging: a request no node fits waits with
// no_matching_capacity and its credit does not grow.
func TestNoMatchingCapacityEarnsNoAging(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	j := scheduling.PendingJob{ID: "j", Project: "proj", Queue: "q", Tier: vocab.TierStandard,
		Request: scheduling.ResourceRequest{GPUs: 2, Pool: "p"}, SubmitTime: t0, WaitingSince: t0}
	c := AgingClock{}.Start(t0)
	for m := 0; m < 30; m++ {
		pr, r := cycleAt(t, &j, &c, true, t0.Add(time.Duration(m)*time.Minute))
		if r != vocab.ReasonNoMatchingCapacity || pr.AgingCredit != 0 {
			t.Fatalf("minute %d: reason %q credit %v, want no_matching_capacity with 0", m, r, pr.AgingCredit)
		}
	}
}
