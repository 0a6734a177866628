package scheduling

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/gpugov/gpugov/internal/vocab"
)

// shareStream is a pure scenario over repeated Plan calls: a saturated pool
// of 16 GPUs (two nodes of 8) full of one-GPU key-project jobs that end two
// per cycle, a key-project stream that always has more jobs waiting than
// GPUs free, and, from cycle demandAt on, 8 experiment jobs; the jobs
// placed during the scenario outlast it. It
// returns how many GPUs the experiment queue holds after each cycle.
func shareStream(t *testing.T, minShare float64, cycles, demandAt int) []int {
	t.Helper()
	pool := mkPool("p", mkNode("n1", 8, "A100", 81920, 0), mkNode("n2", 8, "A100", 81920, 0))
	queues := []Queue{{Name: "kp", Tier: vocab.TierKeyProject}, {Name: "exp", Tier: vocab.TierExperiment, MinShare: minShare}}
	type run struct {
		r   RunningJob
		end int // the cycle before which it ends
	}
	var running []run
	for i := range 16 {
		node := pool.Nodes[i/8]
		r := mkRunning(fmt.Sprintf("kp-run%02d", i), vocab.TierKeyProject, "p", node.Name, time.Hour, node.GPUs[i%8].UUID)
		r.Queue = "kp"
		running = append(running, run{r, 1 + i/2}) // two end before each cycle
	}
	var pending []PendingJob
	next := 0
	addKP := func(n int, now time.Time) {
		for range n {
			j := mkJob(fmt.Sprintf("kp-%03d", next), vocab.TierKeyProject, 1, "p", 0)
			j.Queue, j.SubmitTime, j.WaitingSince = "kp", now, now
			pending = append(pending, j)
			next++
		}
	}
	addKP(8, t0)
	held := make([]int, cycles)
	p := testPolicy()
	p.Preemption.Enabled = false
	for cyc := 1; cyc <= cycles; cyc++ {
		now := t0.Add(time.Duration(cyc) * time.Minute)
		if cyc == demandAt {
			for i := range 8 {
				j := mkJob(fmt.Sprintf("exp-%d", i), vocab.TierExperiment, 1, "p", 0)
				j.Queue, j.SubmitTime, j.WaitingSince = "exp", now, now
				pending = append(pending, j)
			}
		}
		addKP(2, now) // the key-project stream keeps the pool saturated
		kept := running[:0]
		for _, r := range running {
			if r.end > cyc {
				kept = append(kept, r)
			}
		}
		running = kept
		s := &Snapshot{Pools: []Pool{pool}, Queues: queues, Pending: pending}
		for _, r := range running {
			withRunning(s, r.r)
		}
		res := Plan(s, p, now)
		placed := map[string]Placement{}
		for _, pl := range res.Placements {
			placed[pl.JobID] = pl
		}
		left := pending[:0]
		for _, j := range pending {
			pl, ok := placed[j.ID]
			if !ok {
				left = append(left, j)
				continue
			}
			r := RunningJob{ID: j.ID, Project: j.Project, Queue: j.Queue, Tier: j.Tier, Request: j.Request, StartedAt: now,
				Allocation: Allocation{ID: "alloc-" + j.ID, JobID: j.ID, Pool: "p", Node: pl.Node, GPUs: pl.GPUs}}
			running = append(running, run{r, cycles + 1}) // new work outlasts the scenario
		}
		pending = left
		for _, r := range running {
			if r.r.Queue == "exp" {
				held[cyc-1] += len(r.r.Allocation.GPUs)
			}
		}
	}
	return held
}

// TestMinShareGuaranteesLowQueue: with min_share 0.25 the experiment queue
// gets the first GPUs freed after its demand arrives, in the first cycle,
// until it holds its 4 guaranteed GPUs, and then no more while key-project
// work waits; the same stream without min_share starves it.
func TestMinShareGuaranteesLowQueue(t *testing.T) {
	with := shareStream(t, 0.25, 8, 3)
	// Two GPUs free per cycle: cycles 1-2 have no experiment demand, 3 and 4
	// serve it first, then the queue stays at its minimum.
	if want := []int{0, 0, 2, 4, 4, 4, 4, 4}; fmt.Sprint(with) != fmt.Sprint(want) {
		t.Errorf("min_share 0.25: experiment GPUs per cycle %v, want %v", with, want)
	}
	without := shareStream(t, 0, 8, 3)
	for cyc, n := range without {
		if n != 0 {
			t.Fatalf("no min_share: experiment holds %d GPUs after cycle %d, want 0 (starved by the key-project stream): %v", n, cyc+1, without)
		}
	}
}

// TestMinShareOrderAndNote checks the order and the explanation: the job of
// a queue below its minimum is served before a higher-scored key-project
// job, after production, and carries the boost note; a job of the same
// queue past the minimum is served by score again.
func TestMinShareOrderAndNote(t *testing.T) {
	n := mkNode("n1", 8, "A100", 81920, 0)
	prod := mkJob("prod", vocab.TierProduction, 1, "p", time.Minute)
	prod.Queue = "prod"
	kp := mkJob("kp", vocab.TierKeyProject, 1, "p", time.Hour)
	kp.Queue = "kp"
	e1 := mkJob("e1", vocab.TierExperiment, 2, "p", time.Minute)
	e2 := mkJob("e2", vocab.TierExperiment, 1, "p", 0)
	e1.Queue, e2.Queue = "exp", "exp"
	// Four GPUs are busy with key-project work: four free for five asked.
	s := &Snapshot{Pools: []Pool{mkPool("p", n)}, Pending: []PendingJob{kp, e1, e2, prod},
		Queues: []Queue{{Name: "prod", Tier: vocab.TierProduction, Protected: true}, {Name: "kp", Tier: vocab.TierKeyProject},
			{Name: "exp", Tier: vocab.TierExperiment, MinShare: 0.25}}}
	for i := range 4 {
		r := mkRunning(fmt.Sprintf("busy%d", i), vocab.TierKeyProject, "p", "n1", time.Hour, n.GPUs[i].UUID)
		r.Queue = "kp"
		withRunning(s, r)
	}
	res := Plan(s, testPolicy(), t0)
	ranks := map[string]int{}
	for _, pl := range res.Placements {
		ranks[pl.JobID] = pl.Rank
	}
	for _, w := range res.Waiting {
		ranks[w.JobID] = w.Rank
	}
	if ranks["prod"] != 1 || ranks["e1"] != 2 || ranks["kp"] != 3 || ranks["e2"] != 4 {
		t.Fatalf("serving order %v, want prod 1, e1 2 (below its minimum), kp 3, e2 4 (minimum reached)", ranks)
	}
	pl := placementOf(res, "e1")
	if pl == nil {
		t.Fatalf("e1 not placed: %+v", res.Waiting)
	}
	if want := "queue exp below its min_share 0.25 of pool p: 2 of 8 GPUs guaranteed, 0 in use"; pl.Priority.MinShareBoost != want {
		t.Errorf("boost note %q, want %q", pl.Priority.MinShareBoost, want)
	}
	if placementOf(res, "kp") == nil || placementOf(res, "prod") == nil {
		t.Errorf("prod and kp should fit on the two GPUs left: %+v", res.Waiting)
	}
	w := waitOf(res, "e2")
	if w == nil || w.Reason != vocab.ReasonCapacityBusy || w.Priority.MinShareBoost != "" {
		t.Errorf("e2 %+v, want capacity_busy served by score (no boost)", w)
	}
}

// TestMinShareKeepsProductionAndPreemptionGates: production is served before
// a queue below its minimum, a boosted experiment job proposes no
// preemption (min_share orders, it does not preempt), and a production job
// may still preempt the queue below its minimum under the usual gates.
func TestMinShareKeepsProductionAndPreemptionGates(t *testing.T) {
	n := mkNode("n1", 4, "A100", 81920, 0)
	s := &Snapshot{Pools: []Pool{mkPool("p", n)},
		Queues: []Queue{{Name: "prod", Tier: vocab.TierProduction, Protected: true}, {Name: "std", Tier: vocab.TierStandard},
			{Name: "exp", Tier: vocab.TierExperiment, MinShare: 0.5}}}
	// Three standard jobs and one experiment job fill the pool; the
	// experiment queue holds 1 of its 2 guaranteed GPUs.
	for i := range 3 {
		r := mkRunning(fmt.Sprintf("std%d", i), vocab.TierStandard, "p", "n1", time.Hour, n.GPUs[i].UUID)
		r.Queue = "std"
		withRunning(s, r)
	}
	ex := mkRunning("exp-run", vocab.TierExperiment, "p", "n1", time.Hour, n.GPUs[3].UUID)
	ex.Queue = "exp"
	withRunning(s, ex)
	e := mkJob("e", vocab.TierExperiment, 1, "p", time.Hour)
	e.Queue = "exp"
	prod := mkJob("prod", vocab.TierProduction, 2, "p", 0)
	prod.Queue = "prod"
	s.Pending = []PendingJob{e, prod}
	res := Plan(s, testPolicy(), t0)
	pw, ew := waitOf(res, "prod"), waitOf(res, "e")
	if pw == nil || ew == nil || pw.Rank != 1 || ew.Rank != 2 {
		t.Fatalf("waits %+v, want prod served first, then e", res.Waiting)
	}
	if ew.Priority.MinShareBoost == "" || ew.Reason != vocab.ReasonCapacityBusy {
		t.Errorf("e %+v, want capacity_busy with the boost note", ew)
	}
	for _, pr := range res.Preemptions {
		if pr.ForJobID == "e" {
			t.Errorf("boosted experiment job proposed preemption %+v; min_share must not preempt", pr)
		}
	}
	var forProd *PreemptionProposal
	for i := range res.Preemptions {
		if res.Preemptions[i].ForJobID == "prod" {
			forProd = &res.Preemptions[i]
		}
	}
	if forProd == nil {
		t.Fatalf("production job proposed no preemption: %+v", res.Preemptions)
	}
	// The same snapshot without shares gives production the same proposal.
	s.Queues[2].MinShare = 0
	plain := Plan(s, testPolicy(), t0)
	var plainProd *PreemptionProposal
	for i := range plain.Preemptions {
		if plain.Preemptions[i].ForJobID == "prod" {
			plainProd = &plain.Preemptions[i]
		}
	}
	if plainProd == nil || fmt.Sprint(plainProd.Victims) != fmt.Sprint(forProd.Victims) {
		t.Errorf("production's proposal with min_share %+v, without %+v: want the same victims", forProd, plainProd)
	}
}

// TestMaxShareCaps checks the cap: the queue's jobs are placed up to its
// max_share of the pool, then wait with quota_exhausted naming the cap;
// a request larger than the cap says waiting will not help.
func TestMaxShareCaps(t *testing.T) {
	n1, n2 := mkNode("n1", 8, "A100", 81920, 0), mkNode("n2", 8, "A100", 81920, 0)
	s := &Snapshot{Pools: []Pool{mkPool("p", n1, n2)},
		Queues: []Queue{{Name: "experiment", Tier: vocab.TierExperiment, MaxShare: 0.25}}}
	for i := range 3 {
		r := mkRunning(fmt.Sprintf("run%d", i), vocab.TierExperiment, "p", "n1", time.Hour, n1.GPUs[i].UUID)
		r.Queue = "experiment"
		withRunning(s, r)
	}
	for i := range 3 {
		j := mkJob(fmt.Sprintf("e%d", i), vocab.TierExperiment, 1, "p", time.Duration(3-i)*time.Minute)
		j.Queue = "experiment"
		s.Pending = append(s.Pending, j)
	}
	big := mkJob("big", vocab.TierExperiment, 5, "p", 0)
	big.Queue = "experiment"
	other := mkJob("other", vocab.TierExperiment, 4, "p", 0)
	other.Queue = "elsewhere"
	s.Pending = append(s.Pending, big, other)
	res := Plan(s, testPolicy(), t0)
	if placementOf(res, "e0") == nil || placementOf(res, "other") == nil {
		t.Fatalf("e0 and the uncapped queue's job should be placed: %+v", res.Waiting)
	}
	for _, id := range []string{"e1", "e2"} {
		w := waitOf(res, id)
		want := "queue experiment at its max_share 0.25 of pool p: 4 of 16 GPUs; the queue holds 4 GPUs there and the job needs 1 more"
		if w == nil || w.Reason != vocab.ReasonQuotaExhausted || w.Detail != want {
			t.Errorf("%s: %+v, want quota_exhausted %q", id, w, want)
		}
		if w != nil && w.ReEvaluate != "when queue experiment holds at most 3 GPUs in pool p or its max_share is raised" {
			t.Errorf("%s re-evaluation %q", id, w.ReEvaluate)
		}
	}
	w := waitOf(res, "big")
	if w == nil || w.Reason != vocab.ReasonQuotaExhausted || !strings.Contains(w.Detail, "the request alone is larger than the cap") ||
		!strings.Contains(w.ReEvaluate, "waiting will not help") {
		t.Errorf("big: %+v, want quota_exhausted saying the request alone exceeds the cap", w)
	}
	// Without the cap every job fits.
	s.Queues[0].MaxShare = 0
	if res := Plan(s, testPolicy(), t0); len(res.Waiting) != 0 {
		t.Errorf("no cap: waiting %+v, want none", res.Waiting)
	}
}

// TestShareUsesUsableGPUs: the shares are of the pool's usable GPUs: a
// cordoned node's GPUs are not in the base.
func TestShareUsesUsableGPUs(t *testing.T) {
	n1, n2 := mkNode("n1", 4, "A100", 81920, 0), mkNode("n2", 4, "A100", 81920, 0)
	n2.Schedulable = false
	j := mkJob("j", vocab.TierExperiment, 2, "p", 0)
	j.Queue = "exp"
	s := &Snapshot{Pools: []Pool{mkPool("p", n1, n2)}, Pending: []PendingJob{j},
		Queues: []Queue{{Name: "exp", Tier: vocab.TierExperiment, MaxShare: 0.25}}}
	w := waitOf(Plan(s, testPolicy(), t0), "j")
	if w == nil || !strings.Contains(w.Detail, "max_share 0.25 of pool p: 1 of 4 GPUs") {
		t.Errorf("wait %+v, want the cap over the 4 usable GPUs", w)
	}
}
