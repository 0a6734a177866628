package workflows

import (
	"time"

	"go.temporal.io/sdk/log"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/gpugov/gpugov/activities"
	"github.com/gpugov/gpugov/internal/temporalx"
	"github.com/gpugov/gpugov/internal/vocab"
)

// ExperimentWorkflowName is the workflow type name of ExperimentWorkflow.
const ExperimentWorkflowName = "ExperimentWorkflow"

// ExperimentInput names the stored experiment an ExperimentWorkflow runs.
type ExperimentInput struct {
	ID string
	// ChecksPerRun is the number of checks after which the workflow
	// continues as new, bounding its history; 0 means 500. Everything the
	// workflow needs is in the store, so a new run resumes where the last
	// one stood.
	ChecksPerRun int
}

// ExperimentResult is how an experiment's workflow ended.
type ExperimentResult struct {
	ID       string
	State    vocab.ExperimentState
	Verdict  vocab.ExperimentVerdict
	Promoted bool
	// Detail is the outcome's reason with the numbers, or the state.
	Detail string
}

const defaultExperimentChecksPerRun = 500

// experimentActivityTimeout bounds one step: measuring a window reads its
// records (store.LoadReportInput), which for a long window takes a while.
const experimentActivityTimeout = 10 * time.Minute

// experimentHeartbeatTimeout is how long a step may go without a heartbeat
// (the activities heartbeat every 10 s while they run): a step whose worker
// died is retried after it rather than after experimentActivityTimeout.
// Activity timeouts are not part of the commands replay compares, so
// histories recorded without it replay unchanged (replay_test.go).
const experimentHeartbeatTimeout = 30 * time.Second

// ExperimentWorkflow (ID "experiment/<id>", started by StartExperiment when
// the experiment is created) runs a policy experiment (docs/design.md §3,
// experiments). It only orchestrates; every step is an activity of
// activities.ExperimentActivities whose store transaction keeps it
// idempotent, and returns the experiment's status:
//
//  1. LoadExperiment; the search attributes GpugovPool (the scope's first
//     pool) and GpugovExperimentState are set, and set again at each change
//     of state.
//  2. While scheduled: a durable timer until StartAt, then
//     MeasureExperimentBaseline (the baseline window, stored with an event).
//  3. SwitchExperiment: the candidate in force (or the experiment aborted
//     when another policy was applied since its creation).
//  4. While running: every check interval a durable timer, then
//     CheckExperiment n (measure [switch, now], check the rollback
//     conditions against the baseline, record the values; a breach rolls
//     back at once, audited and notified, and ends the experiment
//     rolled_back; another policy applied meanwhile ends it aborted). A
//     check missed while no worker ran is not made up: the next one
//     measures the window so far.
//  5. At the window's end: FinishExperiment (the full window measured, the
//     verdict given and stored; not_met and inconclusive restore the
//     baseline).
//  6. A kept candidate stays in force: the workflow then waits, with no
//     timeout, for an admin's decision (SignalExperiment): promote
//     (PromoteExperiment: the candidate is the new baseline) or abort
//     (AbortExperiment: the baseline restored).
//
// An abort is acted on at any point between steps: during a timer it
// cancels the timer. A promote before a kept verdict is logged and
// dropped. Timers are durable and every step is in the store, so a worker
// restart resumes where the workflow stood, and a run continues as new
// after ChecksPerRun checks with only the experiment's ID.
func ExperimentWorkflow(ctx workflow.Context, in *ExperimentInput) (*ExperimentResult, error) {
	if in == nil || in.ID == "" {
		return nil, temporal.NewNonRetryableApplicationError("experiment workflow: ID is required", activities.ErrTypeInvalidInput, nil)
	}
	r := &experimentRun{
		ctx: ctx,
		actx: workflow.WithActivityOptions(ctx, workflow.ActivityOptions{StartToCloseTimeout: experimentActivityTimeout,
			HeartbeatTimeout: experimentHeartbeatTimeout, RetryPolicy: storeRetry()}),
		in:     *in,
		sig:    workflow.GetSignalChannel(ctx, temporalx.SignalExperiment),
		log:    workflow.GetLogger(ctx),
		perRun: in.ChecksPerRun,
	}
	if r.perRun <= 0 {
		r.perRun = defaultExperimentChecksPerRun
	}
	var acts *activities.ExperimentActivities
	ref := &activities.ExperimentRef{ID: in.ID}
	st, err := r.step(acts.LoadExperiment, ref)
	for err == nil {
		r.upsert(st)
		switch {
		case st.State == vocab.ExperimentScheduled:
			if d := r.waitUntil(st.StartAt); d != nil {
				st, err = r.abort(d)
				continue
			}
			st, err = r.step(acts.MeasureExperimentBaseline, ref)
		case st.State == vocab.ExperimentBaseline:
			if d := r.takeAbort(); d != nil {
				st, err = r.abort(d)
				continue
			}
			st, err = r.step(acts.SwitchExperiment, ref)
		case st.State == vocab.ExperimentRunning:
			st, err = r.observe(st)
		case st.Holds:
			st, err = r.decide()
		default:
			return &ExperimentResult{ID: st.ID, State: st.State, Verdict: st.Verdict, Promoted: st.Promoted, Detail: st.Detail}, nil
		}
	}
	return nil, err
}

// experimentRun is one run of ExperimentWorkflow.
type experimentRun struct {
	ctx, actx workflow.Context
	in        ExperimentInput
	sig       workflow.ReceiveChannel
	log       log.Logger
	perRun    int
	// pending are the decisions received and not acted on yet, in order.
	pending []temporalx.ExperimentDecision
	// attrState and attrPool are the search attributes last upserted.
	attrState vocab.ExperimentState
	attrPool  string
}

// step runs one experiment activity and returns the status it gives.
func (r *experimentRun) step(activity, in any) (*activities.ExperimentStatus, error) {
	var st activities.ExperimentStatus
	if err := workflow.ExecuteActivity(r.actx, activity, in).Get(r.ctx, &st); err != nil {
		return nil, err
	}
	return &st, nil
}

// upsert sets GpugovPool and GpugovExperimentState when they changed.
func (r *experimentRun) upsert(st *activities.ExperimentStatus) {
	if st.State == r.attrState && st.Pool == r.attrPool {
		return
	}
	updates := []temporal.SearchAttributeUpdate{temporalx.ExperimentStateKey.ValueSet(string(st.State))}
	if st.Pool != "" {
		updates = append(updates, temporalx.PoolKey.ValueSet(st.Pool))
	}
	if err := workflow.UpsertTypedSearchAttributes(r.ctx, updates...); err != nil {
		r.log.Warn("experiment search attributes not set", "experiment", r.in.ID, "error", err)
		return
	}
	r.attrState, r.attrPool = st.State, st.Pool
}

// receive moves every decision waiting on the signal channel to pending.
func (r *experimentRun) receive() {
	for {
		var d temporalx.ExperimentDecision
		if !r.sig.ReceiveAsync(&d) {
			return
		}
		r.pending = append(r.pending, d)
	}
}

// takeAbort returns the first pending abort, dropping (and logging) the
// promotions before it: outside a kept verdict there is nothing to promote.
func (r *experimentRun) takeAbort() *temporalx.ExperimentDecision {
	r.receive()
	for len(r.pending) > 0 {
		d := r.pending[0]
		r.pending = r.pending[1:]
		if d.Action == temporalx.ExperimentAbort {
			return &d
		}
		r.log.Warn("experiment decision dropped: only an abort is accepted before a kept verdict",
			"experiment", r.in.ID, "action", d.Action, "actor", d.Actor)
	}
	return nil
}

// waitUntil sleeps on a durable timer until t, or until an abort arrives,
// which it returns (the timer cancelled); nil when t was reached.
func (r *experimentRun) waitUntil(t time.Time) *temporalx.ExperimentDecision {
	for {
		if d := r.takeAbort(); d != nil {
			return d
		}
		wait := t.Sub(workflow.Now(r.ctx))
		if wait <= 0 {
			return nil
		}
		tctx, cancel := workflow.WithCancel(r.ctx)
		fired := false
		sel := workflow.NewSelector(r.ctx)
		sel.AddFuture(workflow.NewTimer(tctx, wait), func(workflow.Future) { fired = true })
		sel.AddReceive(r.sig, func(c workflow.ReceiveChannel, _ bool) {
			var d temporalx.ExperimentDecision
			c.Receive(r.ctx, &d)
			r.pending = append(r.pending, d)
		})
		sel.Select(r.ctx)
		if fired {
			return r.takeAbort()
		}
		cancel()
	}
}

// abort runs the abort activity for d.
func (r *experimentRun) abort(d *temporalx.ExperimentDecision) (*activities.ExperimentStatus, error) {
	var acts *activities.ExperimentActivities
	r.log.Info("experiment abort requested", "experiment", r.in.ID, "actor", d.Actor)
	return r.step(acts.AbortExperiment, &activities.ExperimentDecisionInput{ID: r.in.ID, Actor: d.Actor, Reason: d.Reason})
}

// observe runs the checks of a running experiment and, at the window's
// end, its verdict. The next check is the first of the check schedule
// (switch + n × interval) still ahead, so checks missed while no worker
// ran are not made up one after another. After perRun checks it
// continues as new.
func (r *experimentRun) observe(st *activities.ExperimentStatus) (*activities.ExperimentStatus, error) {
	var acts *activities.ExperimentActivities
	switched := *st.SwitchedAt
	interval := max(secondsDuration(st.CheckIntervalSeconds), time.Second)
	end := switched.Add(secondsDuration(st.WindowSeconds))
	nextCheck := func(after int) int {
		return max(after+1, int(workflow.Now(r.ctx).Sub(switched)/interval)+1)
	}
	checks := 0
	for n := nextCheck(0); ; n = nextCheck(n) {
		at := switched.Add(time.Duration(n) * interval)
		if !at.Before(end) {
			break
		}
		if checks == r.perRun {
			// A decision already received would be lost with this run:
			// act on an abort now (a promotion is dropped here anyway).
			if d := r.takeAbort(); d != nil {
				return r.abort(d)
			}
			return nil, workflow.NewContinueAsNewError(r.ctx, ExperimentWorkflowName, &r.in)
		}
		if d := r.waitUntil(at); d != nil {
			return r.abort(d)
		}
		next, err := r.step(acts.CheckExperiment, &activities.ExperimentCheckInput{ID: r.in.ID, N: n})
		if err != nil || next.State != vocab.ExperimentRunning {
			return next, err
		}
		checks++
	}
	if d := r.waitUntil(end); d != nil {
		return r.abort(d)
	}
	return r.step(acts.FinishExperiment, &activities.ExperimentRef{ID: r.in.ID})
}

// decide waits, with no timeout, for an admin's decision on a kept
// candidate and acts on it.
func (r *experimentRun) decide() (*activities.ExperimentStatus, error) {
	var acts *activities.ExperimentActivities
	for {
		r.receive()
		for len(r.pending) == 0 {
			var d temporalx.ExperimentDecision
			r.sig.Receive(r.ctx, &d)
			r.pending = append(r.pending, d)
		}
		d := r.pending[0]
		r.pending = r.pending[1:]
		switch d.Action {
		case temporalx.ExperimentPromote:
			r.log.Info("experiment promotion requested", "experiment", r.in.ID, "actor", d.Actor)
			return r.step(acts.PromoteExperiment, &activities.ExperimentDecisionInput{ID: r.in.ID, Actor: d.Actor, Reason: d.Reason})
		case temporalx.ExperimentAbort:
			return r.abort(&d)
		}
		r.log.Warn("experiment decision dropped: unknown action", "experiment", r.in.ID, "action", d.Action, "actor", d.Actor)
	}
}
