package workflows

import (
	"context"
	"errors"
	"fmt"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	"github.com/gpugov/gpugov/internal/temporalx"
)

// ExperimentSignal is an admin's decision on a running experiment, sent by
// SignalExperiment: Action is "abort" (temporalx.ExperimentAbort) or
// "promote" (temporalx.ExperimentPromote), with who and why (audited).
type ExperimentSignal struct {
	Action string
	Actor  string
	Reason string
}

// ExperimentStartOptions are the options of an experiment's
// ExperimentWorkflow: ID "experiment/<id>" on the service task queue; a
// running workflow with that ID is reused and one that completed is never
// started again, so a retried start is safe. One that failed (a
// non-retryable store error), timed out or was terminated may be started
// again: an experiment still holding its pools would otherwise hold them
// for good with nothing to take an abort; the new run resumes from the
// store (ReconcileExperimentWorkflows starts it).
func ExperimentStartOptions(id string) client.StartWorkflowOptions {
	return client.StartWorkflowOptions{
		ID:                       temporalx.ExperimentWorkflowID(id),
		TaskQueue:                temporalx.ServiceTaskQueue,
		WorkflowIDReusePolicy:    enumspb.WORKFLOW_ID_REUSE_POLICY_ALLOW_DUPLICATE_FAILED_ONLY,
		WorkflowIDConflictPolicy: enumspb.WORKFLOW_ID_CONFLICT_POLICY_USE_EXISTING,
	}
}

// StartExperiment starts the ExperimentWorkflow of the stored experiment id
// (store.CreateExperiment) with ExperimentStartOptions. The workflow sets
// its search attributes (GpugovPool, the scope's first pool, and
// GpugovExperimentState) once it has loaded the experiment. It is
// idempotent: a running workflow is reused and a completed one is not
// started again (both count as success); a failed one is started anew. It returns the client's error when the
// server refuses otherwise.
func StartExperiment(ctx context.Context, c client.Client, id string) error {
	if id == "" {
		return errors.New("start experiment: id is required")
	}
	opts := ExperimentStartOptions(id)
	_, err := c.ExecuteWorkflow(ctx, opts, ExperimentWorkflowName, &ExperimentInput{ID: id})
	if err != nil && !temporal.IsWorkflowExecutionAlreadyStartedError(err) {
		return fmt.Errorf("start %s: %w", opts.ID, err)
	}
	return nil
}

// SignalExperiment sends an admin's decision to experiment id's workflow
// (temporalx.SignalExperiment). An action other than abort or promote, or an
// empty actor, is an error before anything is sent. A workflow that has
// ended (or never started) is temporalx.ErrExperimentClosed; other failures
// are the client's error. The workflow acts on the signal in its own time:
// an abort at any point (the baseline is restored when the candidate was
// switched in), a promote only while it holds a kept candidate (otherwise
// it is logged and ignored; the API checks the stored state first).
func SignalExperiment(ctx context.Context, c client.Client, id string, s ExperimentSignal) error {
	if s.Action != temporalx.ExperimentAbort && s.Action != temporalx.ExperimentPromote {
		return fmt.Errorf("signal experiment %s: action %q is not %s or %s", id, s.Action,
			temporalx.ExperimentAbort, temporalx.ExperimentPromote)
	}
	if s.Actor == "" {
		return fmt.Errorf("signal experiment %s: actor is required", id)
	}
	wid := temporalx.ExperimentWorkflowID(id)
	err := c.SignalWorkflow(ctx, wid, "", temporalx.SignalExperiment,
		temporalx.ExperimentDecision{Action: s.Action, Actor: s.Actor, Reason: s.Reason})
	var nf *serviceerror.NotFound
	if errors.As(err, &nf) {
		return temporalx.ErrExperimentClosed
	}
	if err != nil {
		return fmt.Errorf("signal %s to %s: %w", temporalx.SignalExperiment, wid, err)
	}
	return nil
}

// ReconcileExperimentWorkflows starts the ExperimentWorkflow of every
// experiment that holds its pools (holding: the store's
// HoldingExperimentIDs), so that an experiment stored while Temporal did
// not answer the start, or whose start was lost with the process, gets its
// workflow, or a new run after its workflow failed. StartExperiment is
// idempotent: a running workflow is left as it is and a completed one is
// not started again. serve runs it with the job
// reconciler. It returns how many starts were asked for and an error
// joining the store's, if any, with the first failed start.
func ReconcileExperimentWorkflows(ctx context.Context, c client.Client, holding func(context.Context) ([]string, error)) (int, error) {
	ids, err := holding(ctx)
	if err != nil {
		return 0, fmt.Errorf("reconcile experiment workflows: %w", err)
	}
	var first error
	for _, id := range ids {
		if err := StartExperiment(ctx, c, id); err != nil && first == nil {
			first = fmt.Errorf("reconcile experiment workflows: %w", err)
		}
	}
	return len(ids), first
}
