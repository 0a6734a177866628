package storetest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/gpugov/gpugov/internal/scheduling"
	"github.com/gpugov/gpugov/internal/vocab"
	"github.com/gpugov/gpugov/store"
)

// Fixture is what NewStore and OpenStore load into a test database: pools
// (store.Store.UpsertInventory) and queues (UpsertQueues); either may be nil.
type Fixture struct {
	Pools  []scheduling.Pool
	Queues []scheduling.Queue
}

// TrainQueue is the standard-tier queue "train" with service share 1 and no
// wait objective, the queue most tests submit to.
var TrainQueue = scheduling.Queue{Name: "train", Tier: vocab.TierStandard, ServiceShare: 1}

// NewStore creates a database (NewDatabase), opens a store on it with opts,
// closed when the test ends, and loads f into it. It returns the store and
// the database's URL. Like NewDatabase it skips the test under -short; any
// error fails the test.
func NewStore(t testing.TB, f Fixture, opts ...store.Option) (*store.Store, string) {
	t.Helper()
	url := NewDatabase(t)
	return OpenStore(t, url, f, opts...), url
}

// OpenStore opens a store on the database at url with opts, closed when the
// test ends, and loads f into it; any error fails the test.
func OpenStore(t testing.TB, url string, f Fixture, opts ...store.Option) *store.Store {
	t.Helper()
	ctx := context.Background()
	st, err := store.Open(ctx, url, opts...)
	if err != nil {
		t.Fatalf("storetest: open store: %v", err)
	}
	t.Cleanup(st.Close)
	if len(f.Queues) > 0 {
		if err := st.UpsertQueues(ctx, f.Queues); err != nil {
			t.Fatalf("storetest: queues: %v", err)
		}
	}
	if len(f.Pools) > 0 {
		if err := st.UpsertInventory(ctx, f.Pools); err != nil {
			t.Fatalf("storetest: pools: %v", err)
		}
	}
	return st
}

// GPUModel is the model of Pool's GPUs.
const GPUModel = "A100-SXM4-80GB"

// NodeName is the name of node n of Pool(pool, …): "<pool>-n<n, 4 digits>".
func NodeName(pool string, n int) string { return fmt.Sprintf("%s-n%04d", pool, n) }

// GPUName is the UUID of GPU g of node n of Pool(pool, …):
// "GPU-<pool>-<n, 4 digits>-<g>".
func GPUName(pool string, n, g int) string { return fmt.Sprintf("GPU-%s-%04d-%d", pool, n, g) }

// Pool is an available pool named name at automation stage stage with nodes
// schedulable nodes (NodeName; 96 CPU cores, 1 TiB memory each) of
// gpusPerNode healthy whole GPUs (GPUName; GPUModel, 80 GiB, NVLink domain
// "nv<g/4>": four GPUs per domain).
func Pool(name string, stage vocab.AutomationStage, nodes, gpusPerNode int) scheduling.Pool {
	p := scheduling.Pool{Name: name, Available: true, Stage: stage}
	for n := range nodes {
		node := scheduling.Node{Name: NodeName(name, n), CPUMilli: 96000, MemoryMiB: 1 << 20, Schedulable: true}
		for g := range gpusPerNode {
			node.GPUs = append(node.GPUs, scheduling.GPU{
				UUID: GPUName(name, n, g), Model: GPUModel, MemoryMiB: 81920,
				NVLinkDomain: fmt.Sprintf("nv%d", g/4), Healthy: true,
			})
		}
		p.Nodes = append(p.Nodes, node)
	}
	return p
}

// Submit stores job j (store.Store.CreateJob) and returns it; an error, or
// an idempotency key that matched an existing job, fails the test.
func Submit(t testing.TB, st *store.Store, j *store.NewJob) *store.Job {
	t.Helper()
	job, created, err := st.CreateJob(context.Background(), j)
	if err != nil || !created {
		t.Fatalf("storetest: create job: created=%v err=%v", created, err)
	}
	return job
}

// Placement is a placement of jobID on node of pool: rank 1, the given GPUs
// with milli thousandths each.
func Placement(jobID, pool, node string, milli int, gpus ...string) scheduling.Placement {
	p := scheduling.Placement{JobID: jobID, Pool: pool, Node: node, Rank: 1}
	for _, u := range gpus {
		p.GPUs = append(p.GPUs, scheduling.GPUShare{UUID: u, Milli: milli})
	}
	return p
}

// Place applies a hand-written scheduling cycle cycleID at `at` granting
// placements (as the scheduler would) and returns its outcome; an error or a
// refused placement fails the test.
func Place(t testing.TB, st *store.Store, cycleID string, at time.Time, placements ...scheduling.Placement) *store.CycleOutcome {
	t.Helper()
	out, err := st.ApplyCycle(context.Background(), cycleID,
		&scheduling.Result{PolicyVersion: "test", At: at, Placements: placements}, at)
	if err != nil {
		t.Fatalf("storetest: cycle %s: %v", cycleID, err)
	}
	if len(out.Placed) != len(placements) {
		t.Fatalf("storetest: cycle %s placed %d of %d: conflicts %+v", cycleID, len(out.Placed), len(placements), out.Conflicts)
	}
	return out
}

// ModelPools is one available pool per name at stage stage holding, per GPU
// model of models, one schedulable node "<pool>-<model>" of gpusPerNode
// healthy 80 GiB GPUs of that model named "GPU-<node>-<g>" (the layout of the
// queue-report fixtures, where each model's node is its own release target).
func ModelPools(names, models []string, stage vocab.AutomationStage, gpusPerNode int) []scheduling.Pool {
	var pools []scheduling.Pool
	for _, name := range names {
		p := scheduling.Pool{Name: name, Available: true, Stage: stage}
		for _, model := range models {
			n := scheduling.Node{Name: name + "-" + model, Schedulable: true}
			for g := range gpusPerNode {
				n.GPUs = append(n.GPUs, scheduling.GPU{UUID: fmt.Sprintf("GPU-%s-%d", n.Name, g), Model: model, MemoryMiB: 81920, Healthy: true})
			}
			p.Nodes = append(p.Nodes, n)
		}
		pools = append(pools, p)
	}
	return pools
}
