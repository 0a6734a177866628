package workflows

import (
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/gpugov/gpugov/internal/temporalx"
)

// abandonedChildOptions are the options of a child workflow that outlives
// its parent's run (continue-as-new, docs/design.md §3): ID id on the
// service task queue, abandoned when the parent closes, with the given ID
// reuse policy deciding whether a finished one with that ID may run again.
func abandonedChildOptions(id string, reuse enumspb.WorkflowIdReusePolicy) workflow.ChildWorkflowOptions {
	return workflow.ChildWorkflowOptions{
		WorkflowID:            id,
		TaskQueue:             temporalx.ServiceTaskQueue,
		ParentClosePolicy:     enumspb.PARENT_CLOSE_POLICY_ABANDON,
		WorkflowIDReusePolicy: reuse,
	}
}

// awaitChildStarts waits until each child in futs has started, so that none
// is lost to the parent's continue-as-new. A child refused because one with
// its ID runs (or, under REJECT_DUPLICATE, ran) is no error; any other
// failure is logged as msg with key set to name(i) of the i-th child.
func awaitChildStarts(ctx workflow.Context, futs []workflow.ChildWorkflowFuture, msg, key string, name func(i int) string) {
	for i, f := range futs {
		if err := f.GetChildWorkflowExecution().Get(ctx, nil); err != nil && !temporal.IsWorkflowExecutionAlreadyStartedError(err) {
			workflow.GetLogger(ctx).Error(msg, key, name(i), "error", err)
		}
	}
}

// runPasses runs pass iters times (iters <= 0: defaultIters), sleeping after
// each for the seconds pass returns (<= 0: fallbackSeconds). It is the loop
// of the periodic workflows (reclaim scan, notification dispatch) before
// they continue as new; it returns the sleep's error on cancellation.
func runPasses(ctx workflow.Context, iters, defaultIters int, fallbackSeconds float64, pass func() float64) error {
	if iters <= 0 {
		iters = defaultIters
	}
	for range iters {
		wait := secondsDuration(pass())
		if wait <= 0 {
			wait = secondsDuration(fallbackSeconds)
		}
		if err := workflow.Sleep(ctx, wait); err != nil {
			return err
		}
	}
	return nil
}
