// Package executor runs a job's run on its allocation. It fixes the run
// activity's contract (RunActivityName, RunInput, RunResult, Progress) shared by
// every executor — the simulated one here, and node agents, which register the
// same activity name on their node's task queue — and implements
// SimulatedExecutor, which stands in for the job's process in simulations, dev
// runs and tests.
package executor

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"

	"github.com/gpugov/gpugov/internal/scheduling"
	"github.com/gpugov/gpugov/internal/vocab"
)

// RunActivityName is the Temporal activity name of a run. JobWorkflow schedules
// it by this name on the executor's task queue, so any executor registering it
// can serve runs.
const RunActivityName = "ExecutorRun"

// RunInput is one run of a job on its allocation. A step is one second of the
// job's (uncompressed) work, so RunSeconds is also the job's last step.
type RunInput struct {
	JobID        string
	RunID        string // the store's run ID (from MarkRunning)
	AllocationID string
	Node         string                // node of the first GPU
	GPUs         []scheduling.GPUShare // GPUs (or GPU share) of the allocation
	RunSeconds   int64                 // the job's total work in seconds (= its last step); ≥ 0
	StartStep    int64                 // resume from this step (last valid checkpoint); 0 for a fresh start
	// CheckpointIntervalSeconds is the job's checkpoint interval in seconds of
	// work (steps); 0 means the job does not checkpoint.
	CheckpointIntervalSeconds int64
	// FailAtStep, when > 0, makes a simulated run exit with a failure on reaching
	// that step (a trace's failed job). Real executors ignore it.
	FailAtStep int64
}

// Progress is what a run heartbeats: the step reached and the last checkpoint
// written. A retried run attempt resumes from it.
type Progress struct {
	Step           int64
	LastCheckpoint *scheduling.Checkpoint // nil until the run (or an earlier one) wrote one
}

// RunResult is how a run ended.
type RunResult struct {
	Outcome   vocab.RunOutcome // vocab.RunSucceeded, RunFailed or RunCancelled
	Detail    string           // human-readable reason, with the steps
	StartStep int64            // the step this attempt started from
	Step      int64            // the step reached
	// LastCheckpoint is the last checkpoint written by this run (or the one it
	// resumed from); nil when none exists.
	LastCheckpoint *scheduling.Checkpoint
	// ResumedAfterCrash is true when this attempt resumed from an earlier
	// attempt's heartbeat (the worker running it crashed or stopped).
	ResumedAfterCrash bool
	// RecomputeSteps is the work redone after such a resume: the steps between the
	// checkpoint resumed from and the step the lost attempt had reached.
	RecomputeSteps int64
	// ReportedStartStep is the step the job itself reported starting from
	// (a process's started line); nil when it reported none (the simulated
	// executor starts where it is told). A value other than StartStep after
	// a crash is a resume from the wrong step.
	ReportedStartStep *int64 `json:",omitempty"`
}

// CheckpointRecorder stores a run's checkpoints (the store's RecordCheckpoint).
// It must be idempotent per (job, run, step): a resumed attempt may write the
// same checkpoint again. An error wrapping ErrCheckpointRefused says the
// checkpoint was checked and refused (docs/design.md §5 "Checked evidence"):
// offering it again cannot help.
type CheckpointRecorder interface {
	RecordCheckpoint(ctx context.Context, jobID, runID string, cp scheduling.Checkpoint) error
}

// RunCheckpointReader reads the last checkpoint stored for a run (the
// store's RunCheckpoint: nil when none). A CheckpointRecorder that also
// implements it lets a resumed attempt start from a checkpoint its lost
// predecessor saved after its last heartbeat reached Temporal.
type RunCheckpointReader interface {
	RunCheckpoint(ctx context.Context, jobID, runID string) (*scheduling.Checkpoint, error)
}

// ErrCheckpointRefused is wrapped by a CheckpointRecorder's error when the
// checkpoint was refused as evidence — a time in the future or before the
// run started, a step past the job's declared work or going backwards, a
// run whose allocation was released, or one older than the run's current
// checkpoint — rather than not delivered: an executor does not offer it
// again.
var ErrCheckpointRefused = errors.New("checkpoint refused")

// SimulatedExecutor runs a job by letting time pass: a run lasts RunSeconds /
// SpeedFactor of real time, heartbeats its step, writes checkpoints at the job's
// interval, stops early when cancelled, and resumes from its last heartbeated
// checkpoint when a retried attempt follows a worker crash.
type SimulatedExecutor struct {
	// Checkpoints receives the run's checkpoints; required when jobs checkpoint.
	Checkpoints CheckpointRecorder
	// SpeedFactor is seconds of job work done per real second; ≤ 0 means 1.
	SpeedFactor float64
	// HeartbeatInterval is the real time between heartbeats (and progress
	// checks); 0 means one second.
	HeartbeatInterval time.Duration
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// SkipFinalCheckpoint models a job that saves only at its interval: a
	// cancelled run (a preemption notice) stops without writing a checkpoint
	// of the step it reached. By default a checkpointable job writes one on
	// the way out, as a trainer does on SIGTERM.
	SkipFinalCheckpoint bool
}

// finalCheckpointTimeout bounds the write of a cancelled run's last checkpoint.
const finalCheckpointTimeout = 10 * time.Second

// Run executes one run. It returns a result for every way the job's run ends
// (succeeded, failed, cancelled). It returns an error — and Temporal retries the
// attempt, which resumes from the heartbeat — when a checkpoint cannot be
// written or the worker is stopping; a non-retryable error for invalid input.
func (e *SimulatedExecutor) Run(ctx context.Context, in *RunInput) (*RunResult, error) {
	if err := in.validate(); err != nil {
		return nil, temporal.NewNonRetryableApplicationError(err.Error(), "InvalidRunInput", err)
	}
	res := e.resumePoint(ctx, in)
	progress := Progress{Step: res.StartStep, LastCheckpoint: res.LastCheckpoint}
	began := e.now()
	stopping := activity.GetWorkerStopChannel(ctx)
	wait := time.NewTimer(0)
	defer wait.Stop()
	for first := true; ; first = false {
		progress.Step = e.stepAt(in, res.StartStep, began)
		if err := e.checkpointIfDue(ctx, in, res.StartStep, &progress); err != nil {
			return nil, err
		}
		res.Step, res.LastCheckpoint = progress.Step, progress.LastCheckpoint
		if in.FailAtStep > 0 && progress.Step >= in.FailAtStep {
			res.Outcome = vocab.RunFailed
			res.Detail = fmt.Sprintf("simulated job exited with an error at step %d of %d", progress.Step, in.RunSeconds)
			return res, nil
		}
		if progress.Step >= in.RunSeconds {
			res.Outcome = vocab.RunSucceeded
			res.Detail = fmt.Sprintf("completed %d steps (started at step %d)", in.RunSeconds, res.StartStep)
			return res, nil
		}
		// No heartbeat on the way out (the result carries the step and the
		// checkpoint) nor at a fresh attempt's start, which has nothing to
		// record: each heartbeat that reaches Temporal is a write of the
		// workflow's state, and a short run's only one was one of these
		// (docs/design.md "Throughput against the floor"). A resumed
		// attempt records its resume point at once.
		if !first || res.ResumedAfterCrash {
			activity.RecordHeartbeat(ctx, progress)
		}
		wait.Reset(e.untilNextCheck(in, progress.Step))
		select {
		case <-wait.C:
		case <-stopping:
			return nil, errWorkerStopping(in, progress.Step)
		case <-ctx.Done():
			if isClosed(stopping) {
				// The worker's shutdown cancels its activities' contexts: not a cancel request.
				return nil, errWorkerStopping(in, progress.Step)
			}
			if !errors.Is(ctx.Err(), context.Canceled) {
				return nil, ctx.Err()
			}
			return e.cancelled(ctx, in, res, &progress, began)
		}
	}
}

// cancelled ends a run stopped on request: a checkpointable job first saves
// the step it reached (unless SkipFinalCheckpoint), on a context detached
// from the cancelled one so that the save is not cut short. A save that
// fails is reported in the detail; the run still ends cancelled, with the
// older checkpoint as its last.
func (e *SimulatedExecutor) cancelled(ctx context.Context, in *RunInput, res *RunResult, p *Progress, began time.Time) (*RunResult, error) {
	p.Step = e.stepAt(in, res.StartStep, began)
	res.Outcome = vocab.RunCancelled
	res.Detail = fmt.Sprintf("cancelled at step %d of %d", p.Step, in.RunSeconds)
	if in.CheckpointIntervalSeconds > 0 && !e.SkipFinalCheckpoint && p.Step > res.StartStep &&
		(p.LastCheckpoint == nil || p.Step > p.LastCheckpoint.Step) && e.Checkpoints != nil {
		cp := scheduling.Checkpoint{At: e.now(), Step: p.Step,
			Location: fmt.Sprintf("sim://%s/%s/step-%d", in.JobID, in.RunID, p.Step)}
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), finalCheckpointTimeout)
		defer cancel()
		if err := e.Checkpoints.RecordCheckpoint(sctx, in.JobID, in.RunID, cp); err != nil {
			res.Detail += fmt.Sprintf("; final checkpoint at step %d not saved: %v", p.Step, err)
		} else {
			p.LastCheckpoint = &cp
			res.Detail += fmt.Sprintf("; checkpoint saved at step %d", p.Step)
		}
	}
	res.Step, res.LastCheckpoint = p.Step, p.LastCheckpoint
	return res, nil
}

// errWorkerStopping is the retryable error of an attempt cut short by its
// worker's shutdown; the retried attempt resumes from the heartbeat.
func errWorkerStopping(in *RunInput, step int64) error {
	return fmt.Errorf("worker stopping at step %d of job %s run %s", step, in.JobID, in.RunID)
}

// isClosed reports whether ch is closed, without blocking.
func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// validate rejects inputs no executor can run.
func (in *RunInput) validate() error {
	switch {
	case in == nil:
		return errors.New("run input is nil")
	case in.JobID == "" || in.RunID == "":
		return errors.New("run input needs a job ID and a run ID")
	case in.RunSeconds < 0 || in.StartStep < 0 || in.CheckpointIntervalSeconds < 0 || in.FailAtStep < 0:
		return fmt.Errorf("negative steps in run input of job %s", in.JobID)
	}
	return nil
}

// resumePoint decides where this attempt starts: at in.StartStep, or — when an
// earlier attempt of the same run heartbeated or this is a retry (its worker
// crashed) — at the last checkpoint that attempt reported or, when
// Checkpoints is a RunCheckpointReader, the run's stored checkpoint if that
// is newer, because the work after it died with the process. Without a newer
// checkpoint the job restarts from in.StartStep.
func (e *SimulatedExecutor) resumePoint(ctx context.Context, in *RunInput) *RunResult {
	res := &RunResult{StartStep: in.StartStep}
	var p Progress
	switch {
	case activity.HasHeartbeatDetails(ctx):
		if err := activity.GetHeartbeatDetails(ctx, &p); err != nil {
			activity.GetLogger(ctx).Warn("unreadable heartbeat details; restarting from the start step", "error", err)
			return res
		}
		res.ResumedAfterCrash = true
		if p.LastCheckpoint != nil && p.LastCheckpoint.Step > res.StartStep {
			res.StartStep = p.LastCheckpoint.Step
			res.LastCheckpoint = p.LastCheckpoint
		}
	case activity.GetInfo(ctx).Attempt <= 1:
		return res // a first attempt: nothing was lost
	}
	// Heartbeats reach Temporal throttled (or not at all before the first one):
	// the lost attempt may have saved a newer checkpoint after its last one.
	// Resume from the newer of the two.
	if r, ok := e.Checkpoints.(RunCheckpointReader); ok {
		stored, err := r.RunCheckpoint(ctx, in.JobID, in.RunID)
		switch {
		case err != nil:
			activity.GetLogger(ctx).Warn("stored checkpoint unreadable; resuming from the heartbeat's", "error", err)
		case stored != nil && stored.Step > res.StartStep:
			res.StartStep = stored.Step
			res.LastCheckpoint = stored
			res.ResumedAfterCrash = true
		}
	}
	res.RecomputeSteps = max(p.Step-res.StartStep, 0)
	return res
}

// stepAt is the step reached after the real time since began, at SpeedFactor,
// never beyond the job's last step nor the step at which it is set to fail.
func (e *SimulatedExecutor) stepAt(in *RunInput, start int64, began time.Time) int64 {
	done := math.Floor(e.now().Sub(began).Seconds() * e.speed())
	step := min(start+int64(done), in.RunSeconds)
	if in.FailAtStep > 0 {
		step = min(step, max(in.FailAtStep, start))
	}
	return step
}

// checkpointIfDue writes a checkpoint at the last interval boundary passed, if
// it is beyond the step the attempt started from (itself a checkpoint) and the
// last checkpoint, and records it in p.
func (e *SimulatedExecutor) checkpointIfDue(ctx context.Context, in *RunInput, start int64, p *Progress) error {
	iv := in.CheckpointIntervalSeconds
	if iv <= 0 {
		return nil
	}
	due := p.Step / iv * iv
	if due <= start || (p.LastCheckpoint != nil && due <= p.LastCheckpoint.Step) {
		return nil
	}
	if e.Checkpoints == nil {
		return temporal.NewNonRetryableApplicationError("simulated executor has no checkpoint recorder", "NoCheckpointRecorder", nil)
	}
	cp := scheduling.Checkpoint{
		At:       e.now(),
		Step:     due,
		Location: fmt.Sprintf("sim://%s/%s/step-%d", in.JobID, in.RunID, due),
	}
	if err := e.Checkpoints.RecordCheckpoint(ctx, in.JobID, in.RunID, cp); err != nil {
		return fmt.Errorf("record checkpoint of job %s run %s at step %d: %w", in.JobID, in.RunID, due, err)
	}
	p.LastCheckpoint = &cp
	return nil
}

// untilNextCheck is the real time to the next heartbeat, or sooner to the
// moment the run reaches its end, its failure step or its next checkpoint.
func (e *SimulatedExecutor) untilNextCheck(in *RunInput, step int64) time.Duration {
	next := in.RunSeconds
	if in.FailAtStep > step {
		next = min(next, in.FailAtStep)
	}
	if iv := in.CheckpointIntervalSeconds; iv > 0 {
		next = min(next, (step/iv+1)*iv)
	}
	d := time.Duration(float64(next-step) / e.speed() * float64(time.Second))
	return max(min(d, e.heartbeatInterval()), time.Millisecond)
}

func (e *SimulatedExecutor) speed() float64 {
	if e.SpeedFactor <= 0 {
		return 1
	}
	return e.SpeedFactor
}

func (e *SimulatedExecutor) heartbeatInterval() time.Duration {
	if e.HeartbeatInterval <= 0 {
		return time.Second
	}
	return e.HeartbeatInterval
}

func (e *SimulatedExecutor) now() time.Time {
	if e.Now == nil {
		return time.Now()
	}
	return e.Now()
}
