package api

import (
	"context"
	"errors"
	"fmt"

	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	"github.com/gpugov/gpugov/internal/temporalx"
	"github.com/gpugov/gpugov/workflows"
)

// TemporalWorkflows implements Workflows with a Temporal client. Names (task
// queue, workflow IDs, signals, search attributes) come from temporalx and
// workflows so that the API, the worker and the Temporal UI agree.
type TemporalWorkflows struct {
	client client.Client
	opts   TemporalOptions
	waker  *temporalx.Waker
}

// TemporalOptions configures TemporalWorkflows.
type TemporalOptions struct {
	// JobInput is the template of every JobWorkflow's input (executor,
	// heartbeat timeout, run attempts); StartJob sets its JobID.
	JobInput workflows.JobInput
	// SchedulerWorkflowID is the scheduler NotifySubmitted signals; "" means
	// the default shard's, "scheduler/default".
	SchedulerWorkflowID string
	// SearchAttributes makes StartJob attach GpugovQueue, GpugovTier,
	// GpugovPool and GpugovJobState; they must be registered on the namespace
	// (temporalx.RegisterSearchAttributes), or the start fails.
	SearchAttributes bool
}

// NewTemporalWorkflows returns the Temporal implementation of Workflows.
func NewTemporalWorkflows(c client.Client, o TemporalOptions) *TemporalWorkflows {
	if o.SchedulerWorkflowID == "" {
		o.SchedulerWorkflowID = temporalx.SchedulerWorkflowID(temporalx.DefaultShard)
	}
	return &TemporalWorkflows{client: c, opts: o, waker: temporalx.NewWaker(c, 0, nil)}
}

// StartJob starts JobWorkflow with workflows.JobStartOptions (ID "job/<id>").
// It is idempotent: a running workflow with that ID is reused and a closed one
// is never started again (its "already started" answer counts as success),
// so a retried submit, or the reconciler, may call it any number of times.
func (t *TemporalWorkflows) StartJob(ctx context.Context, jobID string, attrs JobAttributes) error {
	opts := workflows.JobStartOptions(jobID)
	if t.opts.SearchAttributes {
		opts.TypedSearchAttributes = temporal.NewSearchAttributes(
			temporalx.QueueKey.ValueSet(attrs.Queue),
			temporalx.TierKey.ValueSet(attrs.Tier),
			temporalx.PoolKey.ValueSet(attrs.Pool),
			temporalx.JobStateKey.ValueSet(attrs.State),
		)
	}
	in := t.opts.JobInput
	in.JobID = jobID
	if attrs.Process {
		in.Executor = workflows.ExecutorNode
	}
	_, err := t.client.ExecuteWorkflow(ctx, opts, workflows.JobWorkflowName, &in)
	if err != nil && !temporal.IsWorkflowExecutionAlreadyStartedError(err) {
		return fmt.Errorf("start %s: %w", opts.ID, err)
	}
	return nil
}

// CancelJob sends the "cancel" signal, with who and why, to the job's
// workflow. A workflow that has already closed is not an error: there is
// nothing left to stop.
func (t *TemporalWorkflows) CancelJob(ctx context.Context, jobID, actor, reason string) error {
	id := temporalx.JobWorkflowID(jobID)
	err := t.client.SignalWorkflow(ctx, id, "", temporalx.SignalCancel, temporalx.CancelSignal{Actor: actor, Reason: reason})
	var notFound *serviceerror.NotFound
	if err != nil && !errors.As(err, &notFound) {
		return fmt.Errorf("signal %s to %s: %w", temporalx.SignalCancel, id, err)
	}
	return nil
}

// NotifySubmitted asks for "job-submitted" to be sent to the scheduler
// workflow so that a scheduling cycle runs now rather than at its next timer.
// It does not wait: signals are coalesced by a temporalx.Waker (a burst of
// submissions costs about one signal per 250 ms, not one each), and a failed
// signal is only logged, since the scheduler's timer runs a cycle anyway. The
// scheduler is started by serve, not here, because its input belongs to
// serve's config. It always returns nil.
func (t *TemporalWorkflows) NotifySubmitted(_ context.Context, _ string) error {
	t.waker.Wake(t.opts.SchedulerWorkflowID, temporalx.SignalJobSubmitted)
	return nil
}
