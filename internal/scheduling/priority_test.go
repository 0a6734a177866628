package scheduling

import (
	"math"
	"math/rand"
	"testing"
	"time"

	"github.com/gpugov/gpugov/internal/vocab"
)

// TestAging checks the step rule, the cap and the production ceiling.
func TestAging(t *testing.T) {
	tests := []struct {
		name       string
		tier       vocab.Tier
		wait       time.Duration
		accrued    float64
		tierBase   map[vocab.Tier]float64
		wantCredit float64
		wantCapped bool
	}{
		{"under one interval", vocab.TierStandard, 9 * time.Minute, 0, nil, 0, false},
		{"full steps only", vocab.TierStandard, 25 * time.Minute, 0, nil, 200, false},
		{"accrued wait counts", vocab.TierStandard, 5 * time.Minute, 300, nil, 100, false},
		{"cap", vocab.TierStandard, 10 * time.Hour, 0, nil, 3000, true},
		{"exactly at cap", vocab.TierStandard, 300 * time.Minute, 0, nil, 3000, false},
		{"production ceiling", vocab.TierKeyProject, 10 * time.Hour, 0,
			map[vocab.Tier]float64{vocab.TierStandard: 10000, vocab.TierKeyProject: 20000, vocab.TierProduction: 21000}, 999, true},
		{"production jobs age to the cap", vocab.TierProduction, 10 * time.Hour, 0, nil, 3000, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := testPolicy()
			if tc.tierBase != nil {
				p.TierBase = tc.tierBase
			}
			j := mkJob("j", tc.tier, 1, "p", tc.wait)
			j.AccruedAgingS = tc.accrued
			pr, _ := newPriorityRules(p, nil, t0).priority(&j, 1)
			if pr.AgingCredit != tc.wantCredit || pr.AgingCapped != tc.wantCapped {
				t.Fatalf("credit %v capped %v, want %v %v", pr.AgingCredit, pr.AgingCapped, tc.wantCredit, tc.wantCapped)
			}
			if pr.Score != pr.TierBase+pr.AgingCredit+pr.FairShare {
				t.Fatalf("score %v is not the sum of its parts %+v", pr.Score, pr)
			}
			if tc.tier != vocab.TierProduction && pr.Score >= p.TierBase[vocab.TierProduction] {
				t.Fatalf("score %v reaches the production base", pr.Score)
			}
		})
	}
}

// TestAgingDisabled checks that a disabled or zero-cap rule gives no credit.
func TestAgingDisabled(t *testing.T) {
	j := mkJob("j", vocab.TierStandard, 1, "p", 10*time.Hour)
	p := testPolicy()
	p.Aging.Enabled = false
	if pr, _ := newPriorityRules(p, nil, t0).priority(&j, 1); pr.AgingCredit != 0 {
		t.Fatalf("disabled aging gave %v", pr.AgingCredit)
	}
	p = testPolicy()
	p.Aging.CapPoints = 0
	if pr, _ := newPriorityRules(p, nil, t0).priority(&j, 1); pr.AgingCredit != 0 || !pr.AgingCapped {
		t.Fatalf("zero cap gave %+v", pr)
	}
}

// TestFairShare checks Slurm's 2^(-U/S) with equal and explicit shares, and
// decay to now.
func TestFairShare(t *testing.T) {
	fs := FairSharePolicy{Enabled: true, Weight: 1000, HalfLifeSeconds: 3600}
	usage := []ProjectUsage{
		{Project: "a", DecayedGPUSeconds: 3000, AsOf: t0},
		{Project: "b", DecayedGPUSeconds: 2000, AsOf: t0.Add(-time.Hour)}, // decays to 1000
	}
	f := fairShareFactors(usage, &fs, t0)
	// U(a) = 3000/4000 = 0.75, S = 1/2 → 2^-1.5; U(b) = 0.25 → 2^-0.5.
	if !near(f["a"], math.Exp2(-1.5)) || !near(f["b"], math.Exp2(-0.5)) {
		t.Fatalf("factors %v", f)
	}
	usage[0].Share, usage[1].Share = 0.75, 0.25
	f = fairShareFactors(usage, &fs, t0)
	if !near(f["a"], 0.5) || !near(f["b"], 0.5) {
		t.Fatalf("factors with shares %v", f)
	}
	p := testPolicy()
	p.FairShare = fs
	rules := newPriorityRules(p, usage, t0)
	j := mkJob("j", vocab.TierStandard, 1, "p", 0)
	j.Project = "c" // no usage: factor 1
	pr, _ := rules.priority(&j, rules.fairOf(j.Project))
	if pr.FairFactor != 1 || pr.FairShare != 1000 || pr.Score != 11000 {
		t.Fatalf("unknown project %+v", pr)
	}
	j.Project = "a"
	pr, _ = rules.priority(&j, rules.fairOf(j.Project))
	if !near(pr.FairShare, 500) || !near(pr.Score, 10500) {
		t.Fatalf("project a %+v", pr)
	}
}

// TestDecayUsage checks the half-life rule and its guards.
func TestDecayUsage(t *testing.T) {
	if got := DecayUsage(1000, t0, t0.Add(2*time.Hour), 3600); !near(got, 250) {
		t.Fatalf("two half-lives: %v", got)
	}
	if got := DecayUsage(1000, t0, t0.Add(-time.Hour), 3600); got != 1000 {
		t.Fatalf("backwards: %v", got)
	}
	if got := DecayUsage(1000, t0, t0.Add(time.Hour), 0); got != 1000 {
		t.Fatalf("no half-life: %v", got)
	}
}

// TestRankTieBreak checks that equal scores rank by submit time, then ID.
func TestRankTieBreak(t *testing.T) {
	n := mkNode("n1", 1, "H100", 81920, 0)
	a := mkJob("a", vocab.TierStandard, 1, "p", 5*time.Minute)
	b := mkJob("b", vocab.TierStandard, 1, "p", 8*time.Minute)
	c := mkJob("c", vocab.TierStandard, 1, "p", 8*time.Minute)
	s := &Snapshot{Pools: []Pool{mkPool("p", n)}, Pending: []PendingJob{c, a, b}}
	res := Plan(s, testPolicy(), t0)
	if placementOf(res, "b") == nil || placementOf(res, "b").Rank != 1 ||
		waitOf(res, "c").Rank != 2 || waitOf(res, "a").Rank != 3 {
		t.Fatalf("ranks: placements %+v waiting %+v", res.Placements, res.Waiting)
	}
}

func near(a, b float64) bool { return math.Abs(a-b) < 1e-9 }

// overtakeBrute walks every step boundary of mine: the reference for
// overtakeAfter.
func overtakeBrute(mine, theirs agingRule, myBase, theirBase float64, tieWin bool) (float64, bool) {
	if mine.interval <= 0 || mine.step <= 0 || mine.capEff <= 0 {
		return 0, false
	}
	for steps := math.Floor(mine.waitS/mine.interval) + 1; ; steps++ {
		t := steps*mine.interval - mine.waitS
		m, th := mine.credit(mine.waitS+t), theirs.credit(theirs.waitS+t)
		if me, them := myBase+m, theirBase+th; me > them || (me == them && tieWin) {
			return t, true
		}
		if m >= mine.capEff {
			return 0, false
		}
	}
}

// TestOvertakeAfter compares the closed-form search with walking every step,
// over random rules, bases and waits.
func TestOvertakeAfter(t *testing.T) {
	rng := rand.New(rand.NewSource(5))
	for i := 0; i < 20000; i++ {
		step := float64(50 * (1 + rng.Intn(4)))
		rule := func() agingRule {
			return agingRule{waitS: float64(rng.Intn(40000)), interval: 600, step: step,
				capEff: float64(rng.Intn(40)) * step / float64(1+rng.Intn(2))}
		}
		mine, theirs := rule(), rule()
		myBase := float64(rng.Intn(4)) * 500
		theirBase := myBase + float64(rng.Intn(3000)) - 500
		tie := rng.Intn(2) == 0
		gotT, gotOK := overtakeAfter(mine, theirs, myBase, theirBase, tie)
		wantT, wantOK := overtakeBrute(mine, theirs, myBase, theirBase, tie)
		if gotOK != wantOK || gotT != wantT {
			t.Fatalf("case %d (%+v %+v %v %v %v): got %v %v, want %v %v", i, mine, theirs, myBase, theirBase, tie, gotT, gotOK, wantT, wantOK)
		}
	}
}

func TestAccrueUsage(t *testing.T) {
	const h = 3600.0
	// Accruing over two halves equals accruing over the whole, the first
	// half decayed across the second (the integral is additive).
	whole := AccrueUsage(2, 2*h, h)
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	split := DecayUsage(AccrueUsage(2, h, h), t0, t0.Add(time.Hour), h) + AccrueUsage(2, h, h)
	if math.Abs(whole-split) > 1e-9 {
		t.Errorf("whole %v, split %v", whole, split)
	}
	// One half-life of load on 2 GPUs: 2·h/ln2·(1−½).
	if want := 2 * h / math.Ln2 * 0.5; math.Abs(AccrueUsage(2, h, h)-want) > 1e-9 {
		t.Errorf("AccrueUsage(2, h, h) = %v, want %v", AccrueUsage(2, h, h), want)
	}
	if AccrueUsage(2, 10, 0) != 20 || AccrueUsage(0, 10, h) != 0 || AccrueUsage(2, -1, h) != 0 {
		t.Errorf("no-decay or empty cases wrong")
	}
}
