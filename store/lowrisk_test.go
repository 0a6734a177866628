package store_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/gpugov/gpugov/internal/scheduling"
	"github.com/gpugov/gpugov/internal/vocab"
)

// An empty (nil) low-risk list (a policy whose queues are none low-risk)
// clears every flag instead of failing on SQL NULL.
func TestSetLowRiskQueuesNilClearsAll(t *testing.T) {
	t.Parallel()
	s, _ := newStore(t)
	ctx := context.Background()
	if err := s.UpsertQueues(ctx, []scheduling.Queue{
		{Name: "train", Tier: vocab.TierStandard, ServiceShare: 1, MaxWait: time.Hour, LowRisk: true},
		{Name: "serve", Tier: vocab.TierProduction, ServiceShare: 1},
	}); err != nil {
		t.Fatal(err)
	}
	changed, err := s.SetLowRiskQueues(ctx, nil, "test", "no low-risk queue in the policy")
	if err != nil {
		t.Fatalf("SetLowRiskQueues(nil): %v", err)
	}
	if !slices.Equal(changed, []string{"train"}) {
		t.Fatalf("changed %v, want [train]", changed)
	}
	if n := queryInt(t, s, `SELECT count(*) FROM queues WHERE low_risk`); n != 0 {
		t.Fatalf("%d queues still low-risk", n)
	}
}
