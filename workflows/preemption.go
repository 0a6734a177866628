package workflows

import (
	"fmt"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/gpugov/gpugov/activities"
	"github.com/gpugov/gpugov/internal/temporalx"
	"github.com/gpugov/gpugov/internal/vocab"
)

// Workflow type names of preemption and reclaim.
const (
	PreemptionWorkflowName  = "PreemptionWorkflow"
	ReclaimWorkflowName     = "ReclaimWorkflow"
	ReclaimScanWorkflowName = "ReclaimScanWorkflow"
)

// PreemptionInput starts a PreemptionWorkflow for one preemption a
// scheduling cycle opened (activities.StartedPreemption).
type PreemptionInput struct {
	PreemptionID string
	ForJobID     string
	VictimJobID  string
	AllocationID string
	RunID        string // the victim's run; "" when it was placed but not running
}

// PreemptionResult is how a preemption ended (the full record is the store's).
type PreemptionResult struct {
	PreemptionID     string
	Outcome          vocab.PreemptionOutcome
	Detail           string
	CheckpointCame   bool
	ResumedCorrectly *bool
	LossGPUSeconds   float64
	Failures         []string
}

// verifyResumeHeartbeat is the VerifyResume activity's heartbeat timeout.
const verifyResumeHeartbeat = 30 * time.Second

// PreemptionWorkflow (ID "preempt/<victim>/<run>/<preemption>") carries out one
// preemption, one activity per durable step (docs/design.md §3 step 4):
//
//  1. Notify re-checks the victim (aborting if it became protected or not
//     checkpointable) and sends it `preempt`; its job workflow cancels the run
//     activity, the executor checkpoints and stops, and the job workflow
//     answers `run-stopped`.
//  2. Checkpoint, once that answer came or the policy's grace period passed,
//     records whether a checkpoint newer than the notice came. Without one the
//     policy decides: release anyway (the loss counts the lost work) or Abort,
//     which tells the victim to run again on the GPUs it still holds.
//  3. Release ends the victim's run as preempted, releasing its allocation,
//     and wakes the scheduler, which places the trigger job.
//  4. Reschedule checks the victim is requeued with its submit time and
//     aging credit and gives it its wait reason.
//  5. VerifyResume, once the victim's next run reports its start (`resumed`,
//     bounded by config), checks it started from the saved step — a wrong
//     step downgrades the job's recovery evidence — measures the recompute
//     time and records the effective run loss.
//
// After Notify it sets the search attributes GpugovQueue, GpugovTier (the
// victim's) and GpugovPool (version governanceAttrsChange). Signals from the
// victim for another preemption, and repeats, are ignored.
func PreemptionWorkflow(ctx workflow.Context, in *PreemptionInput) (*PreemptionResult, error) {
	if in == nil || in.PreemptionID == "" || in.VictimJobID == "" {
		return nil, temporal.NewNonRetryableApplicationError("preemption workflow: preemption and victim IDs are required", "InvalidInput", nil)
	}
	p := &preemptionFlow{in: in, stoppedCh: workflow.GetSignalChannel(ctx, temporalx.SignalRunStopped),
		resumedCh: workflow.GetSignalChannel(ctx, temporalx.SignalResumed)}
	p.step = activities.PreemptionStep{PreemptionID: in.PreemptionID, WorkflowID: workflow.GetInfo(ctx).WorkflowExecution.ID,
		VictimJobID: in.VictimJobID, ForJobID: in.ForJobID, AllocationID: in.AllocationID}
	res := &PreemptionResult{PreemptionID: in.PreemptionID}
	actx := governanceActivityCtx(ctx)

	var n activities.NotifyResult
	if err := workflow.ExecuteActivity(actx, p.acts.Notify, &p.step).Get(ctx, &n); err != nil {
		return nil, err
	}
	upsertGovernanceAttrs(ctx, n.VictimQueue, n.VictimTier, n.Pool)
	if !n.Proceed {
		res.Outcome, res.Detail = n.Outcome, n.Detail
		return res, nil
	}
	stopped := p.awaitSignal(ctx, p.stoppedCh, secondsDuration(n.GraceSeconds), &temporalx.RunStoppedSignal{})
	var cp activities.CheckpointResult
	cin := &activities.CheckpointInput{PreemptionStep: p.step}
	if stopped != nil {
		cin.Stopped = stopped.(*temporalx.RunStoppedSignal)
	}
	if err := workflow.ExecuteActivity(actx, p.acts.Checkpoint, cin).Get(ctx, &cp); err != nil {
		return nil, err
	}
	res.CheckpointCame = cp.Came
	var failures []string
	switch {
	case cp.VictimEnded:
		return p.abort(ctx, res, vocab.PreemptionVictimEnded, "the victim's run ended "+string(cp.RunOutcome)+" before its release", false)
	case !cp.Came && !n.ReleaseWithoutCheckpoint:
		return p.abort(ctx, res, vocab.PreemptionAbortedNoCkpt,
			fmt.Sprintf("no checkpoint newer than the notice within the %.0f s grace period; policy: abort", n.GraceSeconds), true)
	case !cp.Came:
		failures = append(failures, fmt.Sprintf("no checkpoint newer than the notice within the %.0f s grace period; released anyway, lost work counted", n.GraceSeconds))
	}
	var rel activities.ReleaseResult
	if err := workflow.ExecuteActivity(actx, p.acts.Release, &p.step).Get(ctx, &rel); err != nil {
		return nil, err
	}
	if rel.VictimEnded {
		return p.abort(ctx, res, vocab.PreemptionVictimEnded, "the victim's run ended "+string(rel.RunOutcome)+" before its release", false)
	}
	var rs activities.RescheduleResult
	if err := workflow.ExecuteActivity(actx, p.acts.Reschedule, &p.step).Get(ctx, &rs); err != nil {
		return nil, err
	}
	if rs.Failure != "" {
		failures = append(failures, rs.Failure)
	}
	resumed := p.awaitSignal(ctx, p.resumedCh, secondsDuration(n.VerifyResumeTimeoutSeconds), &temporalx.ResumedSignal{})
	vin := &activities.VerifyResumeInput{PreemptionStep: p.step, RecomputeTimeoutSeconds: n.RecomputeTimeoutSeconds, Failures: failures}
	if resumed != nil {
		vin.Resumed = resumed.(*temporalx.ResumedSignal)
	}
	vctx := workflow.WithActivityOptions(actx, workflow.ActivityOptions{
		StartToCloseTimeout: secondsDuration(n.RecomputeTimeoutSeconds) + 2*time.Minute,
		HeartbeatTimeout:    verifyResumeHeartbeat,
		RetryPolicy:         storeRetry(),
	})
	var vr activities.VerifyResumeResult
	if err := workflow.ExecuteActivity(vctx, p.acts.VerifyResume, vin).Get(ctx, &vr); err != nil {
		return nil, err
	}
	res.Outcome, res.ResumedCorrectly, res.LossGPUSeconds, res.Failures = vr.Outcome, vr.ResumedCorrectly, vr.LossGPUSeconds, vr.Failures
	return res, nil
}

// preemptionFlow is the state of one PreemptionWorkflow run.
type preemptionFlow struct {
	in        *PreemptionInput
	step      activities.PreemptionStep
	acts      *activities.Preemptions // nil receiver: only its method values name the activities
	stoppedCh workflow.ReceiveChannel
	resumedCh workflow.ReceiveChannel
}

// awaitSignal waits up to d for a signal on ch naming this preemption,
// decoding into v; signals of other preemptions are dropped. It returns v,
// or nil when d passed first.
func (p *preemptionFlow) awaitSignal(ctx workflow.Context, ch workflow.ReceiveChannel, d time.Duration, v any) any {
	deadline := workflow.Now(ctx).Add(d)
	for {
		left := deadline.Sub(workflow.Now(ctx))
		if left <= 0 {
			return nil
		}
		ok, _ := ch.ReceiveWithTimeout(ctx, left, v)
		if !ok {
			return nil
		}
		if signalPreemptionID(v) == p.in.PreemptionID {
			return v
		}
	}
}

// signalPreemptionID returns the preemption a run-stopped or resumed payload names.
func signalPreemptionID(v any) string {
	switch s := v.(type) {
	case *temporalx.RunStoppedSignal:
		return s.PreemptionID
	case *temporalx.ResumedSignal:
		return s.PreemptionID
	}
	return ""
}

// abort runs the Abort step and returns the result.
func (p *preemptionFlow) abort(ctx workflow.Context, res *PreemptionResult, outcome vocab.PreemptionOutcome, detail string, resumeVictim bool) (*PreemptionResult, error) {
	err := workflow.ExecuteActivity(governanceActivityCtx(ctx), p.acts.Abort, &activities.AbortInput{
		PreemptionStep: p.step, Outcome: outcome, Detail: detail, ResumeVictim: resumeVictim}).Get(ctx, nil)
	if err != nil {
		return nil, err
	}
	res.Outcome, res.Detail = outcome, detail
	return res, nil
}

// governanceActivityCtx gives store-backed governance activities short
// attempts retried until they succeed (a crash at any step resumes there).
func governanceActivityCtx(ctx workflow.Context) workflow.Context {
	return workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		StartToCloseTimeout: time.Minute,
		RetryPolicy:         storeRetry(),
	})
}

func storeRetry() *temporal.RetryPolicy {
	return &temporal.RetryPolicy{InitialInterval: time.Second, BackoffCoefficient: 2, MaximumInterval: time.Minute}
}

// secondsDuration converts seconds to a duration.
func secondsDuration(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }
