package workflows_test

import (
	"context"
	"strings"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"

	"github.com/gpugov/gpugov/activities"
	"github.com/gpugov/gpugov/internal/policy"
	"github.com/gpugov/gpugov/internal/temporalx"
	"github.com/gpugov/gpugov/internal/temporalx/temporaltest"
	"github.com/gpugov/gpugov/internal/vocab"
	"github.com/gpugov/gpugov/workflows"
)

// TestNotificationDeliveryOnDevServer runs the delivery on a real Temporal
// server: one dispatcher pass starts vision's project workflow, whose first
// notification is answered 500 twice (its retries) and dead-lettered, and
// whose second is delivered after one 500. With GPUGOV_RECORD_HISTORIES=1
// it records both workflows' histories for the replay test.
func TestNotificationDeliveryOnDevServer(t *testing.T) {
	temporaltest.SkipShort(t)
	dev := temporaltest.Start(t)
	c := dev.Client
	hook := &scriptedHook{t: t, secret: []byte("wf-secret"), statuses: []int{500, 500, 500}}
	st, ids, cfg := notifyFixture(t, 2, 2, hook)
	cfg.Notifications.Delivery.InitialIntervalSeconds, cfg.Notifications.Delivery.MaxIntervalSeconds = 0.2, 0.2
	w := worker.New(c, temporalx.ServiceTaskQueue, worker.Options{})
	workflows.RegisterServiceWorker(w, activities.Deps{Store: st, Temporal: c, Governance: func() *policy.Policy { return cfg }})
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Stop)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	disp, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: "notifications-test", TaskQueue: temporalx.ServiceTaskQueue},
		workflows.NotificationDispatchWorkflowName, &workflows.NotificationDispatchInput{IterationsPerRun: 1})
	if err != nil {
		t.Fatal(err)
	}
	// The first run ends by continuing as new; stop the chain after it.
	waitFor(t, time.Minute, "dispatcher pass continued as new", func() bool {
		d, err := c.DescribeWorkflow(ctx, disp.GetID(), disp.GetRunID())
		return err == nil && d.RawResponse.GetWorkflowExecutionInfo().GetStatus() == enumspb.WORKFLOW_EXECUTION_STATUS_CONTINUED_AS_NEW
	})
	if err := c.TerminateWorkflow(ctx, disp.GetID(), "", "test over"); err != nil && !strings.Contains(err.Error(), "already completed") {
		t.Fatal(err)
	}
	var res workflows.NotifyProjectResult
	if err := c.GetWorkflow(ctx, temporalx.NotifyProjectWorkflowID("vision"), "").Get(ctx, &res); err != nil {
		t.Fatal(err)
	}
	if res.Dead != 1 || res.Delivered != 1 {
		t.Fatalf("project result %+v", res)
	}
	want := []string{ids[0], ids[0], ids[1], ids[1]}
	if got := hook.received(); strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("receiver got %q, want %q", got, want)
	}
	if n, _ := st.GetNotification(ctx, ids[0]); n.State != vocab.NotificationDead || n.LastError != "webhook answered 500" {
		t.Fatalf("dead letter %+v", n)
	}
	record(t, c, disp.GetID(), disp.GetRunID(), "notification-dispatch-pass")
	record(t, c, temporalx.NotifyProjectWorkflowID("vision"), "", "notify-project-retried-and-dead-lettered")
}
