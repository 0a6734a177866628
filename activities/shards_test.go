package activities_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"go.temporal.io/sdk/testsuite"

	"github.com/gpugov/gpugov/activities"
	"github.com/gpugov/gpugov/internal/scheduling"
	"github.com/gpugov/gpugov/internal/vocab"
	"github.com/gpugov/gpugov/store"
	"github.com/gpugov/gpugov/store/storetest"
)

// barrierStore holds every shard's load until all shards loaded, so their
// cycles overlap in time: each plans and applies only after the other loaded.
type barrierStore struct {
	*store.Store
	loaded *sync.WaitGroup
}

func (b *barrierStore) LoadShardSnapshot(ctx context.Context, shard string, now time.Time) (*scheduling.Snapshot, error) {
	snap, err := b.Store.LoadShardSnapshot(ctx, shard, now)
	b.loaded.Done()
	b.loaded.Wait()
	return snap, err
}

// TestRunCycleShardsInParallel runs the cycles of shards s1 (pool p1) and s2
// (pool p2) at once on one Scheduler and one Store, round after round: the
// cycles overlap, each places only its pool's jobs, no GPU holds more than
// its capacity, and the remembered reasons stay per shard.
func TestRunCycleShardsInParallel(t *testing.T) {
	t.Parallel()
	st, _ := storetest.NewStore(t, storetest.Fixture{
		Pools:  []scheduling.Pool{storetest.Pool("p1", vocab.StageObserve, 1, 2), storetest.Pool("p2", vocab.StageObserve, 1, 2)},
		Queues: []scheduling.Queue{storetest.TrainQueue},
	})
	ctx := context.Background()
	if _, err := st.SetPoolShards(ctx, map[string]string{"p1": "s1", "p2": "s2"}); err != nil {
		t.Fatal(err)
	}
	poolOf := map[string]string{}
	for i := 0; i < 3; i++ {
		for _, pool := range []string{"p1", "p2"} {
			j := storetest.Submit(t, st, &store.NewJob{Project: "vision", Queue: "train", Tier: vocab.TierStandard,
				Request: scheduling.ResourceRequest{GPUs: 1, Pool: pool}})
			poolOf[j.ID] = pool
		}
	}
	var loaded sync.WaitGroup
	a := &activities.Scheduler{Store: &barrierStore{Store: st, loaded: &loaded}, Temporal: newSignaler()}
	placed := map[string]int{}
	prev := map[string]string{}
	for round := 0; round < 2; round++ {
		loaded.Add(2)
		var wg sync.WaitGroup
		var mu sync.Mutex
		for shard, pool := range map[string]string{"s1": "p1", "s2": "p2"} {
			id := fmt.Sprintf("%s/run/%d", shard, round)
			in := &activities.RunCycleInput{Shard: shard, CycleID: id, PreviousCycleID: prev[shard]}
			wg.Go(func() {
				var suite testsuite.WorkflowTestSuite
				env := suite.NewTestActivityEnvironment()
				env.RegisterActivity(a)
				val, err := env.ExecuteActivity(a.RunCycle, in)
				if err != nil {
					t.Errorf("cycle %s: %v", id, err)
					return
				}
				var res activities.RunCycleResult
				if err := val.Get(&res); err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				defer mu.Unlock()
				for _, p := range res.Placements {
					if p.Pool != pool || poolOf[p.JobID] != pool {
						t.Errorf("shard %s placed job %s of %s in %s", shard, p.JobID, poolOf[p.JobID], p.Pool)
					}
					placed[pool]++
				}
				if res.Waiting != 1 {
					t.Errorf("shard %s round %d: %d waiting, want 1 (its pool's third job)", shard, round, res.Waiting)
				}
			})
			prev[shard] = id
		}
		wg.Wait()
	}
	if placed["p1"] != 2 || placed["p2"] != 2 {
		t.Fatalf("placed %v, want 2 per pool", placed)
	}
	var over int
	if err := st.Pool().QueryRow(ctx, `SELECT count(*) FROM (SELECT g.uuid FROM gpus g
		JOIN allocations a ON a.released_at IS NULL AND g.uuid = ANY(a.gpu_uuids)
		GROUP BY g.uuid HAVING count(*) > 1) x`).Scan(&over); err != nil {
		t.Fatal(err)
	}
	if over != 0 {
		t.Fatalf("%d GPUs held by two allocations", over)
	}
}
