package scheduling

import (
	"fmt"
	"math/rand"
	"reflect"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/gpugov/gpugov/internal/vocab"
)

// TestPlannerMatchesPlan runs sequences of cycles on random snapshots and
// checks that a Planner, reusing its static capacity index, decides exactly
// what Plan decides with a fresh index at every cycle: between cycles the
// placements start running, some runs end, new jobs arrive, node selectors
// come and go (the selector keys change), and now and then the inventory
// changes (a GPU's health, a cordon, a node's labels, a node added or
// removed, a pool drained or restaged) with a new InventoryVersion. It also
// checks that the index is reused exactly when the version, the selector
// keys and the inventory's size are unchanged.
func TestPlannerMatchesPlan(t *testing.T) {
	rng := rand.New(rand.NewSource(21))
	reuses, rebuilds := 0, 0
	for run := range 25 {
		s, p := randomSnapshot(rng), randomPolicy(rng)
		s.InventoryVersion = 1
		var pl Planner
		now := t0
		next := 0
		var prev *capacityStatic
		var prevKeys []string
		prevVersion, prevCounts := int64(0), inventoryCounts{}
		for cycle := range 12 {
			fresh := Plan(s, p, now)
			reused := pl.Plan(s, p, now)
			if !reflect.DeepEqual(fresh, reused) {
				t.Fatalf("run %d cycle %d: the Planner's plan differs from Plan's:\n%s", run, cycle, firstDifference(fresh, reused))
			}
			// The same inventory in another order is the same version.
			if other := pl.Plan(shuffled(rng, s), p, now); !reflect.DeepEqual(fresh, other) {
				t.Fatalf("run %d cycle %d: the Planner's plan of a shuffled snapshot differs:\n%s", run, cycle, firstDifference(fresh, other))
			}
			cur := pl.entries[0].static
			keys, counts := selectorKeys(s), countInventory(s)
			same := prev != nil && prevVersion == s.InventoryVersion && slices.Equal(prevKeys, keys) && prevCounts == counts
			switch {
			case same && cur != prev:
				t.Fatalf("run %d cycle %d: the index was rebuilt for an unchanged inventory", run, cycle)
			case !same && cur == prev:
				t.Fatalf("run %d cycle %d: the index was reused across an inventory or selector change", run, cycle)
			case same:
				reuses++
			default:
				rebuilds++
			}
			prev, prevKeys, prevVersion, prevCounts = cur, keys, s.InventoryVersion, counts
			advanceSnapshot(rng, s, fresh, &next)
			now = now.Add(time.Minute)
			if rng.Intn(4) == 0 {
				changeInventory(rng, s)
				s.InventoryVersion++
			}
		}
	}
	if reuses == 0 || rebuilds == 0 {
		t.Fatalf("reused %d times, rebuilt %d times: the sequences did not exercise both", reuses, rebuilds)
	}
}

// TestPlannerGuards checks what a Planner does not reuse: a snapshot with
// InventoryVersion 0, and an inventory whose size changed under the same
// version (a caller that forgot to move it); and that it keeps only the
// current version's indexes.
func TestPlannerGuards(t *testing.T) {
	rng := rand.New(rand.NewSource(5))
	s, p := randomSnapshot(rng), randomPolicy(rng)
	var pl Planner
	pl.Plan(s, p, t0)
	if len(pl.entries) != 0 {
		t.Fatalf("InventoryVersion 0 cached %d indexes", len(pl.entries))
	}
	s.InventoryVersion = 7
	pl.Plan(s, p, t0)
	first := pl.entries[0].static
	s.Pools[1].Nodes = append(s.Pools[1].Nodes, mkNode("s-extra", 4, "H100", 81920, 4))
	if got, want := pl.Plan(s, p, t0), Plan(s, p, t0); !reflect.DeepEqual(got, want) {
		t.Fatalf("a node added under the same version:\n%s", firstDifference(want, got))
	}
	if pl.entries[0].static == first {
		t.Fatal("a node added under the same version reused the old index")
	}
	s.InventoryVersion = 8
	pl.Plan(s, p, t0)
	if len(pl.entries) != 1 || pl.entries[0].version != 8 {
		t.Fatalf("after a new version the Planner keeps %d indexes (first of version %d), want only version 8's",
			len(pl.entries), pl.entries[0].version)
	}
}

// TestPlannerConcurrent plans the same snapshot from several goroutines on
// one Planner (run with -race): every plan equals Plan's.
func TestPlannerConcurrent(t *testing.T) {
	rng := rand.New(rand.NewSource(9))
	s, p := randomSnapshot(rng), randomPolicy(rng)
	s.InventoryVersion = 3
	want := Plan(s, p, t0)
	var pl Planner
	var wg sync.WaitGroup
	errs := make(chan string, 8)
	for range 8 {
		wg.Go(func() {
			if got := pl.Plan(s, p, t0); !reflect.DeepEqual(got, want) {
				errs <- firstDifference(want, got)
			}
		})
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Fatal(e)
	}
}

// advanceSnapshot moves s one cycle on: res's placements start running, about
// one run in six ends, a few jobs arrive (next numbers them) and about one
// pending job in twenty gains or loses a node selector.
func advanceSnapshot(rng *rand.Rand, s *Snapshot, res *Result, next *int) {
	placed := make(map[string]*Placement, len(res.Placements))
	for i := range res.Placements {
		placed[res.Placements[i].JobID] = &res.Placements[i]
	}
	pending := s.Pending[:0:0]
	for _, j := range s.Pending {
		pl := placed[j.ID]
		if pl == nil {
			pending = append(pending, j)
			continue
		}
		a := Allocation{ID: "alloc-" + j.ID, JobID: j.ID, Pool: pl.Pool, Node: pl.Node, GPUs: pl.GPUs,
			CPUMilli: j.Request.CPUMilli, MemoryMiB: j.Request.MemoryMiB, Borrowed: pl.Borrowed}
		s.Running = append(s.Running, RunningJob{ID: j.ID, Project: j.Project, Queue: j.Queue, Tier: j.Tier,
			Request: j.Request, Allocation: a, StartedAt: t0, RunSeconds: 3600, Recovery: j.Recovery})
		s.Allocations = append(s.Allocations, a)
	}
	ended := make(map[string]bool)
	running := s.Running[:0:0]
	for _, r := range s.Running {
		if rng.Intn(6) == 0 {
			ended[r.ID] = true
			continue
		}
		running = append(running, r)
	}
	s.Running = running
	s.Allocations = slices.DeleteFunc(s.Allocations, func(a Allocation) bool { return ended[a.JobID] })
	for range rng.Intn(8) {
		j := synthPending(rng, 1_000_000+*next)
		*next++
		if rng.Intn(3) == 0 {
			j.Request.Pool = "second"
		}
		pending = append(pending, j)
	}
	for i := range pending {
		if rng.Intn(20) == 0 {
			if pending[i].Request.NodeSelector == nil {
				pending[i].Request.NodeSelector = map[string]string{[]string{"network", "storage", "rack"}[rng.Intn(3)]: "infiniband"}
			} else {
				pending[i].Request.NodeSelector = nil
			}
		}
	}
	s.Pending = pending
}

// changeInventory makes one change to s's inventory, as an import or an
// agent report would (the caller moves InventoryVersion).
func changeInventory(rng *rand.Rand, s *Snapshot) {
	pool := &s.Pools[rng.Intn(len(s.Pools))]
	if len(pool.Nodes) == 0 {
		pool = &s.Pools[0]
	}
	n := &pool.Nodes[rng.Intn(len(pool.Nodes))]
	switch rng.Intn(6) {
	case 0:
		g := &n.GPUs[rng.Intn(len(n.GPUs))]
		g.Healthy = !g.Healthy
	case 1:
		n.Schedulable = !n.Schedulable
	case 2:
		n.Labels = map[string]string{"hostname": n.Name, "network": []string{"infiniband", "ethernet"}[rng.Intn(2)]}
	case 3:
		m := synthModels[rng.Intn(len(synthModels))]
		nd := mkNode(fmt.Sprintf("%s-new-%d", pool.Name, len(pool.Nodes)), 4+rng.Intn(5), m.model, m.memMiB, m.domain)
		nd.Labels = map[string]string{"network": "infiniband"}
		pool.Nodes = append(pool.Nodes, nd)
	case 4: // a node leaves: allocations on it name unknown GPUs
		pool.Nodes = slices.Delete(slices.Clone(pool.Nodes), 0, 1)
	case 5:
		pool.Available = !pool.Available
		pool.Stage = []vocab.AutomationStage{vocab.StageObserve, vocab.StageTrial, vocab.StageAutomate}[rng.Intn(3)]
	}
}

// BenchmarkPlanReuse compares one cycle on a Planner that reuses its static
// index with Plan building it afresh, on the BenchmarkPlan snapshot and on a
// large, lightly loaded pool (6,400 GPUs, 1% busy, 50 pending: the shape of
// the Alibaba default trace's cycles). Each iteration runs both, one after
// the other, so that a shared machine's changing load hits both alike; it
// reports the medians over iterations of each one's time (fresh-ns/op,
// reuse-ns/op) and of their ratio (fresh/reuse).
func BenchmarkPlanReuse(b *testing.B) {
	cases := []struct {
		name           string
		nodes, pending int
		busy           float64
	}{
		{"nodes=1000,pending=1000,busy=0.9", 1000, 1000, 0.9},
		{"nodes=800,pending=50,busy=0.01", 800, 50, 0.01},
	}
	for _, c := range cases {
		s := synthSnapshot(42, c.nodes, c.pending, c.busy)
		s.InventoryVersion = 1
		p := DefaultPolicy()
		b.Run(c.name, func(b *testing.B) {
			var pl Planner
			pl.Plan(s, &p, t0)
			var fresh, reuse, ratio []float64
			for b.Loop() {
				start := time.Now()
				Plan(s, &p, t0)
				mid := time.Now()
				pl.Plan(s, &p, t0)
				f, r := float64(mid.Sub(start)), float64(time.Since(mid))
				fresh, reuse, ratio = append(fresh, f), append(reuse, r), append(ratio, f/r)
			}
			b.ReportMetric(median(fresh), "fresh-ns/op")
			b.ReportMetric(median(reuse), "reuse-ns/op")
			b.ReportMetric(median(ratio), "fresh/reuse")
		})
	}
}

// median is the middle value of xs (the mean of the two middle ones for an
// even count); it sorts xs.
func median(xs []float64) float64 {
	slices.Sort(xs)
	n := len(xs)
	if n%2 == 1 {
		return xs[n/2]
	}
	return (xs[n/2-1] + xs[n/2]) / 2
}
