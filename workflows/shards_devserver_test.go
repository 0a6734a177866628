package workflows_test

import (
	"context"
	"strings"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"

	"github.com/gpugov/gpugov/internal/executor"
	"github.com/gpugov/gpugov/internal/scheduling"
	"github.com/gpugov/gpugov/internal/temporalx"
	"github.com/gpugov/gpugov/internal/temporalx/temporaltest"
	"github.com/gpugov/gpugov/internal/vocab"
	"github.com/gpugov/gpugov/store"
	"github.com/gpugov/gpugov/store/storetest"
	"github.com/gpugov/gpugov/workflows"
)

// TestShardsOnDevServer runs two scheduler shards on a real Temporal server:
// pool p1 in shard s1, p2 in s2, one GPU each and two jobs each, every job
// workflow told its pool's scheduler. Every job succeeds, each placed by a
// cycle of its own pool's shard (allocations.cycle_id), and each scheduler
// continues as new (the s2 history is recorded for the replay tests).
func TestShardsOnDevServer(t *testing.T) {
	dev := temporaltest.Start(t)
	c := dev.Client
	st, _ := storetest.NewStore(t, storetest.Fixture{
		Pools:  []scheduling.Pool{storetest.Pool("p1", vocab.StageObserve, 1, 1), storetest.Pool("p2", vocab.StageObserve, 1, 1)},
		Queues: []scheduling.Queue{storetest.TrainQueue},
	})
	ctx := context.Background()
	if _, err := st.SetPoolShards(ctx, map[string]string{"p1": "s1", "p2": "s2"}); err != nil {
		t.Fatal(err)
	}
	startWorkers(t, c, st, &executor.SimulatedExecutor{Checkpoints: st, SpeedFactor: 100, HeartbeatInterval: 100 * time.Millisecond})
	shardOf := map[string]string{"p1": "s1", "p2": "s2"}
	type started struct {
		job, pool string
		run       interface{ GetID() string }
	}
	var runs []*workflows.JobResult
	var jobs []started
	var waits []func() *workflows.JobResult
	for i := 0; i < 2; i++ {
		for _, pool := range []string{"p1", "p2"} {
			j := storetest.Submit(t, st, &store.NewJob{Project: "vision", Queue: testQueue, Tier: vocab.TierStandard, RunSeconds: 30,
				Request: scheduling.ResourceRequest{GPUs: 1, Pool: pool}})
			run := startJob(t, c, &workflows.JobInput{JobID: j.ID, SchedulerWorkflowID: temporalx.SchedulerWorkflowID(shardOf[pool])})
			jobs = append(jobs, started{j.ID, pool, run})
			waits = append(waits, func() *workflows.JobResult { return waitJob(t, run, time.Minute) })
		}
	}
	schedRun := map[string]string{}
	for _, shard := range []string{"s1", "s2"} {
		in := &workflows.SchedulerInput{Shard: shard, CycleIntervalSeconds: 1, IterationsPerRun: 6}
		run, err := workflows.StartScheduler(ctx, c, in)
		if err != nil {
			t.Fatal(err)
		}
		schedRun[shard] = run.GetRunID()
	}
	for _, w := range waits {
		runs = append(runs, w())
	}
	for i, res := range runs {
		if res.State != vocab.JobSucceeded {
			t.Fatalf("job %s: %+v, want succeeded", jobs[i].job, res)
		}
	}
	for _, j := range jobs {
		var cycle, pool string
		if err := st.Pool().QueryRow(ctx, `SELECT coalesce(cycle_id, ''), pool FROM allocations WHERE job_id = $1 ORDER BY granted_at LIMIT 1`,
			j.job).Scan(&cycle, &pool); err != nil {
			t.Fatal(err)
		}
		if pool != j.pool || !strings.HasPrefix(cycle, shardOf[j.pool]+"/") {
			t.Errorf("job %s of %s placed in %s by cycle %q, want a cycle of %s", j.job, j.pool, pool, cycle, shardOf[j.pool])
		}
	}
	for _, shard := range []string{"s1", "s2"} {
		id := temporalx.SchedulerWorkflowID(shard)
		waitFor(t, 30*time.Second, id+" continue-as-new", func() bool {
			d, err := c.DescribeWorkflow(ctx, id, schedRun[shard])
			return err == nil && d.RawResponse.GetWorkflowExecutionInfo().GetStatus() == enumspb.WORKFLOW_EXECUTION_STATUS_CONTINUED_AS_NEW
		})
	}
	record(t, c, temporalx.SchedulerWorkflowID("s2"), schedRun["s2"], "scheduler-shard-s2")
	for _, shard := range []string{"s1", "s2"} {
		if err := c.CancelWorkflow(ctx, temporalx.SchedulerWorkflowID(shard), ""); err != nil {
			t.Fatal(err)
		}
	}
}
