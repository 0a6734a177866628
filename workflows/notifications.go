package workflows

import (
	"errors"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/gpugov/gpugov/activities"
	"github.com/gpugov/gpugov/internal/policy"
	"github.com/gpugov/gpugov/internal/temporalx"
	"github.com/gpugov/gpugov/internal/vocab"
)

// Workflow type names of the notification delivery.
const (
	NotificationDispatchWorkflowName = "NotificationDispatchWorkflow"
	NotifyProjectWorkflowName        = "NotifyProjectWorkflow"
)

// NotificationDispatchInput starts (or continues) the dispatcher.
type NotificationDispatchInput struct {
	// IterationsPerRun is the number of passes after which the workflow
	// continues as new, bounding its history; 0 means 200.
	IterationsPerRun int
}

const defaultDispatchIterations = 200

// NotificationDispatchWorkflow (ID "notifications") delivers the outbox
// (docs/design.md §3, notifications): each pass SweepNotifications marks the
// notifications of projects without a webhook unrouted, prunes old final
// ones, and names the projects with pending notifications; the pass starts
// one NotifyProjectWorkflow per such project unless that project's is
// running (its ID is the project's, so one runs at a time and a project's
// deliveries stay in order, while a failing receiver delays only its own
// project). It then sleeps the policy's poll interval; after
// IterationsPerRun passes it continues as new. It returns only on
// cancellation.
func NotificationDispatchWorkflow(ctx workflow.Context, in *NotificationDispatchInput) error {
	next := NotificationDispatchInput{}
	if in != nil {
		next = *in
	}
	iters := next.IterationsPerRun
	if iters <= 0 {
		iters = defaultDispatchIterations
	}
	var acts *activities.Notifications
	for range iters {
		var sw activities.SweepResult
		if err := workflow.ExecuteActivity(governanceActivityCtx(ctx), acts.SweepNotifications, &activities.SweepInput{}).Get(ctx, &sw); err != nil {
			workflow.GetLogger(ctx).Error("notification sweep failed; retried at the next pass", "error", err)
		}
		startProjectDeliveries(ctx, sw.Projects)
		poll := secondsDuration(sw.Delivery.PollIntervalSeconds)
		if poll <= 0 {
			poll = secondsDuration(policy.DefaultNotifyPollIntervalS)
		}
		if err := workflow.Sleep(ctx, poll); err != nil {
			return err
		}
	}
	return workflow.NewContinueAsNewError(ctx, NotificationDispatchWorkflowName, &next)
}

// notifyChildOptions are the options of a project's delivery workflow: ID
// "notify/<project>", abandoned when the dispatcher continues as new, and
// refused while one for the project runs.
func notifyChildOptions(project string) workflow.ChildWorkflowOptions {
	return workflow.ChildWorkflowOptions{
		WorkflowID:            temporalx.NotifyProjectWorkflowID(project),
		TaskQueue:             temporalx.ServiceTaskQueue,
		ParentClosePolicy:     enumspb.PARENT_CLOSE_POLICY_ABANDON,
		WorkflowIDReusePolicy: enumspb.WORKFLOW_ID_REUSE_POLICY_ALLOW_DUPLICATE,
	}
}

// startProjectDeliveries starts a NotifyProjectWorkflow per project and
// waits for each to start (or be refused because one runs).
func startProjectDeliveries(ctx workflow.Context, projects []string) {
	futs := make([]workflow.ChildWorkflowFuture, len(projects))
	for i, p := range projects {
		futs[i] = workflow.ExecuteChildWorkflow(workflow.WithChildOptions(ctx, notifyChildOptions(p)),
			NotifyProjectWorkflowName, &NotifyProjectInput{Project: p})
	}
	for i, f := range futs {
		if err := f.GetChildWorkflowExecution().Get(ctx, nil); err != nil && !temporal.IsWorkflowExecutionAlreadyStartedError(err) {
			workflow.GetLogger(ctx).Error("project delivery not started", "project", projects[i], "error", err)
		}
	}
}

// NotifyProjectInput names the project whose notifications to deliver.
type NotifyProjectInput struct {
	Project string
	// BatchesPerRun is the number of batches after which the workflow
	// continues as new; 0 means 10.
	BatchesPerRun int
}

// NotifyProjectResult counts what one run did.
type NotifyProjectResult struct {
	Delivered, Dead, Other int
}

const (
	defaultNotifyBatches = 10
	notifyBatchSize      = 100
)

// NotifyProjectWorkflow (ID "notify/<project>") delivers a project's
// pending notifications one at a time in outbox order: LoadNotifications
// gives the next batch and the policy's schedule; each DeliverNotification
// activity is retried by Temporal with that schedule (initial interval,
// coefficient 2, maximum interval, max_attempts); when its last attempt
// fails, DeadLetterNotification records it dead with the last error and
// the next notification follows (a dead one does not block the project).
// It ends when a batch comes back empty, and continues as new after
// BatchesPerRun batches.
func NotifyProjectWorkflow(ctx workflow.Context, in *NotifyProjectInput) (*NotifyProjectResult, error) {
	if in == nil || in.Project == "" {
		return nil, temporal.NewNonRetryableApplicationError("notify project workflow: project is required", "InvalidInput", nil)
	}
	batches := in.BatchesPerRun
	if batches <= 0 {
		batches = defaultNotifyBatches
	}
	var acts *activities.Notifications
	res := &NotifyProjectResult{}
	actx := governanceActivityCtx(ctx)
	for range batches {
		var batch activities.LoadResult
		if err := workflow.ExecuteActivity(actx, acts.LoadNotifications,
			&activities.LoadInput{Project: in.Project, Limit: notifyBatchSize}).Get(ctx, &batch); err != nil {
			return nil, err
		}
		if len(batch.IDs) == 0 {
			return res, nil
		}
		dctx := deliveryActivityCtx(ctx, batch.Delivery)
		for _, id := range batch.IDs {
			var out activities.DeliverResult
			err := workflow.ExecuteActivity(dctx, acts.DeliverNotification,
				&activities.DeliverInput{ID: id, TimeoutSeconds: batch.Delivery.TimeoutSeconds}).Get(ctx, &out)
			if err != nil {
				if err := workflow.ExecuteActivity(actx, acts.DeadLetterNotification,
					&activities.DeadLetterInput{ID: id, Error: lastAttemptError(err)}).Get(ctx, &out); err != nil {
					return nil, err
				}
			}
			res.count(out)
		}
	}
	return nil, workflow.NewContinueAsNewError(ctx, NotifyProjectWorkflowName, &NotifyProjectInput{Project: in.Project, BatchesPerRun: in.BatchesPerRun})
}

func (r *NotifyProjectResult) count(out activities.DeliverResult) {
	switch out.State {
	case vocab.NotificationDelivered:
		r.Delivered++
	case vocab.NotificationDead:
		r.Dead++
	default:
		r.Other++
	}
}

// deliveryActivityCtx gives DeliverNotification the policy's retry schedule.
func deliveryActivityCtx(ctx workflow.Context, d activities.DeliverySettings) workflow.Context {
	def := policy.DefaultDelivery()
	attempts, initial, maxi, timeout := d.MaxAttempts, d.InitialIntervalSeconds, d.MaxIntervalSeconds, d.TimeoutSeconds
	if attempts <= 0 {
		attempts = def.MaxAttempts
	}
	if initial <= 0 {
		initial = def.InitialIntervalSeconds
	}
	if maxi < initial {
		maxi = max(initial, def.MaxIntervalSeconds)
	}
	if timeout <= 0 {
		timeout = def.TimeoutSeconds
	}
	return workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		// The HTTP attempt's bound plus the store's writes around it.
		StartToCloseTimeout: secondsDuration(timeout) + 30*time.Second,
		RetryPolicy: &temporal.RetryPolicy{InitialInterval: secondsDuration(initial), BackoffCoefficient: 2,
			MaximumInterval: secondsDuration(maxi), MaximumAttempts: int32(attempts)},
	})
}

// lastAttemptError is the message of the last attempt's failure inside an
// activity error (what the activity recorded, for a failed HTTP attempt),
// or the whole error (a timeout, which the activity could not record).
func lastAttemptError(err error) string {
	var app *temporal.ApplicationError
	if errors.As(err, &app) {
		return app.Message()
	}
	return err.Error()
}
