package workflows_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/gpugov/gpugov/internal/temporalx"
	"github.com/gpugov/gpugov/internal/temporalx/temporaltest"
	"github.com/gpugov/gpugov/workflows"
)

// TestTwoReplicasStartAndReconcileAtOnce: two serve replicas (two Temporal
// connections, each with its background starter and its reconciler) start
// the same jobs' workflows at once, while some of those workflows close;
// every job has exactly one JobWorkflow execution — none duplicated, a
// closed one never started again — and none is lost (docs/design.md §10
// "Several replicas").
func TestTwoReplicasStartAndReconcileAtOnce(t *testing.T) {
	srv := temporaltest.Start(t)
	w := worker.New(srv.Client, temporalx.ServiceTaskQueue, worker.Options{})
	w.RegisterWorkflowWithOptions(recordingJobWorkflow, workflow.RegisterOptions{Name: workflows.JobWorkflowName})
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Stop)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	second, err := client.DialContext(ctx, client.Options{HostPort: srv.HostPort})
	if err != nil {
		t.Fatal(err)
	}
	defer second.Close()
	const n = 40
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("j-%02d", i)
	}
	jobs := listedJobs{ids: ids}
	var wg sync.WaitGroup
	for _, c := range []client.Client{srv.Client, second} {
		wf := workflows.NewClient(c, workflows.ClientOptions{JobInput: workflows.JobInput{Executor: workflows.ExecutorSimulated}})
		st := workflows.NewStarter(wf, workflows.StarterOptions{})
		wg.Go(func() {
			for _, id := range ids {
				st.Offer(id, temporalx.JobAttributes{Queue: "train"})
			}
			st.Close()
		})
		wg.Go(func() {
			for range 3 {
				if _, err := workflows.ReconcileJobWorkflows(ctx, jobs, wf, wf.Ledger()); err != nil {
					t.Error(err)
				}
			}
		})
		// Half the jobs end (cancelled) while the starts and passes go on.
		wg.Go(func() {
			for _, id := range ids[:n/2] {
				if err := wf.CancelJob(ctx, id, temporalx.JobAttributes{}, "alice", "done"); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	// The cancels may have come before a workflow existed: cancel again,
	// then reconcile once more, as the next pass would.
	wf := workflows.NewClient(second, workflows.ClientOptions{JobInput: workflows.JobInput{Executor: workflows.ExecutorSimulated}})
	for _, id := range ids[:n/2] {
		if err := wf.CancelJob(ctx, id, temporalx.JobAttributes{}, "alice", "done"); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := workflows.ReconcileJobWorkflows(ctx, jobs, wf, wf.Ledger()); err != nil {
		t.Fatal(err)
	}
	for _, id := range ids {
		q := fmt.Sprintf("WorkflowId = '%s'", temporalx.JobWorkflowID(id))
		deadline := time.Now().Add(30 * time.Second)
		for {
			resp, err := srv.Client.CountWorkflow(ctx, &workflowservice.CountWorkflowExecutionsRequest{Query: q})
			if err != nil {
				t.Fatal(err)
			}
			if resp.GetCount() == 1 {
				break
			}
			if resp.GetCount() > 1 || time.Now().After(deadline) {
				t.Fatalf("%s: %d executions, want exactly one", q, resp.GetCount())
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
}
