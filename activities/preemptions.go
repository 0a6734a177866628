package activities

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.temporal.io/sdk/activity"

	"github.com/gpugov/gpugov/internal/accounting"
	"github.com/gpugov/gpugov/internal/policy"
	"github.com/gpugov/gpugov/internal/temporalx"
	"github.com/gpugov/gpugov/internal/vocab"
	"github.com/gpugov/gpugov/store"
)

// Preemptions are the activities of a PreemptionWorkflow, one per durable
// step, named as the Temporal UI shows the story: Notify, Checkpoint,
// Release, Reschedule, VerifyResume (and Abort when it stops early). Each is
// keyed by the preemption ID: the store keeps the first value of every step's
// time and decision, so a retried attempt after a worker crash changes
// nothing twice, and the signals it repeats are deduplicated by their
// receivers.
type Preemptions struct {
	d Deps
}

// PreemptionStep identifies the preemption a step works on.
type PreemptionStep struct {
	PreemptionID string
	WorkflowID   string // the PreemptionWorkflow's ID, which the victim answers
	VictimJobID  string
	ForJobID     string
	AllocationID string
}

// NotifyResult is what the notice did and the bounds of the next steps.
type NotifyResult struct {
	// Proceed is false when the preemption ended here: Outcome and Detail say why.
	Proceed    bool
	Outcome    vocab.PreemptionOutcome
	Detail     string
	RunID      string
	NotifiedAt time.Time
	GPUs       float64
	// GraceSeconds and ReleaseWithoutCheckpoint are the policy's (scheduling.PreemptionPolicy).
	GraceSeconds             float64
	ReleaseWithoutCheckpoint bool
	// VerifyResumeTimeoutSeconds and RecomputeTimeoutSeconds are the policy's (preemption.verify_resume_timeout_s, recompute_timeout_s).
	VerifyResumeTimeoutSeconds float64
	RecomputeTimeoutSeconds    float64
	// VictimQueue, VictimTier and Pool name the victim's queue, its tier and
	// the pool of the preempted allocation, for the workflow's search
	// attributes; set whether or not the preemption proceeds.
	VictimQueue string
	VictimTier  string
	Pool        string
}

// Notify is the first step. It re-reads the victim and ends the preemption
// (aborted_ineligible) when it became protected (job, queue or protection
// window), is not checkpointable or had its recovery evidence downgraded
// (a drill proceeds on a downgraded job: it is how the job earns evidence back),
// or (victim_ended) when its run or allocation already ended. Otherwise it
// records the notice (time, run, GPUs, aging credit, last valid checkpoint)
// and sends `preempt` to the victim's job workflow, which cancels its run
// activity so that the executor checkpoints and stops.
func (a *Preemptions) Notify(ctx context.Context, in *PreemptionStep) (*NotifyResult, error) {
	if in == nil || in.PreemptionID == "" {
		return nil, invalidInput("notify: preemption ID is required")
	}
	pol, err := a.d.policy(ctx)
	if err != nil {
		return nil, fmt.Errorf("notify %s: policy: %w", in.PreemptionID, err)
	}
	cfg := a.d.config()
	res := &NotifyResult{GraceSeconds: pol.Preemption.GraceSeconds, ReleaseWithoutCheckpoint: pol.Preemption.ReleaseWithoutCheckpoint,
		VerifyResumeTimeoutSeconds: cfg.Preemption.VerifyResumeTimeoutSeconds, RecomputeTimeoutSeconds: cfg.Preemption.RecomputeTimeoutSeconds}
	rec, err := a.d.Store.GetPreemption(ctx, in.PreemptionID)
	if err != nil {
		return nil, nonRetryable(err)
	}
	v, err := a.d.Store.GetPreemptionVictim(ctx, rec.ID)
	if err != nil {
		return nil, nonRetryable(err)
	}
	res.VictimQueue, res.VictimTier, res.Pool = v.Queue, v.Tier, v.Pool
	if rec.FinishedAt != nil {
		res.Outcome, res.Detail = rec.Outcome, "preemption already finished: "+rec.Detail
		return res, nil
	}
	if rec.NotifiedAt == nil {
		if outcome, why := a.ineligible(rec, v, cfg); outcome != "" {
			return a.stop(ctx, res, rec.ID, outcome, why)
		}
		if rec, err = a.d.Store.NoticePreemption(ctx, rec.ID, in.WorkflowID, a.d.now()); err != nil {
			return nil, nonRetryable(err)
		}
	}
	res.RunID, res.NotifiedAt, res.GPUs = rec.RunID, *rec.NotifiedAt, rec.GPUs
	err = a.d.signal(ctx, temporalx.JobWorkflowID(rec.VictimJobID), temporalx.SignalPreempt, temporalx.PreemptSignal{
		PreemptionID: rec.ID, WorkflowID: in.WorkflowID, ForJobID: rec.ForJobID, RunID: rec.RunID, Reason: rec.Reason})
	if errors.Is(err, errWorkflowGone) {
		return a.stop(ctx, res, rec.ID, vocab.PreemptionVictimEnded, "the victim's job workflow has closed")
	}
	if err != nil {
		return nil, fmt.Errorf("notify %s: %w", rec.ID, err)
	}
	res.Proceed = true
	return res, nil
}

// ineligible returns the outcome and reason that forbid touching the victim
// v now, or "" when it may be preempted.
func (a *Preemptions) ineligible(rec *store.PreemptionRecord, v *store.PreemptionVictim, cfg *policy.Policy) (vocab.PreemptionOutcome, string) {
	if rec.EndedAt != nil {
		return vocab.PreemptionVictimEnded, "the victim's allocation was released before the notice: " + rec.Detail
	}
	switch {
	case !v.AllocationLive || v.RunEnded || v.State.Final():
		return vocab.PreemptionVictimEnded, fmt.Sprintf("the victim is %s and its run or allocation has ended", v.State)
	case v.Protected:
		return vocab.PreemptionAbortedIneligible, "the victim job is protected"
	case v.QueueProtected:
		return vocab.PreemptionAbortedIneligible, "the victim's queue " + v.Queue + " is protected"
	case !v.Checkpointable:
		return vocab.PreemptionAbortedIneligible, "the victim is not checkpointable"
	case v.ResumeDowngraded && rec.Kind != vocab.PreemptionDrill:
		// A drill is how a downgraded job earns its evidence back.
		return vocab.PreemptionAbortedIneligible, "the victim's recovery evidence was downgraded by a wrong-step resume"
	}
	if w := cfg.InProtectionWindow(v.Queue, a.d.now()); w != "" {
		return vocab.PreemptionAbortedIneligible, "the victim's queue is inside protection window " + w
	}
	return "", ""
}

// stop ends the preemption at the notice with outcome.
func (a *Preemptions) stop(ctx context.Context, res *NotifyResult, id string, outcome vocab.PreemptionOutcome, why string) (*NotifyResult, error) {
	if err := a.d.Store.AbortPreemption(ctx, id, outcome, why, a.d.now()); err != nil {
		return nil, nonRetryable(err)
	}
	a.d.recordPreemption(ctx, id)
	res.Outcome, res.Detail = outcome, why
	return res, nil
}

// CheckpointInput is the checkpoint step's input: what the victim reported
// when its run stopped (nil when no report came within the grace period).
type CheckpointInput struct {
	PreemptionStep
	Stopped *temporalx.RunStoppedSignal
}

// CheckpointResult says whether the victim saved a checkpoint newer than
// the notice within the grace period.
type CheckpointResult struct {
	Came         bool
	Step         int64 // the saved checkpoint's step (the resume point); 0 when none
	StepAtNotice int64 // the step the run had reached when it stopped; -1 when unknown
	// VictimEnded is true when the run ended by itself (RunOutcome) rather
	// than on the notice.
	VictimEnded bool
	RunOutcome  vocab.RunOutcome
}

// Checkpoint is the second step, run once the victim reported its stop or
// the grace period passed: it compares the job's last valid checkpoint with
// the notice and records whether one came in time, the checkpoint the next
// run must resume from, and the step reached at the notice.
func (a *Preemptions) Checkpoint(ctx context.Context, in *CheckpointInput) (*CheckpointResult, error) {
	if in == nil || in.PreemptionID == "" {
		return nil, invalidInput("checkpoint: preemption ID is required")
	}
	var step *int64
	res := &CheckpointResult{StepAtNotice: -1}
	if s := in.Stopped; s != nil && s.Outcome == temporalx.StoppedPreempted && s.Step >= 0 {
		step = &s.Step
	}
	out, err := a.d.Store.RecordPreemptionCheckpoint(ctx, in.PreemptionID, step)
	if err != nil {
		return nil, nonRetryable(err)
	}
	res.Came, res.RunOutcome = out.Came, out.RunOutcome
	if cp := out.Record.SavedCheckpoint; cp != nil {
		res.Step = cp.Step
	}
	if out.Record.StepAtNotice != nil {
		res.StepAtNotice = *out.Record.StepAtNotice
	}
	if s := in.Stopped; s != nil && vocab.RunOutcome(s.Outcome).EndsJobAs() != "" {
		res.VictimEnded, res.RunOutcome = true, vocab.RunOutcome(s.Outcome)
	}
	res.VictimEnded = res.VictimEnded || res.RunOutcome != ""
	return res, nil
}

// AbortInput ends a preemption without release.
type AbortInput struct {
	PreemptionStep
	Outcome vocab.PreemptionOutcome // vocab.PreemptionAbortedNoCkpt or vocab.PreemptionVictimEnded
	Detail  string
	// ResumeVictim sends `preempt-aborted` so the victim runs again on the
	// allocation it still holds.
	ResumeVictim bool
}

// Abort ends the preemption with its outcome and, when the victim was
// stopped but keeps its GPUs, tells its job workflow to run again from its
// last checkpoint. A drill aborted because no checkpoint came within its
// grace records a failed resume for its recovery profile
// (store.RecordDrillEvidence).
func (a *Preemptions) Abort(ctx context.Context, in *AbortInput) error {
	if in == nil || in.PreemptionID == "" {
		return invalidInput("abort: preemption ID is required")
	}
	if err := a.d.Store.AbortPreemption(ctx, in.PreemptionID, in.Outcome, in.Detail, a.d.now()); err != nil {
		return nonRetryable(err)
	}
	a.d.recordPreemption(ctx, in.PreemptionID)
	// A drill whose victim saved nothing in its grace failed its save.
	if _, err := a.d.Store.RecordDrillEvidence(ctx, in.PreemptionID); err != nil {
		return nonRetryable(err)
	}
	if !in.ResumeVictim {
		return nil
	}
	err := a.d.signal(ctx, temporalx.JobWorkflowID(in.VictimJobID), temporalx.SignalPreemptAborted,
		temporalx.PreemptAbortedSignal{PreemptionID: in.PreemptionID, Reason: in.Detail})
	if errors.Is(err, errWorkflowGone) {
		return nil
	}
	return err
}

// ReleaseResult is what the release step did.
type ReleaseResult struct {
	ReleasedAt  time.Time
	GPUs        float64
	VictimEnded bool
	RunOutcome  vocab.RunOutcome
}

// Release is the third step: the victim's run ends preempted and its
// allocation is released in the store (FinishRun 'preempted', which also
// requeues the job keeping its aging), then the scheduler is told
// `allocation-released` so the trigger job is placed at once.
func (a *Preemptions) Release(ctx context.Context, in *PreemptionStep) (*ReleaseResult, error) {
	if in == nil || in.PreemptionID == "" {
		return nil, invalidInput("release: preemption ID is required")
	}
	detail := fmt.Sprintf("preempted for job %s by preemption %s", in.ForJobID, in.PreemptionID)
	if in.ForJobID == "" {
		detail = "stopped by resume drill " + in.PreemptionID
	}
	out, err := a.d.Store.ReleasePreempted(ctx, in.PreemptionID, detail, a.d.now())
	if err != nil {
		return nil, nonRetryable(err)
	}
	if !out.VictimEnded {
		a.d.tellScheduler(ctx, in.VictimJobID, in.AllocationID, vocab.RunPreempted)
	}
	return &ReleaseResult{ReleasedAt: out.ReleasedAt, GPUs: out.GPUs, VictimEnded: out.VictimEnded, RunOutcome: out.RunOutcome}, nil
}

// RescheduleResult is the victim's place in the queue after the requeue.
type RescheduleResult struct {
	State         string
	SubmitTime    time.Time
	AccruedAgingS float64
	AgingAtNotice float64
	WaitReason    string
	// Failure is set when the requeue lost the victim's aging credit.
	Failure string
}

// Reschedule is the fourth step: it checks the victim is back in the queue
// with its original submit time and at least the aging credit it had at the
// notice, and gives it the wait reason capacity_busy naming the preemption.
func (a *Preemptions) Reschedule(ctx context.Context, in *PreemptionStep) (*RescheduleResult, error) {
	if in == nil || in.PreemptionID == "" {
		return nil, invalidInput("reschedule: preemption ID is required")
	}
	rq, err := a.d.Store.RequeuePreempted(ctx, in.PreemptionID, a.d.now())
	if err != nil {
		return nil, nonRetryable(err)
	}
	res := &RescheduleResult{State: string(rq.State), SubmitTime: rq.SubmitTime, AccruedAgingS: rq.AccruedAgingS,
		AgingAtNotice: rq.AgingAtNotice, WaitReason: string(rq.Reason)}
	if rq.AccruedAgingS+1e-6 < rq.AgingAtNotice {
		res.Failure = fmt.Sprintf("aging credit fell from %.0f s to %.0f s on requeue", rq.AgingAtNotice, rq.AccruedAgingS)
	}
	return res, nil
}

// VerifyResumeInput is the last step's input.
type VerifyResumeInput struct {
	PreemptionStep
	// Resumed is the victim's report of its next run; nil when none came
	// within the verify-resume bound.
	Resumed                 *temporalx.ResumedSignal
	RecomputeTimeoutSeconds float64
	// Failures are the earlier steps' failures (no checkpoint in grace, aging lost).
	Failures []string
}

// VerifyResumeResult is the preemption's final record.
type VerifyResumeResult struct {
	Outcome          vocab.PreemptionOutcome
	ResumedCorrectly *bool
	RecomputeSeconds *float64
	LossGPUSeconds   float64
	Failures         []string
}

// VerifyResume is the fifth step. The victim's next run resumed correctly
// only if it started from the saved checkpoint's step (the victim's
// submitter gets its job.resumed notification then, store.NotifyResumed);
// it is a verified resume only if that run is then seen progressing past
// the saved step — a heartbeat or checkpoint beyond it, or its success —
// within the recompute bound. Meanwhile it waits (same bound) until that
// run passes the step reached at the notice, to measure the recompute time;
// it computes the effective run loss (accounting.EffectiveRunLoss) and
// records it all. A wrong-step resume is a failure that downgrades the
// job's recovery evidence; a correct start without progress is a failed
// resume (outcome resume_failed); either, and a verified resume, is
// evidence for the victim's recovery profile (store.FinishPreemption). No
// next run within the verify-resume bound is no evidence either way.
// A drill's resume is recorded there as evidence of kind drill
// (docs/design.md §5 "Resume drills").
func (a *Preemptions) VerifyResume(ctx context.Context, in *VerifyResumeInput) (*VerifyResumeResult, error) {
	if in == nil || in.PreemptionID == "" {
		return nil, invalidInput("verify resume: preemption ID is required")
	}
	rec, err := a.d.Store.GetPreemption(ctx, in.PreemptionID)
	if err != nil {
		return nil, nonRetryable(err)
	}
	if rec.FinishedAt != nil {
		return verifyResult(rec), nil
	}
	r := store.PreemptionResume{Outcome: vocab.PreemptionResumeNotObserved, Failures: append([]string(nil), in.Failures...)}
	li := accounting.LossInput{GPUs: rec.GPUs, Resumable: rec.SavedCheckpoint}
	if rec.NotifiedAt != nil {
		li.NotifiedAt = *rec.NotifiedAt
	}
	if rec.RunStartedAt != nil {
		li.RunStartedAt = *rec.RunStartedAt
	} else {
		li.RunStartedAt = li.NotifiedAt
	}
	if in.Resumed == nil {
		r.Failures = append(r.Failures, "no next run started within the verify-resume bound")
		r.Detail = "released; the next run was not observed"
	} else if err := a.observeResume(ctx, in, rec, &r, &li); err != nil {
		return nil, err
	}
	loss := accounting.EffectiveRunLoss(li)
	r.LostSeconds, r.SaveRestoreS, r.LossGPUSeconds = loss.LostSeconds, loss.SaveRestoreSeconds, loss.GPUSeconds
	if loss.RecomputeMeasured {
		r.RecomputeS = &loss.RecomputeSeconds
	}
	r.At = a.d.now()
	rec, err = a.d.Store.FinishPreemption(ctx, in.PreemptionID, r)
	if err != nil {
		return nil, nonRetryable(err)
	}
	a.d.recordPreemption(ctx, in.PreemptionID)
	return verifyResult(rec), nil
}

// observeResume checks the resumed run's start step, waits to see it
// progress past the saved step, and measures its recompute time into r and li.
func (a *Preemptions) observeResume(ctx context.Context, in *VerifyResumeInput, rec *store.PreemptionRecord,
	r *store.PreemptionResume, li *accounting.LossInput) error {
	run, err := a.d.Store.GetRunProgress(ctx, in.Resumed.RunID)
	if err != nil {
		return nonRetryable(err)
	}
	var saved int64
	if rec.SavedCheckpoint != nil {
		saved = rec.SavedCheckpoint.Step
	}
	started := run.StartedAt
	correct := run.StartStep == saved
	r.ResumedRunID, r.ResumedFromStep, r.ResumedAt, r.ResumedCorrectly = run.RunID, &run.StartStep, &started, &correct
	li.ResumedAt = started
	// The victim's submitter learns its job runs again (docs/design.md §3, notifications).
	if err := a.d.Store.NotifyResumed(ctx, store.ResumeObserved{PreemptionID: rec.ID, JobID: rec.VictimJobID, RunID: run.RunID,
		FromStep: run.StartStep, SavedStep: saved, Correct: correct, At: started}); err != nil {
		return err
	}
	if !correct {
		r.Outcome = vocab.PreemptionResumeFailed
		r.Failures = append(r.Failures, fmt.Sprintf("resumed from step %d, but the saved checkpoint is at step %d", run.StartStep, saved))
		r.Detail = "resume from the wrong step: recovery evidence downgraded"
		return nil
	}
	target := saved
	if rec.StepAtNotice != nil {
		target = max(*rec.StepAtNotice, saved)
	}
	seen, err := a.watchResumed(ctx, in, run, saved, target)
	if err != nil {
		return err
	}
	if seen.progressed == nil && seen.interrupted {
		// Cancelled or preempted before progressing: not a failed resume
		// (no evidence either way), the preemption itself completed.
		r.Interrupted = true
		r.Outcome, r.Detail = vocab.PreemptionCompleted, fmt.Sprintf("resumed at step %d; %s: the resume is unverified", saved, seen.why)
		return nil
	}
	if seen.progressed == nil {
		r.Outcome = vocab.PreemptionResumeFailed
		why := fmt.Sprintf("the next run started at the saved step %d but was not seen past it: %s", saved, seen.why)
		r.Failures = append(r.Failures, why)
		r.Detail = "resumed at step " + fmt.Sprint(saved) + " without progress: a failed resume"
		return nil
	}
	r.Progressed = true
	r.Outcome, r.Detail = vocab.PreemptionCompleted, fmt.Sprintf("resumed at step %d and progressed past it", saved)
	if seen.passed == nil {
		r.Failures = append(r.Failures, seen.why)
		r.Detail += "; " + seen.why
		return nil
	}
	r.PassedAt, li.PassedAt = seen.passed, *seen.passed
	r.Detail += fmt.Sprintf("; back past step %d after %.1f s", target, seen.passed.Sub(started).Seconds())
	return nil
}

// resumeSeen is what watchResumed saw of the resumed run: when it was first
// seen past the saved step (progressed) and when past the step reached at
// the notice (passed), each nil when not seen, with why when either is
// missing.
type resumeSeen struct {
	progressed, passed *time.Time
	why                string
	// interrupted: the run ended cancelled or preempted (stopped by
	// someone, not failing) before it was seen past the saved step.
	interrupted bool
}

// watchResumed polls the resumed run until it is seen both progressing past
// saved and back past target (the step reached at the notice; a run that
// starts there has passed it at its start), or it ends, or the recompute
// bound passes. Progress is a heartbeated step or a checkpoint beyond
// saved, or the run's success.
func (a *Preemptions) watchResumed(ctx context.Context, in *VerifyResumeInput, run *store.RunProgress, saved, target int64) (resumeSeen, error) {
	var seen resumeSeen
	if run.StartStep >= target {
		t := run.StartedAt
		seen.passed = &t
	}
	bound := policy.Seconds(in.RecomputeTimeoutSeconds)
	if bound <= 0 {
		bound = policy.Seconds(policy.DefaultRecomputeTimeoutSeconds)
	}
	deadline := time.Now().Add(bound)
	observe := func(step int64, at time.Time) {
		if seen.progressed == nil && step > saved {
			seen.progressed = &at
		}
		if seen.passed == nil && step >= target {
			seen.passed = &at
		}
	}
	for {
		activity.RecordHeartbeat(ctx, target)
		cur, err := a.d.Store.GetRunProgress(ctx, run.RunID)
		if err != nil {
			return seen, nonRetryable(err)
		}
		if cp := cur.LastCheckpoint; cp != nil {
			observe(cp.Step, cp.At)
		}
		if seen.progressed == nil || seen.passed == nil {
			if a.d.Progress != nil {
				if step, ok, err := a.d.Progress.RunStep(ctx, in.VictimJobID); err == nil && ok {
					observe(step, a.d.now())
				}
			}
		}
		if seen.progressed != nil && seen.passed != nil {
			return seen, nil
		}
		if cur.EndedAt != nil {
			if cur.Outcome == vocab.RunSucceeded {
				// It finished from the checkpoint: past every step.
				observe(max(saved, target)+1, *cur.EndedAt)
				return seen, nil
			}
			if seen.progressed == nil {
				seen.interrupted = cur.Outcome == vocab.RunCancelled || cur.Outcome == vocab.RunPreempted
				seen.why = fmt.Sprintf("the next run ended %s before progressing past step %d", cur.Outcome, saved)
			} else {
				seen.why = fmt.Sprintf("the next run ended %s before passing step %d", cur.Outcome, target)
			}
			return seen, nil
		}
		if time.Now().After(deadline) {
			if seen.progressed == nil {
				seen.why = fmt.Sprintf("no step past %d within %s", saved, bound)
			} else {
				seen.why = fmt.Sprintf("the next run did not pass step %d within %s", target, bound)
			}
			return seen, nil
		}
		select {
		case <-ctx.Done():
			return seen, ctx.Err()
		case <-time.After(a.d.poll()):
		}
	}
}

// verifyResult is the result of a finished record.
func verifyResult(rec *store.PreemptionRecord) *VerifyResumeResult {
	res := &VerifyResumeResult{Outcome: rec.Outcome, ResumedCorrectly: rec.ResumedCorrectly, RecomputeSeconds: rec.RecomputeSeconds,
		Failures: rec.Failures}
	if rec.EffectiveLossGPUSeconds != nil {
		res.LossGPUSeconds = *rec.EffectiveLossGPUSeconds
	}
	return res
}
