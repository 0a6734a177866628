package activities

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.temporal.io/sdk/activity"

	"github.com/gpugov/gpugov/internal/experiment"
	"github.com/gpugov/gpugov/internal/policy"
	"github.com/gpugov/gpugov/internal/queuereport"
	"github.com/gpugov/gpugov/internal/vocab"
	"github.com/gpugov/gpugov/store"
)

// ExperimentStore is the part of *store.Store the experiment activities use
// (docs/design.md §3, experiments): the experiment's steps, and the records
// a window is measured from.
type ExperimentStore interface {
	GetExperiment(ctx context.Context, id string) (*store.Experiment, error)
	LoadReportInput(ctx context.Context, window queuereport.Window, now time.Time) (*queuereport.Input, error)
	GovernanceMetrics(ctx context.Context, w queuereport.Window, scope experiment.Scope, now time.Time) (experiment.Governance, error)
	RecordExperimentBaseline(ctx context.Context, id string, m *experiment.Measurement, at time.Time) (*store.Experiment, error)
	SwitchExperiment(ctx context.Context, id string, at time.Time) (*store.Experiment, error)
	RecordExperimentCheck(ctx context.Context, id string, n int, w experiment.Measurement, results []experiment.ConditionResult, at time.Time) (*store.Experiment, error)
	ExperimentCheckResults(ctx context.Context, id string, n int) ([]experiment.ConditionResult, error)
	VerifyExperimentPolicy(ctx context.Context, id string, at time.Time) (*store.Experiment, error)
	RollBackExperiment(ctx context.Context, id string, out *experiment.Outcome, at time.Time) (*store.Experiment, error)
	FinishExperiment(ctx context.Context, id string, out *experiment.Outcome, at time.Time) (*store.Experiment, error)
	AbortExperiment(ctx context.Context, id, actor, reason string, at time.Time) (*store.Experiment, error)
	PromoteExperiment(ctx context.Context, id, actor, reason string, at time.Time) (*store.Experiment, error)
}

var _ ExperimentStore = (*store.Store)(nil)

// ExperimentActivities are the activities of ExperimentWorkflow: each loads
// the experiment, does one step through the store (which keeps the step
// idempotent: a retried attempt finds its state changed) and returns the
// experiment's status, from which the workflow decides what comes next.
type ExperimentActivities struct {
	Store ExperimentStore
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// CycleIntervalSeconds is the scheduler's cycle interval, the shortest
	// check interval; 0 means 1 s.
	CycleIntervalSeconds int64
	// Governance gives the policy in force, read for its admins' webhook
	// (notifications.admins); nil means policy.Default() (none).
	Governance func() *policy.Policy
	// Metrics, when set, counts each rollback
	// (gpugov_experiment_rollbacks_total, which an alert in
	// deploy/prometheus/alerts.yml watches).
	Metrics GovernanceRecorder
}

// ExperimentRef names the experiment of a step.
type ExperimentRef struct {
	ID string
}

// ExperimentStatus is where an experiment stands after a step, what the
// workflow needs to go on.
type ExperimentStatus struct {
	ID      string
	State   vocab.ExperimentState
	Verdict vocab.ExperimentVerdict
	// Pool is the scope's first pool (the GpugovPool search attribute).
	Pool string
	// StartAt is when the candidate is to be switched in; SwitchedAt when
	// it was (nil before).
	StartAt    time.Time
	SwitchedAt *time.Time
	// WindowSeconds is the observation window; CheckIntervalSeconds how
	// often the rollback conditions are checked in it
	// (experiment.Spec.CheckInterval, at least the cycle interval).
	WindowSeconds        float64
	CheckIntervalSeconds float64
	// Holds is true while a kept candidate waits for a promotion or an
	// abort (store.Experiment.HoldsPools, finished); Promoted once promoted.
	Holds    bool
	Promoted bool
	// Detail says how the experiment stands, with the numbers: the
	// outcome's reason once decided, else the state.
	Detail string
}

// ExperimentCheckInput is the nth check (1, 2, …) of an experiment.
type ExperimentCheckInput struct {
	ID string
	N  int
}

// ExperimentDecisionInput is an admin's abort or promotion.
type ExperimentDecisionInput struct {
	ID     string
	Actor  string
	Reason string
}

func (a *ExperimentActivities) now() time.Time { return clock(a.Now) }

// status is e's ExperimentStatus.
func (a *ExperimentActivities) status(e *store.Experiment) *ExperimentStatus {
	cycle := time.Duration(max(a.CycleIntervalSeconds, 1)) * time.Second
	st := &ExperimentStatus{ID: e.ID, State: e.State, Verdict: e.Verdict, StartAt: e.StartAt, SwitchedAt: e.SwitchedAt,
		WindowSeconds: e.Spec.WindowSeconds, CheckIntervalSeconds: max(e.Spec.CheckInterval(cycle), time.Second).Seconds(),
		Holds: e.State == vocab.ExperimentFinished && e.HoldsPools(), Promoted: e.PromotedAt != nil, Detail: string(e.State)}
	if len(e.Spec.Scope.Pools) > 0 {
		st.Pool = e.Spec.Scope.Pools[0]
	}
	if e.Outcome != nil {
		st.Detail = e.Outcome.Reason
	}
	return st
}

// LoadExperiment returns the experiment's status.
func (a *ExperimentActivities) LoadExperiment(ctx context.Context, in *ExperimentRef) (*ExperimentStatus, error) {
	defer heartbeatWhile(ctx)()
	if in == nil || in.ID == "" {
		return nil, invalidInput("load experiment: ID is required")
	}
	e, err := a.Store.GetExperiment(ctx, in.ID)
	if err != nil {
		return nil, nonRetryable(err)
	}
	return a.status(e), nil
}

// measure measures the experiment's scope over w as of now: the records
// (store.LoadReportInput), the governance metrics (store.GovernanceMetrics)
// and experiment.Measure, the same call `simulate --vs` makes.
func (a *ExperimentActivities) measure(ctx context.Context, e *store.Experiment, w queuereport.Window, now time.Time) (*experiment.Measurement, error) {
	in, err := a.Store.LoadReportInput(ctx, w, now)
	if err != nil {
		return nil, nonRetryable(err)
	}
	gov, err := a.Store.GovernanceMetrics(ctx, w, e.Spec.Scope, now)
	if err != nil {
		return nil, nonRetryable(err)
	}
	m, err := experiment.Measure(*in, e.Spec.Scope, w, now, gov)
	if err != nil {
		return nil, nonRetryable(fmt.Errorf("measure experiment %s over %s..%s: %w", e.ID,
			w.From.Format(time.RFC3339), w.To.Format(time.RFC3339), err))
	}
	return &m, nil
}

// MeasureExperimentBaseline measures the baseline window
// (experiment.Spec.BaselineWindow: the stated one, or an equally long
// window ending at the start) and stores it (store.RecordExperimentBaseline:
// state baseline, a baseline_measured event). An experiment past that step
// is returned as it is.
func (a *ExperimentActivities) MeasureExperimentBaseline(ctx context.Context, in *ExperimentRef) (*ExperimentStatus, error) {
	defer heartbeatWhile(ctx)()
	if in == nil || in.ID == "" {
		return nil, invalidInput("measure experiment baseline: ID is required")
	}
	e, err := a.Store.GetExperiment(ctx, in.ID)
	if err != nil {
		return nil, nonRetryable(err)
	}
	if e.State != vocab.ExperimentScheduled {
		return a.status(e), nil
	}
	now := a.now()
	w := e.Spec.BaselineWindow(e.StartAt)
	m, err := a.measure(ctx, e, w, now)
	if err != nil {
		return nil, err
	}
	if e, err = a.Store.RecordExperimentBaseline(ctx, in.ID, m, now); err != nil {
		return nil, nonRetryable(err)
	}
	return a.status(e), nil
}

// SwitchExperiment switches the candidate in (store.SwitchExperiment: the
// candidate activated by "experiment/<id>" with the baseline's numbers, or
// the experiment aborted when another policy was applied since its
// creation).
func (a *ExperimentActivities) SwitchExperiment(ctx context.Context, in *ExperimentRef) (*ExperimentStatus, error) {
	defer heartbeatWhile(ctx)()
	if in == nil || in.ID == "" {
		return nil, invalidInput("switch experiment: ID is required")
	}
	e, err := a.Store.SwitchExperiment(ctx, in.ID, a.now())
	if err != nil {
		return nil, nonRetryable(err)
	}
	return a.status(e), nil
}

// CheckExperiment is the nth check of a running experiment: when another
// policy was applied meanwhile it ends the experiment aborted
// (store.VerifyExperimentPolicy); else it measures [switched_at, now],
// evaluates the rollback conditions against the baseline
// (experiment.Check) and records them (a "check" event with every value);
// on a breach it rolls back at once (store.RollBackExperiment, with
// experiment.Decide's outcome: the baseline restored, audited with the
// numbers that breached, the admins notified through the outbox, and a
// WARN log line). An experiment not running is returned as it is.
func (a *ExperimentActivities) CheckExperiment(ctx context.Context, in *ExperimentCheckInput) (*ExperimentStatus, error) {
	defer heartbeatWhile(ctx)()
	if in == nil || in.ID == "" || in.N < 1 {
		return nil, invalidInput("check experiment: ID and a check number ≥ 1 are required")
	}
	now := a.now()
	e, err := a.Store.VerifyExperimentPolicy(ctx, in.ID, now)
	if err != nil {
		return nil, nonRetryable(err)
	}
	if e.State != vocab.ExperimentRunning || e.SwitchedAt == nil || !now.After(*e.SwitchedAt) {
		return a.status(e), nil
	}
	end := e.SwitchedAt.Add(e.Spec.Window())
	w := queuereport.Window{From: *e.SwitchedAt, To: earlier(now, end)}
	m, err := a.measure(ctx, e, w, now)
	if err != nil {
		return nil, err
	}
	results := experiment.Check(&e.Spec, e.Baseline, m)
	if e, err = a.Store.RecordExperimentCheck(ctx, in.ID, in.N, *m, results, now); err != nil {
		return nil, nonRetryable(err)
	}
	if e.State != vocab.ExperimentRunning {
		return a.status(e), nil
	}
	// Decide on what check n recorded: a retried attempt (the first one
	// recorded its check, then failed before rolling back) must act on the
	// breach the timeline shows, not on a fresh measurement that may not.
	if results, err = a.Store.ExperimentCheckResults(ctx, in.ID, in.N); err != nil {
		return nil, nonRetryable(err)
	}
	var breaches []experiment.ConditionResult
	for _, r := range results {
		if r.Breached {
			breaches = append(breaches, r)
		}
	}
	if len(breaches) == 0 || e.State != vocab.ExperimentRunning {
		return a.status(e), nil
	}
	out := experiment.Decide(&e.Spec, e.Baseline, m, breaches)
	return a.rollBack(ctx, e, &out, now)
}

// rollBack rolls running e back with out and logs the rollback (WARN).
func (a *ExperimentActivities) rollBack(ctx context.Context, e *store.Experiment, out *experiment.Outcome, now time.Time) (*ExperimentStatus, error) {
	e, err := a.Store.RollBackExperiment(ctx, e.ID, out, now)
	if err != nil {
		return nil, nonRetryable(err)
	}
	a.logRollback(ctx, e)
	if a.Metrics != nil && e.Verdict == vocab.VerdictRolledBack {
		a.Metrics.RecordExperimentRollback(ctx)
	}
	return a.status(e), nil
}

// logRollback writes the WARN line of a rollback: with no admins webhook
// in the policy (notifications.admins), it and the audit log are the
// admins' notification.
func (a *ExperimentActivities) logRollback(ctx context.Context, e *store.Experiment) {
	if e.Verdict != vocab.VerdictRolledBack || e.Outcome == nil {
		return
	}
	cfg := policy.Default()
	if a.Governance != nil {
		if c := a.Governance(); c != nil {
			cfg = c
		}
	}
	_, routed := cfg.Notifications.Webhook(policy.AdminsRecipient)
	msg := "experiment rolled back: the admins' webhook is notified"
	if !routed {
		msg = "experiment rolled back; no notifications.admins webhook in the policy: this line and the audit log are the admins' notification"
	}
	activity.GetLogger(ctx).Warn(msg, "experiment", e.ID, "name", e.Spec.Name, "baseline", e.BaselineHash,
		"candidate", e.CandidateHash, "reason", e.Outcome.Reason)
}

// FinishExperiment ends a running experiment whose window is over: it
// measures the whole window (experiment.Spec.ObservationWindow from the
// switch), gives the verdict (experiment.Decide, with the full window's
// own breaches) and stores it (store.FinishExperiment: kept stays in
// force; not_met and inconclusive restore the baseline; a breach on the
// full window rolls back as CheckExperiment does; another policy applied
// meanwhile aborts). An experiment not running is returned as it is.
func (a *ExperimentActivities) FinishExperiment(ctx context.Context, in *ExperimentRef) (*ExperimentStatus, error) {
	defer heartbeatWhile(ctx)()
	if in == nil || in.ID == "" {
		return nil, invalidInput("finish experiment: ID is required")
	}
	now := a.now()
	e, err := a.Store.VerifyExperimentPolicy(ctx, in.ID, now)
	if err != nil {
		return nil, nonRetryable(err)
	}
	if e.State != vocab.ExperimentRunning || e.SwitchedAt == nil {
		return a.status(e), nil
	}
	w := e.Spec.ObservationWindow(*e.SwitchedAt)
	m, err := a.measure(ctx, e, w, later(now, w.To))
	if err != nil {
		return nil, err
	}
	out := experiment.Decide(&e.Spec, e.Baseline, m, nil)
	if out.Verdict == vocab.VerdictRolledBack {
		return a.rollBack(ctx, e, &out, now)
	}
	if e, err = a.Store.FinishExperiment(ctx, in.ID, &out, now); err != nil {
		return nil, nonRetryable(err)
	}
	return a.status(e), nil
}

// AbortExperiment stops the experiment at an admin's request
// (store.AbortExperiment: the baseline restored when the candidate was
// switched in). An experiment that has finished without holding its pools
// is returned as it is (there is nothing to abort).
func (a *ExperimentActivities) AbortExperiment(ctx context.Context, in *ExperimentDecisionInput) (*ExperimentStatus, error) {
	defer heartbeatWhile(ctx)()
	if in == nil || in.ID == "" || in.Actor == "" {
		return nil, invalidInput("abort experiment: ID and actor are required")
	}
	e, err := a.Store.AbortExperiment(ctx, in.ID, in.Actor, in.Reason, a.now())
	if errors.Is(err, store.ErrConflict) {
		if e, err = a.Store.GetExperiment(ctx, in.ID); err == nil {
			activity.GetLogger(ctx).Warn("abort of an experiment that finished without holding its pools ignored",
				"experiment", in.ID, "actor", in.Actor, "verdict", e.Verdict)
		}
	}
	if err != nil {
		return nil, nonRetryable(err)
	}
	return a.status(e), nil
}

// PromoteExperiment makes a kept candidate the new baseline
// (store.PromoteExperiment; the experiment aborts when another policy was
// applied meanwhile). An experiment that is not finished kept is returned
// as it is, the promotion logged as ignored.
func (a *ExperimentActivities) PromoteExperiment(ctx context.Context, in *ExperimentDecisionInput) (*ExperimentStatus, error) {
	defer heartbeatWhile(ctx)()
	if in == nil || in.ID == "" || in.Actor == "" {
		return nil, invalidInput("promote experiment: ID and actor are required")
	}
	e, err := a.Store.PromoteExperiment(ctx, in.ID, in.Actor, in.Reason, a.now())
	if errors.Is(err, store.ErrConflict) {
		if e, err = a.Store.GetExperiment(ctx, in.ID); err == nil {
			activity.GetLogger(ctx).Warn("promotion of an experiment that is not finished kept ignored",
				"experiment", in.ID, "actor", in.Actor, "state", e.State, "verdict", e.Verdict)
		}
	}
	if err != nil {
		return nil, nonRetryable(err)
	}
	return a.status(e), nil
}

// earlier returns the earlier of a and b; later the later.
func earlier(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// experimentHeartbeatEvery is how often an experiment step heartbeats while
// it runs: a third of the workflows' experiment heartbeat timeout (30 s), so
// two missed beats still leave it alive.
const experimentHeartbeatEvery = 10 * time.Second

// heartbeatWhile heartbeats the activity of ctx every
// experimentHeartbeatEvery until the returned stop is called; outside an
// activity (a unit test calling the method) it does nothing. With the
// heartbeat an attempt whose worker died is retried after the heartbeat
// timeout (30 s) instead of the whole start-to-close timeout (an experiment
// step's 10 min, sized for measuring a long window; a scheduling cycle's
// 2 min, during which no other cycle of the shard runs).
func heartbeatWhile(ctx context.Context) (stop func()) {
	return heartbeatEvery(ctx, experimentHeartbeatEvery)
}

// heartbeatEvery is heartbeatWhile at period every.
func heartbeatEvery(ctx context.Context, every time.Duration) (stop func()) {
	if !activity.IsActivity(ctx) {
		return func() {}
	}
	done := make(chan struct{})
	go func() {
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-ctx.Done():
				return
			case <-t.C:
				activity.RecordHeartbeat(ctx)
			}
		}
	}()
	return func() { close(done) }
}
