package service

import (
	"context"
	"io"
	"log/slog"
	"slices"
	"sync"
	"testing"

	"go.temporal.io/sdk/client"

	"github.com/gpugov/gpugov/internal/policy"
	"github.com/gpugov/gpugov/internal/scheduling"
	"github.com/gpugov/gpugov/internal/temporalx"
	"github.com/gpugov/gpugov/internal/vocab"
	"github.com/gpugov/gpugov/store"
	"github.com/gpugov/gpugov/store/storetest"
	"github.com/gpugov/gpugov/workflows"
)

// startRecorder is a Temporal client that records the workflow starts.
type startRecorder struct {
	client.Client
	mu     sync.Mutex
	shards []string
}

func (r *startRecorder) ExecuteWorkflow(_ context.Context, o client.StartWorkflowOptions, _ any, args ...any) (client.WorkflowRun, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	in := args[0].(*workflows.SchedulerInput)
	if o.ID != temporalx.SchedulerWorkflowID(in.Shard) {
		panic("scheduler ID " + o.ID + " for shard " + in.Shard)
	}
	r.shards = append(r.shards, in.Shard)
	return nil, nil
}

// TestPolicyShardsStartSchedulersAndMovePools: the policy in force assigns
// the pools' shards in the store (absent: every pool in "default"), a
// policy that adds a shard starts its scheduler, and a pool moved by a
// policy change is the new shard's (shardOf, the store's pools).
func TestPolicyShardsStartSchedulersAndMovePools(t *testing.T) {
	t.Parallel()
	st, _ := storetest.NewStore(t, storetest.Fixture{Pools: []scheduling.Pool{
		storetest.Pool("a", vocab.StageObserve, 1, 1), storetest.Pool("b", vocab.StageObserve, 1, 1)}})
	ctx := context.Background()
	file := policy.Default()
	s := &Service{cfg: Config{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}, store: st, static: file}
	if err := s.applyStartPolicy(ctx); err != nil {
		t.Fatal(err)
	}
	rec := &startRecorder{}
	s.temporal = rec
	if err := s.startSchedulers(ctx, s.currentPolicy()); err != nil {
		t.Fatal(err)
	}
	shards := func() map[string]string {
		t.Helper()
		m, err := st.PoolShards(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	if got := shards(); got["a"] != "default" || got["b"] != "default" || !slices.Equal(rec.shards, []string{"default"}) {
		t.Fatalf("without shards: pools %v, schedulers %v; want every pool in default, one scheduler", got, rec.shards)
	}
	// A policy that gives b a shard of its own starts that shard's scheduler.
	p := *file
	p.Shards = map[string][]string{"gpu-b": {"b"}}
	rec.shards = nil
	if err := s.applyPolicy(ctx, &p, "shards", StageSourceReload); err != nil {
		t.Fatal(err)
	}
	if got := shards(); got["a"] != "default" || got["b"] != "gpu-b" || s.shardOf("b") != "gpu-b" || s.shardOf("a") != "default" {
		t.Fatalf("after the change: pools %v", got)
	}
	if !slices.Equal(rec.shards, []string{"default", "gpu-b"}) {
		t.Fatalf("schedulers started %v, want default and gpu-b", rec.shards)
	}
	// Moving b on to another shard moves it in the store.
	q := *file
	q.Shards = map[string][]string{"other": {"b"}}
	if err := s.applyPolicy(ctx, &q, "move b", StageSourceReload); err != nil {
		t.Fatal(err)
	}
	if got := shards(); got["b"] != "other" || s.shardOf("b") != "other" {
		t.Fatalf("after the move: pools %v", got)
	}
}

// TestDefaultShardNamesAgree: the store's column default, the policy's and
// the workflows' name of the default shard are one name.
func TestDefaultShardNamesAgree(t *testing.T) {
	if store.DefaultShard != temporalx.DefaultShard || policy.DefaultShard != temporalx.DefaultShard {
		t.Fatalf("default shards %q (store), %q (policy), %q (temporalx)", store.DefaultShard, policy.DefaultShard, temporalx.DefaultShard)
	}
}
