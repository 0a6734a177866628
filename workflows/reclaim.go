package workflows

import (
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/gpugov/gpugov/activities"
	"github.com/gpugov/gpugov/internal/policy"
	"github.com/gpugov/gpugov/internal/temporalx"
	"github.com/gpugov/gpugov/internal/vocab"
)

// ReclaimInput starts a ReclaimWorkflow for one finding of the scan.
type ReclaimInput struct {
	AllocationID string
	Class        string // the scan's class; AssessReclaim classifies again
	Basis        string
}

// ReclaimResult is how a reclaim ended (the full record is the store's).
type ReclaimResult struct {
	ReclaimID    string
	Class        string
	Mode         string
	State        string // a vocab.ReclaimState, or "not-reclaimable"
	Detail       string
	Disputed     bool
	GPUsReleased float64
}

// ReclaimWorkflow (ID "reclaim/<allocation>") handles one reclaimable
// allocation (docs/design.md §3 step 5): AssessReclaim classifies it again with
// its evidence, decides the mode from config and the pool's stage and
// records the reclaim; then by mode —
//
//   - report: CloseReclaim records it; nothing is touched;
//   - auto: ReleaseReclaimed releases it at once;
//   - notify: NotifyOwner records the notice; the owner's `keep` signal
//     within the notice window records a dispute (a false reclaim) and
//     nothing is released; otherwise (or on an operator's `confirm`)
//     ReleaseReclaimed;
//   - confirm: AwaitConfirmation; an operator's `confirm` releases it, the
//     owner's `keep` records a dispute, and without either within the
//     confirm window it expires unreleased.
//
// A recorded reclaim sets the search attributes GpugovQueue, GpugovTier (of
// the allocation's job) and GpugovPool (version governanceAttrsChange).
func ReclaimWorkflow(ctx workflow.Context, in *ReclaimInput) (*ReclaimResult, error) {
	if in == nil || in.AllocationID == "" {
		return nil, temporal.NewNonRetryableApplicationError("reclaim workflow: allocation ID is required", "InvalidInput", nil)
	}
	r := &reclaimFlow{keepCh: workflow.GetSignalChannel(ctx, temporalx.SignalReclaimKeep),
		confirmCh: workflow.GetSignalChannel(ctx, temporalx.SignalReclaimConfirm)}
	actx := governanceActivityCtx(ctx)
	var a activities.AssessResult
	err := workflow.ExecuteActivity(actx, r.acts.AssessReclaim, &activities.AssessInput{
		AllocationID: in.AllocationID, WorkflowID: workflow.GetInfo(ctx).WorkflowExecution.ID}).Get(ctx, &a)
	if err != nil {
		return nil, err
	}
	res := &ReclaimResult{ReclaimID: a.ReclaimID, Class: a.Class, Mode: a.Mode, Detail: a.Detail}
	if !a.Proceed {
		res.State = "not-reclaimable"
		return res, nil
	}
	upsertGovernanceAttrs(ctx, a.Queue, a.Tier, a.Pool)
	switch vocab.ReclaimMode(a.Mode) {
	case vocab.ModeAuto:
		return r.release(ctx, res, &activities.ReleaseReclaimInput{ReclaimID: a.ReclaimID, By: vocab.ActorReclaim, Reason: "auto mode"})
	case vocab.ModeNotify:
		return r.notify(ctx, res, &a)
	case vocab.ModeConfirm:
		return r.confirm(ctx, res, &a)
	}
	return r.close(ctx, res, vocab.ReclaimReported, "report mode: recorded only")
}

// reclaimFlow is the state of one ReclaimWorkflow run.
type reclaimFlow struct {
	acts      *activities.Reclaims // nil receiver: only its method values name the activities
	keepCh    workflow.ReceiveChannel
	confirmCh workflow.ReceiveChannel
}

// notify tells the owner and waits for keep, confirm or the window's end.
func (r *reclaimFlow) notify(ctx workflow.Context, res *ReclaimResult, a *activities.AssessResult) (*ReclaimResult, error) {
	err := workflow.ExecuteActivity(governanceActivityCtx(ctx), r.acts.NotifyOwner,
		&activities.NotifyInput{ReclaimID: a.ReclaimID, WindowSeconds: a.NotifyWindowSeconds}).Get(ctx, nil)
	if err != nil {
		return nil, err
	}
	keep, confirm := r.await(ctx, secondsDuration(a.NotifyWindowSeconds))
	switch {
	case keep != nil:
		return r.dispute(ctx, res, keep)
	case confirm != nil:
		return r.release(ctx, res, &activities.ReleaseReclaimInput{ReclaimID: a.ReclaimID, By: confirm.Actor, Confirmed: true, Reason: confirm.Reason})
	}
	return r.release(ctx, res, &activities.ReleaseReclaimInput{ReclaimID: a.ReclaimID, By: vocab.ActorReclaim,
		Reason: "notice window passed without objection"})
}

// confirm waits for an operator's confirmation, the owner's keep or the window's end.
func (r *reclaimFlow) confirm(ctx workflow.Context, res *ReclaimResult, a *activities.AssessResult) (*ReclaimResult, error) {
	err := workflow.ExecuteActivity(governanceActivityCtx(ctx), r.acts.AwaitConfirmation,
		&activities.CloseInput{ReclaimID: a.ReclaimID, Detail: "waiting for an operator's confirmation"}).Get(ctx, nil)
	if err != nil {
		return nil, err
	}
	keep, confirm := r.await(ctx, secondsDuration(a.ConfirmWindowSeconds))
	switch {
	case keep != nil:
		return r.dispute(ctx, res, keep)
	case confirm != nil:
		return r.release(ctx, res, &activities.ReleaseReclaimInput{ReclaimID: a.ReclaimID, By: confirm.Actor, Confirmed: true, Reason: confirm.Reason})
	}
	return r.close(ctx, res, vocab.ReclaimExpired, "no operator confirmed within the confirm window")
}

// await waits up to d for the first keep or confirm signal.
func (r *reclaimFlow) await(ctx workflow.Context, d time.Duration) (keep, confirm *temporalx.ReclaimDecisionSignal) {
	timerCtx, cancel := workflow.WithCancel(ctx)
	defer cancel()
	sel := workflow.NewSelector(ctx)
	sel.AddFuture(workflow.NewTimer(timerCtx, d), func(workflow.Future) {})
	sel.AddReceive(r.keepCh, func(c workflow.ReceiveChannel, _ bool) {
		keep = &temporalx.ReclaimDecisionSignal{}
		c.Receive(ctx, keep)
	})
	sel.AddReceive(r.confirmCh, func(c workflow.ReceiveChannel, _ bool) {
		confirm = &temporalx.ReclaimDecisionSignal{}
		c.Receive(ctx, confirm)
	})
	sel.Select(ctx)
	return keep, confirm
}

func (r *reclaimFlow) dispute(ctx workflow.Context, res *ReclaimResult, keep *temporalx.ReclaimDecisionSignal) (*ReclaimResult, error) {
	err := workflow.ExecuteActivity(governanceActivityCtx(ctx), r.acts.RecordDispute,
		&activities.DecisionInput{ReclaimID: res.ReclaimID, Actor: keep.Actor, Reason: keep.Reason}).Get(ctx, nil)
	if err != nil {
		return nil, err
	}
	res.State, res.Disputed, res.Detail = string(vocab.ReclaimKept), true, "kept by "+keep.Actor+": "+keep.Reason
	return res, nil
}

func (r *reclaimFlow) release(ctx workflow.Context, res *ReclaimResult, in *activities.ReleaseReclaimInput) (*ReclaimResult, error) {
	rctx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		StartToCloseTimeout: 5 * time.Minute, HeartbeatTimeout: 30 * time.Second, RetryPolicy: storeRetry()})
	var out activities.ReleaseReclaimResult
	if err := workflow.ExecuteActivity(rctx, r.acts.ReleaseReclaimed, in).Get(ctx, &out); err != nil {
		return nil, err
	}
	res.State, res.GPUsReleased = string(out.State), out.GPUsReleased
	return res, nil
}

func (r *reclaimFlow) close(ctx workflow.Context, res *ReclaimResult, state vocab.ReclaimState, detail string) (*ReclaimResult, error) {
	err := workflow.ExecuteActivity(governanceActivityCtx(ctx), r.acts.CloseReclaim,
		&activities.CloseInput{ReclaimID: res.ReclaimID, State: state, Detail: detail}).Get(ctx, nil)
	if err != nil {
		return nil, err
	}
	res.State, res.Detail = string(state), detail
	return res, nil
}

// ReclaimScanInput starts (or continues) the ReclaimScanWorkflow.
type ReclaimScanInput struct {
	// IterationsPerRun is the number of scans after which the workflow
	// continues as new, bounding its history; 0 means 100.
	IterationsPerRun int
	// ScansBefore counts the scans of earlier runs (carried across continue-as-new).
	ScansBefore int64
}

const defaultScanIterations = 100

// reclaimChildOptions returns the child options of the ReclaimWorkflow of a
// finding: ID "reclaim/<allocation>", abandoned when the scan continues as
// new, and rejected when that allocation was reclaimed before (one reclaim
// per allocation).
func reclaimChildOptions(allocationID string) workflow.ChildWorkflowOptions {
	return abandonedChildOptions(temporalx.ReclaimWorkflowID(allocationID), enumspb.WORKFLOW_ID_REUSE_POLICY_REJECT_DUPLICATE)
}

// ReclaimScanWorkflow (ID "reclaim-scan") scans the active allocations
// every scan interval (from config, read by each scan) and starts one
// ReclaimWorkflow per finding not reclaimed before; after IterationsPerRun
// scans it continues as new. It returns only on cancellation.
func ReclaimScanWorkflow(ctx workflow.Context, in *ReclaimScanInput) error {
	next := ReclaimScanInput{}
	if in != nil {
		next = *in
	}
	var acts *activities.Reclaims
	err := runPasses(ctx, next.IterationsPerRun, defaultScanIterations, policy.DefaultScanIntervalSeconds, func() float64 {
		var scan activities.ScanResult
		err := workflow.ExecuteActivity(governanceActivityCtx(ctx), acts.ScanReclaims, &activities.ScanInput{}).Get(ctx, &scan)
		if err != nil {
			workflow.GetLogger(ctx).Error("reclaim scan failed; retried at the next interval", "error", err)
		}
		startReclaims(ctx, scan.Findings)
		next.ScansBefore++
		return scan.ScanIntervalSeconds
	})
	if err != nil {
		return err
	}
	return workflow.NewContinueAsNewError(ctx, ReclaimScanWorkflowName, &next)
}

// startReclaims starts a ReclaimWorkflow per finding and waits for each to
// start (or be refused as a duplicate) before the scan goes on.
func startReclaims(ctx workflow.Context, fs []activities.ReclaimFinding) {
	futs := make([]workflow.ChildWorkflowFuture, len(fs))
	for i, f := range fs {
		futs[i] = workflow.ExecuteChildWorkflow(workflow.WithChildOptions(ctx, reclaimChildOptions(f.AllocationID)),
			ReclaimWorkflowName, &ReclaimInput{AllocationID: f.AllocationID, Class: f.Class, Basis: f.Basis})
	}
	awaitChildStarts(ctx, futs, "reclaim workflow not started", "allocation", func(i int) string { return fs[i].AllocationID })
}
