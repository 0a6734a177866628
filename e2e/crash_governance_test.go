package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/gpugov/gpugov/api"
	"github.com/gpugov/gpugov/internal/crashpoint"
	"github.com/gpugov/gpugov/internal/experiment"
	"github.com/gpugov/gpugov/internal/temporalx"
	"github.com/gpugov/gpugov/internal/vocab"
	"github.com/gpugov/gpugov/store"
)

// The crash-at-every-step test of ExperimentWorkflow: as in crash_test.go, a real `gpugov serve` is
// SIGKILLed after each step's effect, started again, and the effect checked
// to have happened exactly once.

// errString is err's text, or "".
func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// workflowClosed reports whether the workflow's latest run has closed.
func workflowClosed(t *testing.T, r *crashRig, id string) bool {
	t.Helper()
	d, err := r.dev.Client.DescribeWorkflow(context.Background(), id, "")
	if err != nil {
		return false
	}
	return d.RawResponse.GetWorkflowExecutionInfo().GetCloseTime() != nil
}

// experimentCrashCandidate is crashPolicy with a longer preemption grace
// period: one variable group (preemption) changed.
var experimentCrashCandidate = strings.Replace(crashPolicy, "grace_s: 5", "grace_s: 7", 1)

// crashExperimentSpec is an experiment over pool crash with a window of
// window seconds; its expected result is more started jobs with a minimum
// sample of one, so one job started before and three during the window
// give a kept verdict.
func crashExperimentSpec(name string, window float64) *experiment.Spec {
	return &experiment.Spec{
		Name:                 name,
		Hypothesis:           "a longer grace period loses no starts",
		Candidate:            experiment.Candidate{Policy: experimentCrashCandidate},
		Scope:                experiment.Scope{Pools: []string{"crash"}},
		WindowSeconds:        window,
		CheckIntervalSeconds: 10,
		MinSample:            1,
		Expected:             experiment.Expectation{Metric: "started", Direction: experiment.Increase, Change: 0.5},
		Rollback: []experiment.Condition{
			{Name: "production waits", Metric: "longest_wait_s", Target: experiment.Target{Tier: "production"}, Above: f64(100000)},
		},
	}
}

// TestCrashAtEveryExperimentStep runs one experiment to a kept verdict and
// its promotion, and aborts a second, with a SIGKILL after each step's
// effect: LoadExperiment, MeasureExperimentBaseline, SwitchExperiment (the
// candidate in force), CheckExperiment, FinishExperiment (the verdict),
// PromoteExperiment, AbortExperiment (the baseline restored). The checks:
// one event and one audit row per step, the active policy version the one
// the step leaves, the workflows ended.
func TestCrashAtEveryExperimentStep(t *testing.T) {
	requireTemporal(t)
	t.Parallel()
	began := time.Now()
	r := newCrashRig(t, gpugovBinary(t), crashRigOptions{policy: crashPolicy, inventory: crashInventory, simSpeed: 1})
	ctx := context.Background()
	var rows []crashRow
	add := func(step string, took time.Duration, checks []check) {
		what, res := verify(t, r, checks)
		rows = append(rows, crashRow{Workflow: "ExperimentWorkflow", Step: step, Checked: what, Result: res, Took: took})
	}
	// One job started in the baseline window.
	r.start("", "")
	first := submitCrash(t, r, "standard", 1, 2, false)
	waitJobState(t, r, first.ID, vocab.JobSucceeded, 2*time.Minute)
	var baseHash string
	if err := r.db.QueryRow(ctx, `SELECT hash FROM policy_versions WHERE active`).Scan(&baseHash); err != nil {
		t.Fatal(err)
	}
	r.kill()
	events := func(id, kind string, want int) check {
		return check{what: "one " + kind + " event", sql: `SELECT count(*) FROM experiment_events WHERE experiment_id = $1 AND kind = $2`, args: []any{id, kind}, want: want}
	}
	audits := func(id, action string, want int) check {
		return check{what: "one " + action + " audited", sql: `SELECT count(*) FROM audit_log WHERE subject = $1 AND action = $2`, args: []any{id, action}, want: want}
	}
	active := func(what, hash string) check {
		return check{what: what, sql: `SELECT count(*) FROM policy_versions WHERE active AND hash = $1`, args: []any{hash}, want: 1}
	}
	prefix := temporalx.ExperimentWorkflowID("")
	var created *api.Experiment
	took := r.crashAt("LoadExperiment", crashpoint.AfterEffect, prefix, crashTimeout, func() {
		var err error
		if created, err = r.client.CreateExperiment(ctx, crashExperimentSpec("crash-kept", 120)); err != nil {
			t.Fatalf("create experiment: %v", err)
		}
	}, nil)
	id, cand := created.ID, created.CandidateHash
	add("LoadExperiment", took, []check{events(id, store.ExperimentEventCreated, 1), events(id, store.ExperimentEventBaselineMeasured, 0), active("baseline in force", baseHash)})

	took = r.crashAt("MeasureExperimentBaseline", crashpoint.AfterEffect, prefix, crashTimeout, nil, nil)
	add("MeasureExperimentBaseline", took, []check{events(id, store.ExperimentEventBaselineMeasured, 1), events(id, store.ExperimentEventSwitched, 0), active("baseline in force", baseHash)})

	took = r.crashAt("SwitchExperiment", crashpoint.AfterEffect, prefix, crashTimeout, nil, nil)
	add("SwitchExperiment", took, []check{events(id, store.ExperimentEventBaselineMeasured, 1), events(id, store.ExperimentEventSwitched, 1),
		audits(id, store.AuditExperimentSwitch, 1), active("candidate in force", cand)})

	// Three jobs start in the candidate's window.
	took = r.crashAt("CheckExperiment", crashpoint.AfterEffect, prefix, crashTimeout, func() {
		for range 3 {
			j := submitCrash(t, r, "standard", 1, 2, false)
			waitJobState(t, r, j.ID, vocab.JobSucceeded, 2*time.Minute)
		}
	}, nil)
	add("CheckExperiment", took, []check{events(id, store.ExperimentEventSwitched, 1), active("candidate in force", cand),
		{what: "each check recorded once", sql: `SELECT count(*) - count(DISTINCT step_key) FROM experiment_events WHERE experiment_id = $1 AND kind = 'check'`, args: []any{id}, want: 0},
		{what: "a check recorded", sql: `SELECT least(count(*), 1) FROM experiment_events WHERE experiment_id = $1 AND kind = 'check'`, args: []any{id}, want: 1}})

	took = r.crashAt("FinishExperiment", crashpoint.AfterEffect, prefix, crashTimeout, nil, nil)
	add("FinishExperiment (verdict kept)", took, []check{events(id, store.ExperimentEventVerdict, 1), events(id, store.ExperimentEventReverted, 0),
		{what: "verdict kept", sql: `SELECT count(*) FROM experiments WHERE id = $1 AND verdict = 'kept'`, args: []any{id}, want: 1},
		active("candidate in force", cand)})

	took = r.crashAt("PromoteExperiment", crashpoint.AfterEffect, prefix, crashTimeout, func() {
		waitFor(t, crashTimeout, "the promotion accepted", func() (bool, string) {
			_, err := r.client.DecideExperiment(ctx, id, temporalx.ExperimentPromote, "crash test: kept")
			return err == nil, errString(err)
		})
	}, nil)
	add("PromoteExperiment", took, []check{events(id, store.ExperimentEventVerdict, 1), events(id, store.ExperimentEventPromoted, 1),
		audits(id, store.AuditExperimentPromote, 1), active("candidate in force (the new baseline)", cand)})

	// A second experiment, aborted while it runs.
	var second *api.Experiment
	took = r.crashAt("AbortExperiment", crashpoint.AfterEffect, prefix, crashTimeout, func() {
		waitFor(t, crashTimeout, "the first experiment's workflow closed", func() (bool, string) {
			return workflowClosed(t, r, prefix+id), "running"
		})
		spec := crashExperimentSpec("crash-aborted", 3600)
		spec.Candidate = experiment.Candidate{Policy: strings.Replace(experimentCrashCandidate, "grace_s: 7", "grace_s: 9", 1)}
		var err error
		if second, err = r.client.CreateExperiment(ctx, spec); err != nil {
			t.Fatalf("create the second experiment: %v", err)
		}
		waitFor(t, crashTimeout, "the second experiment switched", func() (bool, string) {
			d, err := r.client.Experiment(ctx, second.ID)
			return err == nil && d.SwitchedAt != nil, errString(err)
		})
		if _, err := r.client.DecideExperiment(ctx, second.ID, temporalx.ExperimentAbort, "crash test: abort"); err != nil {
			t.Fatal(err)
		}
	}, nil)
	add("AbortExperiment", took, []check{events(second.ID, store.ExperimentEventAborted, 1), audits(second.ID, store.AuditExperimentAbort, 1),
		active("the first experiment's promoted candidate restored", cand)})

	r.start("", "")
	for _, wid := range []string{prefix + id, prefix + second.ID} {
		waitFor(t, crashTimeout, "experiment workflow "+wid+" closed", func() (bool, string) {
			return workflowClosed(t, r, wid), "running"
		})
	}
	r.stop()
	add("(end)", 0, []check{
		{what: "first promoted, second aborted", sql: `SELECT count(*) FROM experiments WHERE (id = $1 AND state = 'finished' AND promoted_at IS NOT NULL) OR (id = $2 AND state = 'aborted')`, args: []any{id, second.ID}, want: 2},
		events(id, store.ExperimentEventSwitched, 1), events(second.ID, store.ExperimentEventAborted, 1), events(second.ID, store.ExperimentEventReverted, 1),
		active("the promoted candidate in force", cand),
	})
	logCrashTable(t, rows, time.Since(began))
}
