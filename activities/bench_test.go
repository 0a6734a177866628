package activities_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/gpugov/gpugov/activities"
	"github.com/gpugov/gpugov/internal/scheduling"
	"github.com/gpugov/gpugov/internal/vocab"
	"github.com/gpugov/gpugov/store"
	"github.com/gpugov/gpugov/store/storetest"
)

// BenchmarkRunCycleSteadyState measures one scheduling-cycle activity (load
// snapshot, plan, apply, diff wait reasons, signal none) on a full pool of 8
// nodes × 8 GPUs with 1,000 jobs waiting whose reasons no longer change — the
// cost the scheduler pays on every timer wake.
func BenchmarkRunCycleSteadyState(b *testing.B) {
	ctx := context.Background()
	st, err := store.Open(ctx, storetest.NewDatabase(b))
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	pool := scheduling.Pool{Name: testPool, Available: true, Stage: vocab.StageObserve}
	for n := range 8 {
		node := scheduling.Node{Name: fmt.Sprintf("p1-n%d", n), CPUMilli: 64000, MemoryMiB: 512 * 1024, Schedulable: true}
		for g := range 8 {
			node.GPUs = append(node.GPUs, scheduling.GPU{UUID: fmt.Sprintf("GPU-%d-%d", n, g), Model: "A100-SXM4-80GB", MemoryMiB: 81920, Healthy: true})
		}
		pool.Nodes = append(pool.Nodes, node)
	}
	if err := st.UpsertInventory(ctx, []scheduling.Pool{pool}); err != nil {
		b.Fatal(err)
	}
	if err := st.UpsertQueues(ctx, []scheduling.Queue{{Name: "train", Tier: vocab.TierStandard, ServiceShare: 1}}); err != nil {
		b.Fatal(err)
	}
	for range 64 + 1000 {
		submit(b, st, 1)
	}
	sig := newSignaler()
	sched := activities.NewScheduler(activities.Deps{Store: st, Temporal: sig})
	prev := ""
	cycle := func(i int) *activities.RunCycleResult {
		id := fmt.Sprintf("c%d", i)
		res, err := sched.RunCycle(ctx, &activities.RunCycleInput{Shard: "default", CycleID: id, PreviousCycleID: prev})
		if err != nil {
			b.Fatal(err)
		}
		prev = id
		return res
	}
	if res := cycle(0); len(res.Placements) != 64 || res.Waiting != 1000 {
		b.Fatalf("first cycle %+v, want 64 placed and 1000 waiting", res)
	}
	b.ResetTimer()
	for i := 1; i <= b.N; i++ {
		if res := cycle(i); res.ReasonChanges != 0 {
			b.Fatalf("steady cycle %d changed %d reasons", i, res.ReasonChanges)
		}
	}
}
