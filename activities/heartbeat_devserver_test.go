package activities_test

import (
	"context"
	"testing"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/gpugov/gpugov/activities"
	"github.com/gpugov/gpugov/internal/executor"
	"github.com/gpugov/gpugov/internal/temporalx"
	"github.com/gpugov/gpugov/internal/temporalx/temporaltest"
)

// lostRunWorkflow runs a run activity with a 2 s heartbeat timeout on its own
// task queue, the way JobWorkflow runs one on a node's queue.
func lostRunWorkflow(ctx workflow.Context) error {
	ctx = workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		TaskQueue: "lost-run", StartToCloseTimeout: time.Hour, HeartbeatTimeout: 2 * time.Second,
		RetryPolicy: &temporal.RetryPolicy{InitialInterval: time.Second, MaximumAttempts: 10},
	})
	return workflow.ExecuteActivity(ctx, executor.RunActivityName).Get(ctx, nil)
}

// TestLastHeartbeatSurvivesAHeartbeatTimeout: an executor heartbeats once and
// then goes silent (a frozen agent); Temporal times the attempt out and
// retries it, and the retries stay silent. Through those retries
// LastHeartbeat must keep answering with a time near the only heartbeat, so
// the age grows and a lost agent's run becomes a failed reclaim finding. (The
// dev server keeps the heartbeat time across retries; lastHeartbeatOf's
// fallback for a retry without one is covered by TestLastHeartbeatOf.)
func TestLastHeartbeatSurvivesAHeartbeatTimeout(t *testing.T) {
	dev := temporaltest.Start(t)
	c := dev.Client
	heartbeated := make(chan time.Time, 1)
	run := func(ctx context.Context) error {
		if activity.GetInfo(ctx).Attempt == 1 {
			activity.RecordHeartbeat(ctx, executor.Progress{Step: 1})
			heartbeated <- time.Now()
		}
		<-ctx.Done() // silent from now on, until the worker stops
		return ctx.Err()
	}
	w := worker.New(c, "lost-run", worker.Options{WorkerStopTimeout: time.Second})
	w.RegisterWorkflowWithOptions(lostRunWorkflow, workflow.RegisterOptions{Name: "lost-run"})
	w.RegisterActivityWithOptions(run, activity.RegisterOptions{Name: executor.RunActivityName})
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Stop)
	jobID := "lost-1"
	if _, err := c.ExecuteWorkflow(context.Background(), client.StartWorkflowOptions{ID: temporalx.JobWorkflowID(jobID), TaskQueue: "lost-run"}, "lost-run"); err != nil {
		t.Fatal(err)
	}
	var first time.Time
	select {
	case first = <-heartbeated:
	case <-time.After(30 * time.Second):
		t.Fatal("the run never heartbeated")
	}
	progress := activities.TemporalRunProgress{Client: c}
	deadline := time.Now().Add(60 * time.Second)
	for {
		at, ok, err := progress.LastHeartbeat(context.Background(), jobID)
		if err != nil {
			t.Fatal(err)
		}
		attempt := pendingAttempt(t, c, jobID)
		if ok && attempt >= 3 {
			// Either the heartbeat itself or the end of a timed-out attempt
			// (the retries heartbeat no more): never a time far from the
			// only heartbeat, so the age keeps growing.
			if at.Before(first.Add(-time.Second)) || at.After(first.Add(15*time.Second)) {
				t.Fatalf("last heartbeat %v, want within 15 s after the only one at %v", at, first)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no last heartbeat after the retry (attempt %d, ok %v)", attempt, ok)
		}
		if attempt >= 3 {
			t.Fatalf("attempt %d of the silent run has no last heartbeat", attempt)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// pendingAttempt returns the attempt of the job workflow's pending run
// activity, 0 when none is pending.
func pendingAttempt(t *testing.T, c client.Client, jobID string) int32 {
	t.Helper()
	d, err := c.DescribeWorkflow(context.Background(), temporalx.JobWorkflowID(jobID), "")
	if err != nil {
		t.Fatal(err)
	}
	for _, pa := range d.RawResponse.GetPendingActivities() {
		if pa.GetActivityType().GetName() == executor.RunActivityName {
			return pa.GetAttempt()
		}
	}
	return 0
}
