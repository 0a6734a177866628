package workflows

import (
	"context"
	"fmt"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"

	"github.com/gpugov/gpugov/internal/temporalx"
)

// StartScheduler starts the shard's SchedulerWorkflow on the service task
// queue, or returns the running one (so `serve` can call it at every start).
// It returns the client's error when the server refuses.
func StartScheduler(ctx context.Context, c client.Client, in *SchedulerInput) (client.WorkflowRun, error) {
	in = schedulerInput(in)
	run, err := c.ExecuteWorkflow(ctx, schedulerStartOptions(in), SchedulerWorkflowName, in)
	if err != nil {
		return nil, fmt.Errorf("start scheduler %s: %w", in.Shard, err)
	}
	return run, nil
}

// SignalScheduler sends a wake-up signal (temporalx.SignalJobSubmitted,
// SignalAllocationReleased or SignalInventoryChanged) to the shard's
// scheduler, starting it with in when it is not running, so a submission never
// waits on a scheduler that is absent.
func SignalScheduler(ctx context.Context, c client.Client, in *SchedulerInput, signal string, arg any) error {
	in = schedulerInput(in)
	_, err := c.SignalWithStartWorkflow(ctx, temporalx.SchedulerWorkflowID(in.Shard), signal, arg,
		schedulerStartOptions(in), SchedulerWorkflowName, in)
	if err != nil {
		return fmt.Errorf("signal scheduler %s with %s: %w", in.Shard, signal, err)
	}
	return nil
}

// JobStartOptions are the options every start of a job's JobWorkflow uses:
// ID "job/<id>" on the service task queue; a running workflow with that ID is
// reused (conflict policy use-existing) and a closed one is never started
// again (reuse policy reject-duplicate), so a retried submission or the
// reconciler may start it any number of times; eager start hands the first
// workflow task to a worker of the same process when the server allows it.
// Callers may add search attributes.
func JobStartOptions(jobID string) client.StartWorkflowOptions {
	return client.StartWorkflowOptions{
		ID:                       temporalx.JobWorkflowID(jobID),
		TaskQueue:                temporalx.ServiceTaskQueue,
		WorkflowIDReusePolicy:    enumspb.WORKFLOW_ID_REUSE_POLICY_REJECT_DUPLICATE,
		WorkflowIDConflictPolicy: enumspb.WORKFLOW_ID_CONFLICT_POLICY_USE_EXISTING,
		EnableEagerStart:         true,
	}
}

// StartJob starts the job's JobWorkflow with JobStartOptions; when it already
// runs (a retried submission), the running one is returned. It returns the
// client's error when the server refuses, including Temporal's "already
// started" error for a job whose workflow has closed.
func StartJob(ctx context.Context, c client.Client, in *JobInput) (client.WorkflowRun, error) {
	if in == nil || in.JobID == "" {
		return nil, fmt.Errorf("start job workflow: job ID is required")
	}
	run, err := c.ExecuteWorkflow(ctx, JobStartOptions(in.JobID), JobWorkflowName, in)
	if err != nil {
		return nil, fmt.Errorf("start job workflow %s: %w", in.JobID, err)
	}
	return run, nil
}

// schedulerInput returns in, or an empty input, with its shard defaulted.
func schedulerInput(in *SchedulerInput) *SchedulerInput {
	out := SchedulerInput{}
	if in != nil {
		out = *in
	}
	if out.Shard == "" {
		out.Shard = temporalx.DefaultShard
	}
	return &out
}

func schedulerStartOptions(in *SchedulerInput) client.StartWorkflowOptions {
	return client.StartWorkflowOptions{
		ID:                       temporalx.SchedulerWorkflowID(in.Shard),
		TaskQueue:                temporalx.ServiceTaskQueue,
		WorkflowIDConflictPolicy: enumspb.WORKFLOW_ID_CONFLICT_POLICY_USE_EXISTING,
	}
}
