package workflows_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/gpugov/gpugov/internal/temporalx"
	"github.com/gpugov/gpugov/internal/temporalx/temporaltest"
	"github.com/gpugov/gpugov/workflows"
)

// recordingJobWorkflow stands in for workflows.JobWorkflow under its registered
// name: it waits for the cancel signal and returns its input and the signal,
// so the test sees exactly what the adapter sent. (The real workflow needs the
// store and an executor; it is tested in workflows/.)
func recordingJobWorkflow(ctx workflow.Context, in *workflows.JobInput) ([]string, error) {
	var sig temporalx.CancelSignal
	workflow.GetSignalChannel(ctx, temporalx.SignalCancel).Receive(ctx, &sig)
	return []string{in.JobID, in.Executor, sig.Actor, sig.Reason}, nil
}

// recordingScheduler counts the job-submitted signals that arrive within a
// second of the first one and returns the count.
func recordingScheduler(ctx workflow.Context) (int, error) {
	ch := workflow.GetSignalChannel(ctx, temporalx.SignalJobSubmitted)
	ch.Receive(ctx, nil)
	n := 1
	deadline := workflow.Now(ctx).Add(time.Second)
	for {
		left := deadline.Sub(workflow.Now(ctx))
		if left <= 0 {
			return n, nil
		}
		if ok, _ := ch.ReceiveWithTimeout(ctx, left, nil); !ok {
			return n, nil
		}
		n++
	}
}

// TestClientAgainstDevServer checks the job workflows' client on a real Temporal
// dev server: StartJob is idempotent while the workflow runs and after it
// closed, the search attributes are set, cancel carries actor and reason, and
// the scheduler gets job-submitted.
func TestClientAgainstDevServer(t *testing.T) {
	srv := temporaltest.Start(t)
	w := worker.New(srv.Client, temporalx.ServiceTaskQueue, worker.Options{})
	w.RegisterWorkflowWithOptions(recordingJobWorkflow, workflow.RegisterOptions{Name: workflows.JobWorkflowName})
	w.RegisterWorkflowWithOptions(recordingScheduler, workflow.RegisterOptions{Name: workflows.SchedulerWorkflowName})
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Stop)

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	tw := workflows.NewClient(srv.Client, workflows.ClientOptions{
		JobInput:         workflows.JobInput{Executor: workflows.ExecutorSimulated},
		SearchAttributes: true,
	})
	attrs := temporalx.JobAttributes{Queue: "train", Tier: "standard", Pool: "a100-east", State: "submitted"}
	if tw.Ledger().Confirmed("j-1") {
		t.Fatal("ledger holds j-1 before its start")
	}
	if err := tw.StartJob(ctx, "j-1", attrs); err != nil {
		t.Fatal(err)
	}
	if !tw.Ledger().Confirmed("j-1") {
		t.Fatal("ledger does not hold the start Temporal accepted")
	}
	first := describe(ctx, t, srv.Client, "job/j-1")
	if err := tw.StartJob(ctx, "j-1", attrs); err != nil {
		t.Fatalf("second start of a running workflow: %v", err)
	}
	if again := describe(ctx, t, srv.Client, "job/j-1"); again.runID != first.runID {
		t.Fatalf("second StartJob started run %s after %s", again.runID, first.runID)
	}
	if first.queue != "train" {
		t.Fatalf("GpugovQueue = %q", first.queue)
	}

	if err := tw.CancelJob(ctx, "j-1", attrs, "alice", "wrong data"); err != nil {
		t.Fatal(err)
	}
	var got []string
	if err := srv.Client.GetWorkflow(ctx, "job/j-1", "").Get(ctx, &got); err != nil {
		t.Fatal(err)
	}
	if want := []string{"j-1", "simulated", "alice", "wrong data"}; len(got) != 4 || got[0] != want[0] ||
		got[1] != want[1] || got[2] != want[2] || got[3] != want[3] {
		t.Fatalf("workflow saw %v, want %v", got, want)
	}
	// Closed: a retried submit must not start it again, and a late cancel is fine.
	if err := tw.StartJob(ctx, "j-1", attrs); err != nil {
		t.Fatalf("StartJob after close: %v", err)
	}
	if after := describe(ctx, t, srv.Client, "job/j-1"); after.runID != first.runID {
		t.Fatalf("closed workflow restarted: run %s", after.runID)
	}
	if err := tw.CancelJob(ctx, "j-1", attrs, "alice", "again"); err != nil {
		t.Fatalf("cancel of a closed workflow: %v", err)
	}

	// A job cancelled before its workflow was started (its submission
	// answered 202): the cancel starts the workflow with the job's
	// attributes, which receives the cancel, and the ledger holds it.
	if err := tw.CancelJob(ctx, "j-unstarted", attrs, "bob", "not needed"); err != nil {
		t.Fatalf("cancel of a job whose workflow was never started: %v", err)
	}
	if !tw.Ledger().Confirmed("j-unstarted") {
		t.Fatal("ledger does not hold the workflow the cancel started")
	}
	if err := srv.Client.GetWorkflow(ctx, "job/j-unstarted", "").Get(ctx, &got); err != nil {
		t.Fatalf("no workflow for the job cancelled before its start: %v", err)
	}
	if want := []string{"j-unstarted", "simulated", "bob", "not needed"}; len(got) != 4 || got[0] != want[0] ||
		got[2] != want[2] || got[3] != want[3] {
		t.Fatalf("workflow started by the cancel saw %v, want %v", got, want)
	}
	if d := describe(ctx, t, srv.Client, "job/j-unstarted"); d.queue != "train" {
		t.Fatalf("workflow started by the cancel has GpugovQueue %q, want train", d.queue)
	}

	// A job with a command runs on the placed node's agent, not the simulator.
	if err := tw.StartJob(ctx, "j-proc", temporalx.JobAttributes{Queue: "train", Tier: "standard", Pool: "a100-east",
		State: "submitted", Process: true}); err != nil {
		t.Fatal(err)
	}
	if err := tw.CancelJob(ctx, "j-proc", temporalx.JobAttributes{}, "alice", "done"); err != nil {
		t.Fatal(err)
	}
	if err := srv.Client.GetWorkflow(ctx, "job/j-proc", "").Get(ctx, &got); err != nil {
		t.Fatal(err)
	}
	if len(got) != 4 || got[1] != workflows.ExecutorNode {
		t.Fatalf("process job started with %v, want executor %q", got, workflows.ExecutorNode)
	}

	// No scheduler yet: the wake-up fails in the background, never in the request.
	if err := tw.NotifySubmitted(ctx, "j-2"); err != nil {
		t.Fatalf("NotifySubmitted with no scheduler: %v", err)
	}
	workflows.WaitWakeUps(tw)
	run, err := srv.Client.ExecuteWorkflow(ctx, client.StartWorkflowOptions{
		ID: temporalx.SchedulerWorkflowID(temporalx.DefaultShard), TaskQueue: temporalx.ServiceTaskQueue,
	}, workflows.SchedulerWorkflowName)
	if err != nil {
		t.Fatal(err)
	}
	// A burst of 50 submissions wakes the scheduler with far fewer signals.
	for i := range 50 {
		if err := tw.NotifySubmitted(ctx, fmt.Sprintf("j-%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	var signals int
	if err := run.Get(ctx, &signals); err != nil {
		t.Fatal(err)
	}
	if signals < 1 || signals > 5 {
		t.Fatalf("50 notifications sent %d job-submitted signals, want 1..5 (coalesced)", signals)
	}
}

type described struct{ runID, queue string }

func describe(ctx context.Context, t *testing.T, c client.Client, id string) described {
	t.Helper()
	d, err := c.DescribeWorkflow(ctx, id, "")
	if err != nil {
		t.Fatal(err)
	}
	info := d.RawResponse.GetWorkflowExecutionInfo()
	out := described{runID: info.GetExecution().GetRunId()}
	if p := info.GetSearchAttributes().GetIndexedFields()[temporalx.QueueKey.GetName()]; p != nil {
		if err := converter.GetDefaultDataConverter().FromPayload(p, &out.queue); err != nil {
			t.Fatal(err)
		}
	}
	return out
}
