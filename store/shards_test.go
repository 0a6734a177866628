package store_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/gpugov/gpugov/internal/scheduling"
	"github.com/gpugov/gpugov/store"
)

// shardCycle is one cycle of a shard: load, plan, apply; loaded, when set,
// is called between the load and the apply.
func shardCycle(t *testing.T, s *store.Store, pl *scheduling.Planner, shard, id string, now time.Time,
	loaded func(*scheduling.Snapshot)) (*scheduling.Snapshot, *store.CycleOutcome) {
	t.Helper()
	ctx := context.Background()
	snap, err := s.LoadShardSnapshot(ctx, shard, now)
	if err != nil {
		t.Error(err)
		return nil, nil
	}
	pol := scheduling.DefaultPolicy()
	plan := pl.Plan(snap, &pol, now)
	if loaded != nil {
		loaded(snap)
	}
	out, err := s.ApplyShardCycle(ctx, shard, id, plan, now)
	if err != nil {
		t.Error(err)
		return snap, nil
	}
	return snap, out
}

// TestShardsCycleInParallel: pools a and b on shards sa and sb of one Store;
// the two shards' cycles overlap (both loaded before either applies, a
// barrier between), each loads and places only its pool's jobs, and no GPU
// is over-allocated; the per-shard cache and wait memo keep them apart over
// several rounds.
func TestShardsCycleInParallel(t *testing.T) {
	t.Parallel()
	s := newStoreWith(t, testPool("a", 1, 4), testPool("b", 1, 4))
	ctx := context.Background()
	if _, err := s.SetPoolShards(ctx, map[string]string{"a": "sa", "b": "sb"}); err != nil {
		t.Fatal(err)
	}
	jobPool := map[string]string{}
	for i := 0; i < 6; i++ {
		for _, pool := range []string{"a", "b"} {
			j := submit(t, s, "p", pool, 1, 1000)
			jobPool[j.ID] = pool
		}
	}
	planners := map[string]*scheduling.Planner{"sa": {}, "sb": {}}
	placed := map[string]int{}
	for round := 0; round < 3; round++ {
		now := t0.Add(time.Duration(round+1) * time.Minute)
		var barrier, wg sync.WaitGroup
		barrier.Add(2)
		var mu sync.Mutex
		for shard, pool := range map[string]string{"sa": "a", "sb": "b"} {
			wg.Go(func() {
				snap, out := shardCycle(t, s, planners[shard], shard, fmt.Sprintf("%s/%d", shard, round), now,
					func(*scheduling.Snapshot) { barrier.Done(); barrier.Wait() })
				if snap == nil || out == nil {
					return
				}
				for _, p := range snap.Pools {
					if p.Name != pool {
						t.Errorf("shard %s loaded pool %s", shard, p.Name)
					}
				}
				for _, j := range snap.Pending {
					if j.Request.Pool != pool {
						t.Errorf("shard %s loaded job %s of pool %s", shard, j.ID, j.Request.Pool)
					}
				}
				mu.Lock()
				defer mu.Unlock()
				for _, p := range out.Placed {
					if jobPool[p.JobID] != pool || p.Pool != pool {
						t.Errorf("shard %s placed job %s of pool %s in %s", shard, p.JobID, jobPool[p.JobID], p.Pool)
					}
					placed[pool]++
				}
				if out.OutOfShard != 0 {
					t.Errorf("shard %s: %d out of shard", shard, out.OutOfShard)
				}
			})
		}
		wg.Wait()
	}
	if placed["a"] != 4 || placed["b"] != 4 {
		t.Fatalf("placed %v, want 4 per pool (4 GPUs each)", placed)
	}
	if n := queryInt(t, s, `SELECT count(*) FROM (SELECT u FROM allocations a, unnest(a.gpu_uuids) u
		WHERE a.released_at IS NULL GROUP BY u HAVING count(*) > 1) x`); n != 0 {
		t.Fatalf("%d GPUs held by two allocations", n)
	}
	if n := queryInt(t, s, `SELECT count(*) FROM allocations WHERE released_at IS NULL`); n != 8 {
		t.Fatalf("%d allocations, want 8 (every GPU once)", n)
	}
	if n := queryInt(t, s, `SELECT count(*) FROM jobs WHERE state = 'waiting' AND reason IS NOT NULL`); n != 4 {
		t.Fatalf("%d waiting jobs with a reason, want 4 (2 per pool)", n)
	}
}

// TestShardMoveLosesNothing moves pool b from shard sa to sb while a cycle
// of sa, planned before the move, is in flight: that cycle touches nothing
// of b (its placements of b's jobs are left out), later cycles of sa load
// nothing of b, and sb places the jobs of b that waited before the move.
func TestShardMoveLosesNothing(t *testing.T) {
	t.Parallel()
	s := newStoreWith(t, testPool("a", 1, 2), testPool("b", 1, 2))
	ctx := context.Background()
	if _, err := s.SetPoolShards(ctx, map[string]string{"a": "sa", "b": "sa"}); err != nil {
		t.Fatal(err)
	}
	var bJobs []string
	for i := 0; i < 2; i++ {
		submit(t, s, "p", "a", 1, 1000)
		bJobs = append(bJobs, submit(t, s, "p", "b", 1, 1000).ID)
	}
	pa, pb := &scheduling.Planner{}, &scheduling.Planner{}
	now := t0.Add(time.Minute)
	// sa's cycle loads both pools, then b moves before it applies.
	_, out := shardCycle(t, s, pa, "sa", "sa/1", now, func(snap *scheduling.Snapshot) {
		if len(snap.Pools) != 2 {
			t.Fatalf("sa loaded %d pools before the move, want 2", len(snap.Pools))
		}
		changed, err := s.SetPoolShards(ctx, map[string]string{"a": "sa", "b": "sb"})
		if err != nil || len(changed) != 1 || changed[0] != "b: sa -> sb" {
			t.Fatalf("move: %v %v", changed, err)
		}
	})
	if out == nil {
		t.FailNow()
	}
	for _, p := range out.Placed {
		if p.Pool != "a" {
			t.Fatalf("sa placed job %s in b after the move", p.JobID)
		}
	}
	if len(out.Placed) != 2 || out.OutOfShard != 2 {
		t.Fatalf("sa placed %d, left out %d; want 2 and 2 (b's placements)", len(out.Placed), out.OutOfShard)
	}
	for _, id := range bJobs {
		j, err := s.GetJob(ctx, id)
		if err != nil || j.State != "submitted" {
			t.Fatalf("job %s of b after sa's cycle: %v %v, want untouched (submitted)", id, j.State, err)
		}
	}
	// The old shard's next cycle loads nothing of b.
	snap, _ := shardCycle(t, s, pa, "sa", "sa/2", now.Add(time.Second), nil)
	for _, p := range snap.Pools {
		if p.Name == "b" {
			t.Fatal("sa loaded b after the move")
		}
	}
	for _, j := range snap.Pending {
		if j.Request.Pool == "b" {
			t.Fatalf("sa loaded job %s of b after the move", j.ID)
		}
	}
	// The new shard places b's jobs.
	_, out = shardCycle(t, s, pb, "sb", "sb/1", now.Add(2*time.Second), nil)
	if out == nil || len(out.Placed) != 2 {
		t.Fatalf("sb placed %v, want b's 2 jobs", out)
	}
	for _, p := range out.Placed {
		if p.Pool != "b" {
			t.Fatalf("sb placed in %s", p.Pool)
		}
	}
	if changed, err := s.SetPoolShards(ctx, map[string]string{"a": "sa", "b": "sb"}); err != nil || changed != nil {
		t.Fatalf("repeated move: %v %v, want no change", changed, err)
	}
	// Without shards every pool is in "default", and LoadSnapshot still
	// loads every pool.
	if _, err := s.SetPoolShards(ctx, nil); err != nil {
		t.Fatal(err)
	}
	for _, shard := range []string{"", store.DefaultShard} {
		snap, err := s.LoadShardSnapshot(ctx, shard, now.Add(3*time.Second))
		if err != nil || len(snap.Pools) != 2 {
			t.Fatalf("shard %q: %v pools, %v", shard, snap, err)
		}
	}
}

// TestShardMoveWaitsForApply: a move waits for a cycle applying on the pool
// (ApplyShardCycle's FOR SHARE on its shard's pools rows, held here by hand
// the way that transaction holds it) and commits after it.
func TestShardMoveWaitsForApply(t *testing.T) {
	t.Parallel()
	s := newStoreWith(t, testPool("a", 1, 1))
	ctx := context.Background()
	tx, err := s.Pool().Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, `SELECT name FROM pools WHERE scheduler_shard = 'default' ORDER BY name FOR SHARE`); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := s.SetPoolShards(ctx, map[string]string{"a": "sa"})
		done <- err
	}()
	select {
	case err := <-done:
		t.Fatalf("the move committed during the apply (%v)", err)
	case <-time.After(300 * time.Millisecond):
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if m, err := s.PoolShards(ctx); err != nil || m["a"] != "sa" {
		t.Fatalf("after the apply: %v %v", m, err)
	}
}

// TestUnknownPoolJobsAreTheDefaultShards: a job asking for a pool no
// inventory has is in the default shard, whether the default shard holds
// every pool (no `shards:`) or none: its cycle loads it and records its
// pool_unavailable wait, and no other shard loads it. Before, the default
// shard's cycle planned the wait and ApplyShardCycle then dropped it (the
// pool has no pools row, so it was in no shard's set): the job stayed
// submitted with no reason (found by a newcomer, 2026-12-03).
func TestUnknownPoolJobsAreTheDefaultShards(t *testing.T) {
	t.Parallel()
	s := newStoreWith(t, testPool("a", 1, 1))
	ctx := context.Background()
	j := submit(t, s, "p", "nopool", 1, 0)
	reasonOf := func() string {
		t.Helper()
		got, err := s.GetJob(ctx, j.ID)
		if err != nil {
			t.Fatal(err)
		}
		return string(got.Reason)
	}
	// Every pool in the default shard (the fast path of the shard filter).
	snap, out := shardCycle(t, s, &scheduling.Planner{}, store.DefaultShard, "default/1", t0, nil)
	if snap == nil || out == nil || len(snap.Pending) != 1 || out.OutOfShard != 0 {
		t.Fatalf("default shard holding every pool: snapshot %+v outcome %+v, want the job loaded and its wait kept", snap, out)
	}
	if r := reasonOf(); r != "pool_unavailable" {
		t.Fatalf("reason %q after the default shard's cycle, want pool_unavailable", r)
	}
	// Pool a moves to shard sa: the job stays the default shard's.
	if _, err := s.SetPoolShards(ctx, map[string]string{"a": "sa"}); err != nil {
		t.Fatal(err)
	}
	if snap, _ := shardCycle(t, s, &scheduling.Planner{}, "sa", "sa/1", t0.Add(time.Minute), nil); snap == nil || len(snap.Pending) != 0 {
		t.Fatalf("shard sa loaded %+v, want no job of an unknown pool", snap)
	}
	snap, out = shardCycle(t, s, &scheduling.Planner{}, store.DefaultShard, "default/2", t0.Add(2*time.Minute), nil)
	if snap == nil || out == nil || len(snap.Pending) != 1 || out.OutOfShard != 0 {
		t.Fatalf("default shard holding no pool: snapshot %+v outcome %+v, want the job loaded and its wait kept", snap, out)
	}
	if r := reasonOf(); r != "pool_unavailable" {
		t.Fatalf("reason %q after the second default cycle, want pool_unavailable", r)
	}
}
