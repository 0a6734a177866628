// Package activities holds gpugov's Temporal activities: methods on structs that
// hold their dependencies (store, Temporal client, clock), each taking one
// pointer input and returning one pointer result. Every activity is idempotent
// (DESIGN.md invariant 2): the store keys its effects by cycle ID, allocation ID
// or run ID, so a retried attempt after a worker crash changes nothing twice.
//
// Errors that a retry cannot fix (unknown job, a state conflict, invalid input)
// are returned as non-retryable application errors with the types below;
// everything else (database unreachable, deadline) is retried by Temporal.
package activities

import (
	"context"
	"errors"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/worker"

	"github.com/gpugov/gpugov/internal/policy"
	"github.com/gpugov/gpugov/internal/scheduling"
	"github.com/gpugov/gpugov/internal/temporalx"
	"github.com/gpugov/gpugov/internal/vocab"
	"github.com/gpugov/gpugov/store"
)

// Application error types of non-retryable activity errors.
const (
	ErrTypeNotFound     = "NotFound"     // the job, run or allocation does not exist
	ErrTypeConflict     = "Conflict"     // the request contradicts the stored state
	ErrTypeInvalidInput = "InvalidInput" // the input is malformed
)

// Store is the part of *store.Store the activities use.
type Store interface {
	LoadSnapshot(ctx context.Context, now time.Time) (*scheduling.Snapshot, error)
	ApplyCycle(ctx context.Context, cycleID string, res *scheduling.Result, now time.Time) (*store.CycleOutcome, error)
	ListJobs(ctx context.Context, f store.JobFilter) ([]store.Job, string, error)
	GetJob(ctx context.Context, id string) (*store.Job, error)
	CancelJob(ctx context.Context, jobID, actor, reason string) error
	MarkRunning(ctx context.Context, jobID, allocationID string, startStep int64, at time.Time) (string, error)
	FinishRun(ctx context.Context, jobID, runID string, outcome vocab.RunOutcome, detail string, at time.Time) error
	ReleasePlacement(ctx context.Context, jobID, allocationID string, outcome vocab.RunOutcome, detail string, at time.Time) error
}

var _ Store = (*store.Store)(nil)

// Signaler sends a signal to a workflow; client.Client satisfies it.
type Signaler interface {
	SignalWorkflow(ctx context.Context, workflowID, runID, signalName string, arg any) error
}

// PolicySource returns the policy version a scheduling cycle applies.
type PolicySource func(ctx context.Context) (*scheduling.Policy, error)

// Deps are the dependencies of every activity.
type Deps struct {
	Store Store
	// Temporal sends the wait-reason signals of scheduling cycles; nil means
	// they are not sent (job workflows then keep the reason they started with).
	Temporal Signaler
	// Policy gives each cycle's policy; nil means scheduling.DefaultPolicy.
	Policy PolicySource
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// Waker wakes schedulers when job activities release allocations; nil
	// means one built on Temporal (when Temporal is set) by Register.
	Waker Waker
	// Governance gives the policy in force (internal/policy: the protection
	// windows and project fair-share weights the scheduling cycle applies);
	// nil applies neither.
	Governance func() *policy.Policy
}

// Register registers the scheduler and job activities on w (the worker polling
// temporalx.ServiceTaskQueue, next to workflows.Register). Activity names are
// the method names: RunCycle, LoadJob, MarkRunning, FinishRun,
// ReleasePlacement, CancelJob.
func Register(w worker.ActivityRegistry, d Deps) {
	w.RegisterActivity(NewScheduler(d))
	if d.Waker == nil && d.Temporal != nil {
		d.Waker = temporalx.NewWaker(d.Temporal, 0, nil)
	}
	w.RegisterActivity(&Jobs{Store: d.Store, Now: d.Now, Waker: d.Waker})
}

// nonRetryable turns store errors a retry cannot fix (ErrNotFound,
// ErrConflict) into non-retryable application errors and passes others on.
func nonRetryable(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, store.ErrNotFound):
		return temporal.NewNonRetryableApplicationError(err.Error(), ErrTypeNotFound, err)
	case errors.Is(err, store.ErrConflict):
		return temporal.NewNonRetryableApplicationError(err.Error(), ErrTypeConflict, err)
	}
	return err
}

// invalidInput is the non-retryable error of a malformed activity input.
func invalidInput(msg string) error {
	return temporal.NewNonRetryableApplicationError(msg, ErrTypeInvalidInput, nil)
}

// clock returns now, or time.Now when now is nil.
func clock(now func() time.Time) time.Time {
	if now == nil {
		return time.Now()
	}
	return now()
}
