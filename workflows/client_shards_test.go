package workflows_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"go.temporal.io/sdk/client"

	"github.com/gpugov/gpugov/internal/temporalx"
	"github.com/gpugov/gpugov/workflows"
)

// shardClient records job workflow starts and signals.
type shardClient struct {
	client.Client
	mu      sync.Mutex
	starts  map[string]string // job workflow ID → its SchedulerWorkflowID
	signals []string          // workflow IDs signalled
}

func (c *shardClient) ExecuteWorkflow(_ context.Context, o client.StartWorkflowOptions, _ any, args ...any) (client.WorkflowRun, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.starts[o.ID] = args[0].(*workflows.JobInput).SchedulerWorkflowID
	return nil, nil
}

func (c *shardClient) SignalWorkflow(_ context.Context, id, _, _ string, _ any) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.signals = append(c.signals, id)
	return nil
}

// TestClientShards: a job workflow is told its pool's scheduler shard, and
// a submission wakes every shard's scheduler.
func TestClientShards(t *testing.T) {
	fc := &shardClient{starts: map[string]string{}}
	c := workflows.NewClient(fc, workflows.ClientOptions{
		ShardOf: func(pool string) string {
			if pool == "b" {
				return "gpu-b"
			}
			return temporalx.DefaultShard
		},
		Shards: func() []string { return []string{temporalx.DefaultShard, "gpu-b"} },
	})
	ctx := context.Background()
	for job, pool := range map[string]string{"j1": "a", "j2": "b"} {
		if err := c.StartJob(ctx, job, temporalx.JobAttributes{Pool: pool}); err != nil {
			t.Fatal(err)
		}
	}
	if got := fc.starts[temporalx.JobWorkflowID("j2")]; got != "scheduler/gpu-b" {
		t.Errorf("j2 (pool b) told %q, want scheduler/gpu-b", got)
	}
	if got := fc.starts[temporalx.JobWorkflowID("j1")]; got != "scheduler/default" {
		t.Errorf("j1 (pool a) told %q, want scheduler/default", got)
	}
	if err := c.NotifySubmitted(ctx, "j2"); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		fc.mu.Lock()
		got := slices.Sorted(slices.Values(fc.signals))
		fc.mu.Unlock()
		if slices.Equal(got, []string{"scheduler/default", "scheduler/gpu-b"}) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("signalled %v, want both shards' schedulers", got)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
