package store_test

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/gpugov/gpugov/internal/scheduling"
)

// TestUsageHalfLifeFollowsThePolicy: the half-life serve sets from the
// policy's fair_share.half_life_s (SetUsageHalfLife) is the one LoadSnapshot
// decays stored usage with, and a half-life of 0 means no decay, as in
// scheduling.DecayUsage.
func TestUsageHalfLifeFollowsThePolicy(t *testing.T) {
	t.Parallel()
	s, _ := newStore(t)
	ctx := context.Background()
	if err := s.UpsertInventory(ctx, []scheduling.Pool{testPool("p", 1, 1)}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Pool().Exec(ctx, `INSERT INTO project_usage (project, decayed_gpu_seconds, as_of) VALUES ('vision', 1000, $1)`, t0); err != nil {
		t.Fatal(err)
	}
	usageAt := func(now time.Time) float64 {
		t.Helper()
		snap, err := s.LoadSnapshot(ctx, now)
		if err != nil {
			t.Fatal(err)
		}
		for _, u := range snap.Usage {
			if u.Project == "vision" {
				return u.DecayedGPUSeconds
			}
		}
		t.Fatal("no usage for vision in the snapshot")
		return 0
	}
	cases := []struct {
		halfLife time.Duration
		want     float64
	}{
		{time.Hour, 250},                        // two half-lives after t0
		{4 * time.Hour, 1000 * math.Exp2(-0.5)}, // half a half-life
		{0, 1000},                               // no decay
		{7 * 24 * time.Hour, 1000 * math.Exp2(-2.0/(7*24))}, // the default
	}
	for _, c := range cases {
		s.SetUsageHalfLife(c.halfLife)
		if got := usageAt(t0.Add(2 * time.Hour)); math.Abs(got-c.want) > 1e-6 {
			t.Errorf("half-life %v: usage %.6f GPU-s after 2 h, want %.6f", c.halfLife, got, c.want)
		}
	}
}
