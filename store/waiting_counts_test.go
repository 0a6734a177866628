package store_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/gpugov/gpugov/internal/scheduling"
	"github.com/gpugov/gpugov/internal/vocab"
	"github.com/gpugov/gpugov/store"
	"github.com/gpugov/gpugov/store/storetest"
)

// TestWaitingCountsAcrossShards: the counts cover the pending jobs of every
// shard by queue and stored reason (a job no cycle explained yet counts as
// not_yet_evaluated), whichever shard's cycle ran last, and leave out
// running and finished jobs.
func TestWaitingCountsAcrossShards(t *testing.T) {
	ctx := context.Background()
	pools := []scheduling.Pool{storetest.Pool("a", vocab.StageAutomate, 1, 1), storetest.Pool("b", vocab.StageAutomate, 1, 1)}
	st, _ := storetest.NewStore(t, storetest.Fixture{Pools: pools, Queues: []scheduling.Queue{storetest.TrainQueue}})
	if _, err := st.SetPoolShards(ctx, map[string]string{"a": "sa", "b": "sb"}); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	for i, pool := range []string{"a", "a", "b", "b", "b"} {
		gpus := 1
		if i%2 == 1 {
			gpus = 4 // never fits a 1-GPU node
		}
		if _, _, err := st.CreateJob(ctx, &store.NewJob{Project: "p1", Queue: storetest.TrainQueue.Name, Tier: vocab.TierStandard,
			Request: scheduling.ResourceRequest{GPUs: gpus, Pool: pool}, RunSeconds: 60,
			SubmitTime: now.Add(-time.Duration(10-i) * time.Second)}); err != nil {
			t.Fatal(err)
		}
	}
	before, err := st.WaitingCounts(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := []store.WaitingCount{{Queue: storetest.TrainQueue.Name, Reason: vocab.ReasonNotYetEvaluated, Jobs: 5}}
	if !slices.Equal(before, want) {
		t.Fatalf("before any cycle: %+v, want %+v", before, want)
	}
	pol := scheduling.DefaultPolicy()
	// Shard a's cycle only: b's jobs stay unevaluated.
	snap, err := st.LoadShardSnapshot(ctx, "sa", now)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.ApplyShardCycle(ctx, "sa", "sa-1", scheduling.Plan(snap, &pol, now), now); err != nil {
		t.Fatal(err)
	}
	got, err := st.WaitingCounts(ctx)
	if err != nil {
		t.Fatal(err)
	}
	sum := map[vocab.WaitReason]int64{}
	for _, c := range got {
		sum[c.Reason] += c.Jobs
	}
	// a: one placed (not counted), one waiting with a reason; b: three unevaluated.
	if sum[vocab.ReasonNotYetEvaluated] != 3 || len(got) != 2 {
		t.Fatalf("after shard a's cycle: %+v, want b's 3 jobs not_yet_evaluated and a's 4-GPU job with its reason", got)
	}
	for _, c := range got {
		if c.Reason != vocab.ReasonNotYetEvaluated && c.Jobs != 1 {
			t.Errorf("a's waiting jobs: %+v, want 1", c)
		}
	}
}
