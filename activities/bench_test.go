package activities_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/gpugov/gpugov/activities"
)

// BenchmarkRunCycleSteadyState measures one scheduling-cycle activity (load
// snapshot, plan, apply, diff wait reasons, signal none) on a full pool of 8
// nodes × 8 GPUs with 1,000 jobs waiting whose reasons no longer change — the
// cost the scheduler pays on every timer wake.
func BenchmarkRunCycleSteadyState(b *testing.B) {
	ctx := context.Background()
	st := newStore(b, 8, 8)
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
