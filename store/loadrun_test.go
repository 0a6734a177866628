package store_test

import (
	"context"
	"slices"
	"testing"

	"github.com/gpugov/gpugov/internal/scheduling"
	"github.com/gpugov/gpugov/internal/vocab"
	"github.com/gpugov/gpugov/store"
)

// TestJobIDsWithEnv returns exactly the jobs whose spec sets the variable to
// the value, through both insertion paths (CreateJob and CreateJobs).
func TestJobIDsWithEnv(t *testing.T) {
	t.Parallel()
	s, _ := newStore(t)
	ctx := context.Background()
	nj := func(env map[string]string) *store.NewJob {
		return &store.NewJob{Project: "vision", Queue: "train", Tier: vocab.TierStandard,
			Request: scheduling.ResourceRequest{GPUs: 1, Pool: "p"}, Env: env, RunSeconds: 5}
	}
	one, _, err := s.CreateJob(ctx, nj(map[string]string{"RUN": "a"}))
	if err != nil {
		t.Fatal(err)
	}
	bulk, err := s.CreateJobs(ctx, []*store.NewJob{nj(map[string]string{"RUN": "a", "X": "1"}), nj(map[string]string{"RUN": "b"}), nj(nil)})
	if err != nil {
		t.Fatal(err)
	}
	got, err := s.JobIDsWithEnv(ctx, "RUN", "a")
	want := []string{one.ID, bulk[0]}
	slices.Sort(want)
	if err != nil || !slices.Equal(got, want) {
		t.Fatalf("RUN=a: %v, %v; want %v", got, err, want)
	}
	if none, err := s.JobIDsWithEnv(ctx, "RUN", "c"); err != nil || len(none) != 0 {
		t.Errorf("RUN=c: %v, %v; want none", none, err)
	}
}
