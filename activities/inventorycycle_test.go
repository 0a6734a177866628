package activities_test

import (
	"context"
	"testing"

	"github.com/gpugov/gpugov/activities"
	"github.com/gpugov/gpugov/internal/scheduling"
	"github.com/gpugov/gpugov/internal/vocab"
	"github.com/gpugov/gpugov/store/storetest"
)

// TestRunCycleSeesInventoryChanges checks that the scheduler's cycles, which
// reuse one capacity index while the store's inventory_version stays
// (scheduling.Planner), plan on the inventory as it is now: after an agent
// report turns a GPU unhealthy (the same number of nodes and GPUs) the next
// cycle does not place on it, and after an import makes it healthy again the
// next cycle does.
func TestRunCycleSeesInventoryChanges(t *testing.T) {
	t.Parallel()
	st := newStore(t, 2, 2)
	ctx := context.Background()
	sched := activities.NewScheduler(activities.Deps{Store: st})
	a := submit(t, st, 2)
	if c1 := runCycle(t, sched, &activities.RunCycleInput{Shard: "default", CycleID: "c1"}); len(c1.Placements) != 1 ||
		c1.Placements[0].JobID != a.ID || c1.Placements[0].Node != testNode {
		t.Fatalf("cycle 1 placed %+v, want %s on %s", c1.Placements, a.ID, testNode)
	}

	pool := storetest.Pool(testPool, vocab.StageObserve, 2, 2)
	n1 := pool.Nodes[1]
	n1.GPUs[0].Healthy = false
	if _, err := st.UpsertNode(ctx, testPool, n1, "agent@"+n1.Name); err != nil {
		t.Fatal(err)
	}
	b := submit(t, st, 2)
	if c2 := runCycle(t, sched, &activities.RunCycleInput{Shard: "default", CycleID: "c2", PreviousCycleID: "c1"}); len(c2.Placements) != 0 || c2.Waiting != 1 {
		t.Fatalf("cycle 2 after GPU %s turned unhealthy: placed %+v, %d waiting; want %s waiting",
			n1.GPUs[0].UUID, c2.Placements, c2.Waiting, b.ID)
	}

	n1.GPUs[0].Healthy = true
	if err := st.UpsertInventory(ctx, []scheduling.Pool{pool}); err != nil {
		t.Fatal(err)
	}
	c3 := runCycle(t, sched, &activities.RunCycleInput{Shard: "default", CycleID: "c3", PreviousCycleID: "c2"})
	if len(c3.Placements) != 1 || c3.Placements[0].JobID != b.ID || c3.Placements[0].Node != n1.Name {
		t.Fatalf("cycle 3 after the GPU came back: placed %+v, want %s on %s", c3.Placements, b.ID, n1.Name)
	}
}
