package queuereport

import (
	"math"
	"testing"

	"github.com/gpugov/gpugov/internal/vocab"
)

// TestPoolShareDeliveredVsMinMax: a queue's time-averaged share of its
// pool's GPUs is reported beside its min_share and max_share, per pool when
// grouped by pool and over every pool's capacity when not; pools without
// capacity and reports not grouped by queue carry none.
func TestPoolShareDeliveredVsMinMax(t *testing.T) {
	exp := inQueue("exp", vocab.TierExperiment)
	std := inQueue("std", vocab.TierStandard)
	in := Input{
		Jobs: []Job{
			testJob("e1", 0, exp, asking(2, 0), started(0), ended(1000)),
			testJob("e2", 0, exp, started(500)), // 1 GPU from 500 to the end (1000)
			testJob("s1", 0, std, asking(4, 0), started(0)),
			testJob("s2", 0, std, inPool("q"), started(0), ended(500)),
		},
		Runs: []Run{
			{JobID: "e1", Start: at(0), End: atp(1000), GPUMilli: 2000},
			{JobID: "e2", Start: at(500), GPUMilli: 1000},
			{JobID: "s1", Start: at(0), GPUMilli: 4000},
			{JobID: "s2", Start: at(0), End: atp(500), GPUMilli: 1000},
		},
		Targets:  []QueueTarget{{Queue: "exp", ServiceShare: 1, MinShare: 0.25, MaxShare: 0.5}, {Queue: "std", ServiceShare: 1}},
		Capacity: []PoolCapacity{{Pool: "p", GPUs: 10}, {Pool: "q", GPUs: 10}},
	}
	opts := Options{Window: Window{From: at(0), To: at(1000)}, Now: at(2000), GroupBy: []string{KeyQueue, KeyPool}}
	r, err := Compute(in, opts)
	if err != nil {
		t.Fatal(err)
	}
	want := map[[2]string]float64{
		{"exp", "p"}: 2500.0 / (10 * 1000), // 2 GPUs × 1000 s + 1 GPU × 500 s
		{"std", "p"}: 4000.0 / (10 * 1000),
		{"std", "q"}: 500.0 / (10 * 1000),
	}
	if len(r.Groups) != len(want) {
		t.Fatalf("%d groups, want %d: %+v", len(r.Groups), len(want), r.Groups)
	}
	for _, g := range r.Groups {
		k := [2]string{g.Key[KeyQueue], g.Key[KeyPool]}
		if g.PoolShare == nil || math.Abs(*g.PoolShare-want[k]) > 1e-12 {
			t.Errorf("%v: pool_share %v, want %v", k, g.PoolShare, want[k])
		}
		if k[0] == "exp" {
			if g.MinShare == nil || *g.MinShare != 0.25 || g.MaxShare == nil || *g.MaxShare != 0.5 {
				t.Errorf("exp: min %v max %v, want 0.25 and 0.5", g.MinShare, g.MaxShare)
			}
		} else if g.MinShare != nil || g.MaxShare != nil {
			t.Errorf("%v: min %v max %v, want none", k, g.MinShare, g.MaxShare)
		}
	}
	// Grouped by queue alone: over both pools' 20 GPUs.
	opts.GroupBy = []string{KeyQueue}
	if r, err = Compute(in, opts); err != nil {
		t.Fatal(err)
	}
	for _, g := range r.Groups {
		w := map[string]float64{"exp": 2500.0 / 20000, "std": 4500.0 / 20000}[g.Key[KeyQueue]]
		if g.PoolShare == nil || math.Abs(*g.PoolShare-w) > 1e-12 {
			t.Errorf("%s over all pools: pool_share %v, want %v", g.Key[KeyQueue], g.PoolShare, w)
		}
	}
	// Without pool q's capacity its group has no pool share; without the
	// queue key no group has one.
	in.Capacity = in.Capacity[:1]
	opts.GroupBy = []string{KeyQueue, KeyPool}
	r, _ = Compute(in, opts)
	for _, g := range r.Groups {
		if (g.Key[KeyPool] == "q") != (g.PoolShare == nil) {
			t.Errorf("%v: pool_share %v with capacity only for p", g.Key, g.PoolShare)
		}
	}
	opts.GroupBy = []string{KeyTier}
	r, _ = Compute(in, opts)
	for _, g := range r.Groups {
		if g.PoolShare != nil || g.MinShare != nil {
			t.Errorf("grouped by tier: %v has pool shares", g.Key)
		}
	}
	in.Targets[0].MinShare = 1.5
	if _, err := Compute(in, opts); err == nil {
		t.Error("min_share 1.5 accepted, want an error")
	}
}

// TestProjectShareVsFairShareTarget: grouped by project, each row carries
// its whole project's share of the report's GPU-seconds and its fair-share
// entitlement from the weights (an unlisted project weighs 1).
func TestProjectShareVsFairShareTarget(t *testing.T) {
	in := Input{
		Jobs: []Job{
			testJob("v1", 0, ofProject("vision"), asking(3, 0), started(0)),
			testJob("v2", 0, ofProject("vision"), inPool("q"), started(0)),
			testJob("n1", 0, ofProject("nlp"), started(0)),
		},
		Runs: []Run{
			{JobID: "v1", Start: at(0), GPUMilli: 3000},
			{JobID: "v2", Start: at(0), GPUMilli: 1000},
			{JobID: "n1", Start: at(0), GPUMilli: 1000},
		},
		ProjectWeights: map[string]float64{"vision": 3},
	}
	opts := Options{Window: Window{From: at(0), To: at(100)}, Now: at(100), GroupBy: []string{KeyPool, KeyProject}}
	r, err := Compute(in, opts)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][2]float64{"vision": {0.8, 0.75}, "nlp": {0.2, 0.25}} // delivered 400 of 500 GPU-s; weights 3:1
	for _, g := range r.Groups {
		w := want[g.Key[KeyProject]]
		if g.ProjectShare == nil || math.Abs(*g.ProjectShare-w[0]) > 1e-12 || g.ProjectTargetShare == nil || *g.ProjectTargetShare != w[1] {
			t.Errorf("%v: project share %v target %v, want %v", g.Key, g.ProjectShare, g.ProjectTargetShare, w)
		}
	}
	opts.GroupBy = []string{KeyPool}
	r, _ = Compute(in, opts)
	for _, g := range r.Groups {
		if g.ProjectShare != nil || g.ProjectTargetShare != nil {
			t.Errorf("not grouped by project: %v has project shares", g.Key)
		}
	}
}
