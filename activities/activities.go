// Package activities holds gpugov's Temporal activities: methods on structs that
// hold their dependencies (store, Temporal client, clock), each taking one
// pointer input and returning one pointer result. Every activity is idempotent
// (docs/design.md invariant 2): the store keys its effects by cycle ID, allocation ID
// or run ID, so a retried attempt after a worker crash changes nothing twice.
//
// Errors that a retry cannot fix (unknown job, a state conflict, invalid input)
// are returned as non-retryable application errors with the types below;
// everything else (database unreachable, deadline) is retried by Temporal.
package activities

import (
	"context"
	"errors"
	"net/http"
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

// Store is the part of *store.Store the scheduling-cycle and job activities
// use. A store that lacks a method the cycle needs (recording observe-stage
// "would preempt" proposals, naming the victims' runs) does not compile as
// one, rather than having that step skipped.
type Store interface {
	// LoadShardSnapshot and ApplyShardCycle load and apply one scheduler
	// shard's pools (docs/design.md §4 "Scheduler shards").
	LoadShardSnapshot(ctx context.Context, shard string, now time.Time) (*scheduling.Snapshot, error)
	ApplyShardCycle(ctx context.Context, shard, cycleID string, res *scheduling.Result, now time.Time) (*store.CycleOutcome, error)
	ListJobs(ctx context.Context, f store.JobFilter) ([]store.Job, string, error)
	GetJob(ctx context.Context, id string) (*store.Job, error)
	CancelJob(ctx context.Context, jobID, actor, reason string) error
	MarkRunning(ctx context.Context, jobID, allocationID string, startStep int64, at time.Time) (string, error)
	FinishRun(ctx context.Context, jobID, runID string, outcome vocab.RunOutcome, detail string, at time.Time) error
	ReleasePlacement(ctx context.Context, jobID, allocationID string, outcome vocab.RunOutcome, detail string, at time.Time) error
	// RecordWouldPreempt stores the preemption proposals of observe-stage
	// pools as "would preempt" records (store.Store.RecordWouldPreempt).
	RecordWouldPreempt(ctx context.Context, cycleID string, props []scheduling.PreemptionProposal, now time.Time) (int, error)
	// PreemptionRunIDs names the runs on the allocations of started
	// preemptions, for their workflow IDs (store.Store.PreemptionRunIDs).
	PreemptionRunIDs(ctx context.Context, allocationIDs []string) (map[string]string, error)
	// RecordResumeEvidence stores a resume observed after a crash as
	// evidence of the job's recovery profile (store.Store.RecordResumeEvidence).
	RecordResumeEvidence(ctx context.Context, e store.ResumeEvidence) error
}

var _ Store = (*store.Store)(nil)

// ServiceStore is everything the activities of the service task queue use:
// Store (scheduling cycle, job runs), GovernanceStore (preemption and
// reclaim), NotificationStore (the notification outbox) and
// ExperimentStore (policy experiments). *store.Store implements it.
type ServiceStore interface {
	Store
	GovernanceStore
	NotificationStore
	ExperimentStore
}

var _ ServiceStore = (*store.Store)(nil)

// Signaler sends a signal to a workflow; client.Client satisfies it.
type Signaler interface {
	SignalWorkflow(ctx context.Context, workflowID, runID, signalName string, arg any) error
}

// JobSignalStarter sends a signal to a job's JobWorkflow, starting the
// workflow with it when it was never started, with the options and input of
// every start of a job's workflow; a closed workflow is not started again
// (an error matching temporalx.ErrJobWorkflowClosed).
// *workflows.Client implements it (SignalWithStartJob).
type JobSignalStarter interface {
	SignalWithStartJob(ctx context.Context, jobID string, attrs temporalx.JobAttributes, signal string, arg any) error
}

// PolicySource returns the policy version a scheduling cycle applies.
type PolicySource func(ctx context.Context) (*scheduling.Policy, error)

// Deps are the dependencies of every activity of the service task queue
// (scheduling cycle, job runs, preemption, reclaim); workflows.RegisterServiceWorker
// takes them.
type Deps struct {
	Store ServiceStore
	// Temporal sends the wait-reason signals of scheduling cycles and the
	// governance signals to job workflows (preempt, preempt-aborted, cancel)
	// and to the scheduler (allocation-released); nil sends none (job
	// workflows then keep the reason they started with).
	Temporal Signaler
	// JobStarter, when set, lets SignalPlacements start the workflow of a
	// placed job that has none yet, with its `placed` signal, instead of
	// releasing the placement (docs/design.md §3 step 2 "Wait"); serve
	// passes its workflows.Client. nil releases such placements.
	JobStarter JobSignalStarter
	// Policy gives each cycle's policy, the preemption grace period and the
	// no-checkpoint rule; nil means scheduling.DefaultPolicy.
	Policy PolicySource
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// Waker wakes schedulers when job activities release allocations; nil
	// means one built on Temporal (when Temporal is set) by Register.
	Waker Waker
	// Governance gives the policy in force (internal/policy; a
	// policy.Watcher's Current): the protection windows and project
	// fair-share weights every scheduling cycle applies, and the preemption
	// and reclaim settings; nil, or a nil result, means policy.Default() (no
	// protection window, equal project weights).
	Governance func() *policy.Policy
	// Progress reads runs' heartbeated steps for the preemption's recompute
	// measurement; nil uses only the store's evidence (checkpoints and run
	// ends). When it is also a RunHeartbeatSource (TemporalRunProgress is),
	// the reclaim scan reads the runs' last heartbeats from it.
	Progress RunProgressSource
	// PollInterval is how often waiting governance activities look again; 0
	// means 1 s.
	PollInterval time.Duration
	// SchedulerWorkflowID is the scheduler told about GPUs a preemption or
	// reclaim released; "" means the default shard's, or, with ShardOf,
	// the released job's pool's shard.
	SchedulerWorkflowID string
	// ShardOf, when set (and SchedulerWorkflowID is ""), names the
	// scheduler shard of a pool (docs/design.md §4 "Scheduler shards").
	ShardOf func(pool string) string
	// Metrics records final preemption outcomes and reclaims
	// (*telemetry.GovernanceMetrics); nil records nothing.
	Metrics GovernanceRecorder
	// HTTPClient sends webhook deliveries (each attempt is bounded by the
	// policy's notifications.delivery.timeout_s); nil means http.DefaultClient.
	HTTPClient *http.Client
	// CycleIntervalSeconds is the scheduler workflow's timer period
	// (SchedulerInput.CycleIntervalSeconds): every cycle's snapshot carries
	// it to date the "timer" next re-evaluation; 0 dates none.
	CycleIntervalSeconds int64
}

// Register registers every activity of the service task queue on w, on d:
// the scheduling cycle (RunCycle), the job activities (LoadJob, MarkRunning,
// FinishRun, ReleasePlacement, CancelJob), the preemption activities
// (Notify, Checkpoint, Release, Reschedule, VerifyResume, Abort) and the
// reclaim activities (ScanReclaims, AssessReclaim, NotifyOwner,
// AwaitConfirmation, RecordDispute, ReleaseReclaimed, CloseReclaim) and the
// notification activities (SweepNotifications, LoadNotifications,
// DeliverNotification, DeadLetterNotification) and the experiment
// activities (LoadExperiment, MeasureExperimentBaseline, SwitchExperiment,
// CheckExperiment, FinishExperiment, AbortExperiment, PromoteExperiment);
// the activity names are the method names. It is the activity half of
// workflows.RegisterServiceWorker, which a worker should call instead; the
// activities' own tests call it without the workflows.
func Register(w worker.ActivityRegistry, d Deps) {
	if d.Waker == nil && d.Temporal != nil {
		d.Waker = temporalx.NewWaker(d.Temporal, 0, nil)
	}
	w.RegisterActivity(NewScheduler(d))
	w.RegisterActivity(&Jobs{Store: d.Store, Now: d.Now, Waker: d.Waker})
	w.RegisterActivity(&Preemptions{d: d})
	w.RegisterActivity(&Reclaims{d: d})
	w.RegisterActivity(&Notifications{d: d})
	w.RegisterActivity(&ExperimentActivities{Store: d.Store, Now: d.Now, CycleIntervalSeconds: d.CycleIntervalSeconds,
		Governance: d.Governance, Metrics: d.Metrics})
}

// nonRetryable turns store errors a retry cannot fix (ErrNotFound,
// ErrConflict, ErrInvalid) into non-retryable application errors and passes
// others on.
func nonRetryable(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, store.ErrNotFound):
		return temporal.NewNonRetryableApplicationError(err.Error(), ErrTypeNotFound, err)
	case errors.Is(err, store.ErrConflict):
		return temporal.NewNonRetryableApplicationError(err.Error(), ErrTypeConflict, err)
	case errors.Is(err, store.ErrInvalid):
		return temporal.NewNonRetryableApplicationError(err.Error(), ErrTypeInvalidInput, err)
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
