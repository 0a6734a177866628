package activities

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/gpugov/gpugov/internal/temporalx"
	"github.com/gpugov/gpugov/internal/vocab"
	"github.com/gpugov/gpugov/store"
)

// Jobs are the activities of one job's life cycle, called by JobWorkflow.
type Jobs struct {
	Store Store
	Now   func() time.Time // nil means time.Now
	// Waker, when set, wakes the scheduler named by FinishRunInput and
	// ReleasePlacementInput.SchedulerWorkflowID once their allocation is
	// released (coalesced; see temporalx.Waker).
	Waker Waker
}

// Waker asks for a wake-up signal to a scheduler workflow without waiting for
// it; *temporalx.Waker satisfies it.
type Waker interface {
	Wake(workflowID, signal string)
}

// wakeScheduler tells the scheduler that GPUs were freed, when the caller
// named one and a Waker is configured.
func (a *Jobs) wakeScheduler(schedulerWorkflowID string) {
	if a.Waker != nil && schedulerWorkflowID != "" {
		a.Waker.Wake(schedulerWorkflowID, temporalx.SignalAllocationReleased)
	}
}

// LoadJobInput names the job to load.
type LoadJobInput struct {
	JobID string
}

// LoadJobResult is what JobWorkflow needs to know about its job.
type LoadJobResult struct {
	JobID           string
	Project         string
	Queue           string
	Tier            string // tier name: production, key-project, standard, experiment
	Pool            string
	State           vocab.JobState
	CancelRequested bool
	// RunSeconds is the job's work in seconds, rounded up (the executor's last step).
	RunSeconds int64
	// CheckpointIntervalSeconds is the checkpoint interval in seconds of work;
	// 0 when the job is not checkpointable.
	CheckpointIntervalSeconds int64
	// ResumeStep is the step of the job's last valid checkpoint; 0 when none.
	ResumeStep int64
}

// LoadJob reads the job. An unknown job is a non-retryable NotFound error.
func (a *Jobs) LoadJob(ctx context.Context, in *LoadJobInput) (*LoadJobResult, error) {
	if in == nil || in.JobID == "" {
		return nil, invalidInput("load job: job ID is required")
	}
	j, err := a.Store.GetJob(ctx, in.JobID)
	if err != nil {
		return nil, nonRetryable(err)
	}
	res := &LoadJobResult{
		JobID:           j.ID,
		Project:         j.Project,
		Queue:           j.Queue,
		Tier:            j.Tier.String(),
		Pool:            j.Request.Pool,
		State:           j.State,
		CancelRequested: j.CancelRequested,
		RunSeconds:      int64(math.Ceil(j.RunSeconds)),
	}
	if j.Recovery.Checkpointable {
		res.CheckpointIntervalSeconds = j.Recovery.CheckpointIntervalSeconds
	}
	if cp := j.Recovery.LastCheckpoint; cp != nil {
		res.ResumeStep = cp.Step
	}
	return res, nil
}

// MarkRunningInput starts a run of a placed job on its allocation.
type MarkRunningInput struct {
	JobID        string
	AllocationID string
	StartStep    int64 // the step the run resumes from; 0 for a fresh start
}

// MarkRunningResult names the run created.
type MarkRunningResult struct {
	RunID     string
	StartedAt time.Time
}

// MarkRunning creates the run (idempotent per allocation: a retry returns the
// same run ID). A missing job or allocation, or an allocation that is released
// or belongs to another job, is a non-retryable error.
func (a *Jobs) MarkRunning(ctx context.Context, in *MarkRunningInput) (*MarkRunningResult, error) {
	if in == nil || in.JobID == "" || in.AllocationID == "" || in.StartStep < 0 {
		return nil, invalidInput("mark running: job ID, allocation ID and a start step ≥ 0 are required")
	}
	at := clock(a.Now)
	runID, err := a.Store.MarkRunning(ctx, in.JobID, in.AllocationID, in.StartStep, at)
	if err != nil {
		return nil, nonRetryable(err)
	}
	return &MarkRunningResult{RunID: runID, StartedAt: at}, nil
}

// FinishRunInput ends a run.
type FinishRunInput struct {
	JobID   string
	RunID   string
	Outcome vocab.RunOutcome // vocab.RunSucceeded, RunFailed, RunCancelled or RunPreempted
	Detail  string
	// SchedulerWorkflowID, when set, is woken once the allocation is released.
	SchedulerWorkflowID string
	// CrashResume is set when the run's last attempt resumed after its
	// executor crashed or its node agent restarted: that resume is evidence
	// for the job's recovery profile. nil otherwise (and in inputs recorded
	// before it existed).
	CrashResume *CrashResume `json:",omitempty"`
}

// CrashResume is what a run reported of its resume after a crash
// (executor.RunResult.ResumedAfterCrash): the checkpoint step the attempt
// resumed from, the step the run reached, and the step the job itself
// reported starting from (nil when it reported none).
type CrashResume struct {
	FromStep          int64
	Step              int64
	ReportedStartStep *int64 `json:",omitempty"`
}

// evidence is the resume evidence of a run that ended with outcome after
// the crash resume r, or false when it shows nothing either way (stopped on
// request before it progressed): a start at another step than the
// checkpoint's is wrong_step; progress past it (or success) is verified; a
// failure before progressing is failed.
func (r *CrashResume) evidence(outcome vocab.RunOutcome) (vocab.ResumeOutcome, string, bool) {
	switch {
	case r.ReportedStartStep != nil && *r.ReportedStartStep != r.FromStep:
		return vocab.ResumeWrongStep, fmt.Sprintf("resumed after a crash from checkpoint step %d, but the job reported starting at step %d",
			r.FromStep, *r.ReportedStartStep), true
	case r.Step > r.FromStep || outcome == vocab.RunSucceeded:
		return vocab.ResumeVerified, fmt.Sprintf("resumed after a crash at checkpoint step %d and progressed to step %d (run %s)",
			r.FromStep, r.Step, outcome), true
	case outcome == vocab.RunFailed:
		return vocab.ResumeFailed, fmt.Sprintf("resumed after a crash at checkpoint step %d and failed there", r.FromStep), true
	}
	return "", "", false
}

// FinishRunResult says when the run was finished.
type FinishRunResult struct {
	FinishedAt time.Time
}

// FinishRun ends the run and releases its allocation in one store
// transaction; a run already ended makes it a no-op, so retries are safe.
// When the run's last attempt resumed after a crash (in.CrashResume), that
// resume is then recorded as evidence of the job's recovery profile (key
// "crash/<run>", stored once).
func (a *Jobs) FinishRun(ctx context.Context, in *FinishRunInput) (*FinishRunResult, error) {
	if in == nil || in.JobID == "" || in.RunID == "" {
		return nil, invalidInput("finish run: job ID and run ID are required")
	}
	switch in.Outcome {
	case vocab.RunSucceeded, vocab.RunFailed, vocab.RunCancelled, vocab.RunPreempted:
	default:
		return nil, invalidInput(fmt.Sprintf("finish run %s: unknown outcome %q", in.RunID, in.Outcome))
	}
	at := clock(a.Now)
	if err := a.Store.FinishRun(ctx, in.JobID, in.RunID, in.Outcome, in.Detail, at); err != nil {
		return nil, nonRetryable(err)
	}
	if r := in.CrashResume; r != nil {
		// The crash resume is evidence for the job's recovery profile
		// (docs/design.md §5), once per run however often this is retried.
		if outcome, detail, ok := r.evidence(in.Outcome); ok {
			if err := a.Store.RecordResumeEvidence(ctx, store.ResumeEvidence{Key: "crash/" + in.RunID, JobID: in.JobID,
				Kind: vocab.EvidenceCrash, Outcome: outcome, At: at, Detail: detail}); err != nil {
				return nil, nonRetryable(err)
			}
		}
	}
	a.wakeScheduler(in.SchedulerWorkflowID)
	return &FinishRunResult{FinishedAt: at}, nil
}

// ReleasePlacementInput releases an allocation whose run never started.
type ReleasePlacementInput struct {
	JobID        string
	AllocationID string
	Outcome      vocab.RunOutcome // vocab.RunCancelled, RunFailed or RunRequeued
	Detail       string
	// SchedulerWorkflowID, when set, is woken once the allocation is released.
	SchedulerWorkflowID string
}

// ReleasePlacementResult says when the allocation was released.
type ReleasePlacementResult struct {
	ReleasedAt time.Time
}

// ReleasePlacement releases the allocation of a placed job that will not run
// on it (cancelled while placed, or its job workflow had already closed); an
// allocation already released makes it a no-op, so retries are safe.
func (a *Jobs) ReleasePlacement(ctx context.Context, in *ReleasePlacementInput) (*ReleasePlacementResult, error) {
	if in == nil || in.JobID == "" || in.AllocationID == "" {
		return nil, invalidInput("release placement: job ID and allocation ID are required")
	}
	switch in.Outcome {
	case vocab.RunCancelled, vocab.RunFailed, vocab.RunRequeued:
	default:
		return nil, invalidInput(fmt.Sprintf("release placement %s: unknown outcome %q", in.AllocationID, in.Outcome))
	}
	at := clock(a.Now)
	if err := a.Store.ReleasePlacement(ctx, in.JobID, in.AllocationID, in.Outcome, in.Detail, at); err != nil {
		return nil, nonRetryable(err)
	}
	a.wakeScheduler(in.SchedulerWorkflowID)
	return &ReleasePlacementResult{ReleasedAt: at}, nil
}

// CancelJobInput cancels a job in the store.
type CancelJobInput struct {
	JobID  string
	Actor  string
	Reason string
}

// CancelJobResult says whether the job had already ended otherwise.
type CancelJobResult struct {
	// AlreadyFinal is true when the job had succeeded or failed before the
	// cancellation, which then changed nothing.
	AlreadyFinal bool
}

// CancelJob records a cancellation in the store (idempotent: cancelling a
// cancelled job does nothing). JobWorkflow calls it when it is cancelled
// through Temporal rather than by the API, which cancels in the store itself.
func (a *Jobs) CancelJob(ctx context.Context, in *CancelJobInput) (*CancelJobResult, error) {
	if in == nil || in.JobID == "" {
		return nil, invalidInput("cancel job: job ID is required")
	}
	err := a.Store.CancelJob(ctx, in.JobID, in.Actor, in.Reason)
	if errors.Is(err, store.ErrConflict) {
		return &CancelJobResult{AlreadyFinal: true}, nil
	}
	if err != nil {
		return nil, nonRetryable(err)
	}
	return &CancelJobResult{}, nil
}
