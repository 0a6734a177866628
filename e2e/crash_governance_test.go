package e2e

import (
	"context"
	"fmt"
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

// The crash-at-every-step tests of ReclaimWorkflow (with the reclaim scan)
// and ExperimentWorkflow: as in crash_test.go, a real `gpugov serve` is
// SIGKILLed after each step's effect, started again, and the effect checked
// to have happened exactly once.

// reclaimCrashPolicy is crashPolicy's pool with the reclaim scan on every
// second and one queue per reclaim mode: key-project auto, standard notify,
// experiment confirm, batch (no rule) report.
const reclaimCrashPolicy = `version: gpugov.policy/v1
preemption: {enabled: false}
queues:
  - {name: production, tier: production, share: 4, max_wait_s: 60, protected: true}
  - {name: key-project, tier: key-project, share: 3, max_wait_s: 600}
  - {name: standard, tier: standard, share: 2, max_wait_s: 3600}
  - {name: experiment, tier: experiment, share: 1, max_wait_s: 21600, low_risk: true}
  - {name: batch, tier: standard, share: 1, max_wait_s: 3600}
reclaim:
  enabled: true
  scan_interval_s: 1
  notify_window_s: 600
  confirm_window_s: 600
  default_mode: report
  rules:
    - {queue: key-project, mode: auto}
    - {queue: standard, mode: notify}
    - {queue: experiment, mode: confirm}
pools:
  crash:
    stage: automate
`

// TestCrashAtEveryReclaimStep: four jobs, one per reclaim mode, each
// submitted when its mode's steps begin and declared complete by its owner
// once running, so the reclaim scan finds it (class completed). serve is
// SIGKILLed after ScanReclaims found the first, after AssessReclaim recorded
// it, after ReleaseReclaimed released it (auto mode); after NotifyOwner told
// the second's owner and after RecordDispute stored the owner's keep (notify
// mode; the keep is sent with project vision's token, the owning project's);
// after AwaitConfirmation (confirm mode, then confirmed by the operator);
// after CloseReclaim (report mode). A kept or reported job is cancelled by
// its owner once its steps are checked, and each job lives only through its
// own mode's kills: the simulated executor runs in serve, so every kill loses
// the run attempt of each running job, and a run has three attempts
// (workflows.JobInput.RunAttempts). The checks: one reclaim per allocation,
// one audit row per step (reclaim audit rows have the job as subject), one
// notice, one release of each released allocation, the kept and reported
// ones untouched, no GPU charged above its allocations.
func TestCrashAtEveryReclaimStep(t *testing.T) {
	requireTemporal(t)
	t.Parallel()
	began := time.Now()
	r := newCrashRig(t, gpugovBinary(t), crashRigOptions{policy: reclaimCrashPolicy, inventory: crashInventory, simSpeed: 1})
	ctx := context.Background()
	var rows []crashRow
	add := func(step string, took time.Duration, checks []check) {
		what, res := verify(t, r, checks)
		rows = append(rows, crashRow{Workflow: "ReclaimWorkflow", Step: step, Checked: what, Result: res, Took: took})
	}
	queues := []string{"key-project", "standard", "experiment", "batch"}
	jobs := make([]*api.Job, len(queues))
	allocs := make([]string, len(queues))
	// submitAndComplete submits job i, waits until it runs and declares it
	// complete (a trigger of crashAt: serve is running).
	submitAndComplete := func(i int) func() {
		return func() {
			jobs[i] = submitCrash(t, r, queues[i], 1, 3600, false)
			// crashTimeout: a scheduling cycle in flight when the previous serve
			// ended is retried only after its start-to-close timeout (2 min).
			waitJobState(t, r, jobs[i].ID, vocab.JobRunning, crashTimeout)
			if err := r.db.QueryRow(ctx, `SELECT id FROM allocations WHERE job_id = $1`, jobs[i].ID).Scan(&allocs[i]); err != nil {
				t.Fatal(err)
			}
			if _, err := r.client.Complete(ctx, jobs[i].ID, "crash test: work done, cleaning up"); err != nil {
				t.Fatalf("complete %s: %v", jobs[i].ID, err)
			}
		}
	}
	reclaims := func(i int) check {
		return check{what: "one reclaim of the allocation", sql: `SELECT count(*) FROM reclaims WHERE allocation_id = $1`, args: []any{allocs[i]}, want: 1}
	}
	audited := func(i int, action string, want int) check {
		return check{what: "one " + action + " audited", sql: `SELECT count(*) FROM audit_log a JOIN reclaims r ON a.subject = r.job_id
			WHERE r.allocation_id = $1 AND a.action = $2`, args: []any{allocs[i], action}, want: want}
	}
	wf := func(i int) string { return temporalx.ReclaimWorkflowID(allocs[i]) }
	// Before a job's allocation is known, its reclaim's crash point is
	// limited to reclaim workflows (every earlier one has closed by then).
	anyReclaim := temporalx.ReclaimWorkflowID("")
	// cancelJob starts serve, cancels job i as its owner and waits for it to
	// end cancelled, then stops serve.
	cancelJob := func(i int) {
		r.start("", "")
		if _, err := r.vision.Cancel(ctx, jobs[i].ID, "crash test: done with it"); err != nil {
			t.Fatalf("cancel %s: %v", jobs[i].ID, err)
		}
		waitJobState(t, r, jobs[i].ID, vocab.JobCancelled, 2*time.Minute)
		r.stop()
	}

	// Auto mode (key-project).
	took := r.crashAt("ScanReclaims", crashpoint.AfterEffect, temporalx.ReclaimScanWorkflowID, crashTimeout, submitAndComplete(0), nil)
	add("ScanReclaims (a finding)", took, []check{
		{what: "no reclaim recorded by the scan itself", sql: `SELECT count(*) FROM reclaims WHERE allocation_id = $1 AND state <> 'open'`, args: []any{allocs[0]}, want: 0},
	})
	took = r.crashAt("AssessReclaim", crashpoint.AfterEffect, wf(0), crashTimeout, nil, nil)
	add("AssessReclaim", took, []check{reclaims(0), audited(0, store.AuditReclaimOpen, 1),
		{what: "allocation not released yet", sql: `SELECT count(*) FROM allocations WHERE id = $1 AND released_at IS NULL`, args: []any{allocs[0]}, want: 1}})
	took = r.crashAt("ReleaseReclaimed", crashpoint.AfterEffect, wf(0), crashTimeout, nil, nil)
	add("ReleaseReclaimed (auto)", took, append([]check{reclaims(0), audited(0, store.AuditReclaimOpen, 1), audited(0, store.AuditReclaimRelease, 1),
		{what: "reclaim released", sql: `SELECT count(*) FROM reclaims WHERE allocation_id = $1 AND state = 'released' AND released_at IS NOT NULL`, args: []any{allocs[0]}, want: 1},
		{what: "allocation released", sql: `SELECT count(*) FROM allocations WHERE id = $1 AND released_at IS NOT NULL`, args: []any{allocs[0]}, want: 1},
	}, gpuChecks()...))

	// Notify mode (standard), kept by the owner.
	took = r.crashAt("NotifyOwner", crashpoint.AfterEffect, anyReclaim, crashTimeout, submitAndComplete(1), nil)
	notices := check{what: "one reclaim notice", sql: `SELECT count(*) FROM notifications WHERE job_id = $1 AND kind = 'job.reclaim_notice'`, args: []any{jobs[1].ID}, want: 1}
	add("NotifyOwner", took, []check{reclaims(1), notices, audited(1, store.AuditReclaimNotice, 1)})
	var reclaimID string
	took = r.crashAt("RecordDispute", crashpoint.AfterEffect, wf(1), crashTimeout, func() {
		waitFor(t, crashTimeout, "the reclaim notified (NotifyOwner retried)", func() (bool, string) {
			var state string
			_ = r.db.QueryRow(ctx, `SELECT id, state FROM reclaims WHERE allocation_id = $1`, allocs[1]).Scan(&reclaimID, &state)
			return state == string(vocab.ReclaimNotified) && r.queryInt(`SELECT count(*) FROM notifications WHERE job_id = $1 AND kind = 'job.reclaim_notice'`, jobs[1].ID) > 0, state
		})
		// The notice is stored before the workflow waits for the keep: poll the
		// keep until the workflow has it (a 409 while NotifyOwner's retry is
		// pending). Only the owning project may keep: project vision's token.
		waitFor(t, crashTimeout, "the owner's keep accepted", func() (bool, string) {
			_, err := r.vision.KeepReclaim(ctx, reclaimID, "crash test: still evaluating")
			return err == nil, errString(err)
		})
	}, nil)
	add("RecordDispute (owner's keep)", took, []check{reclaims(1), notices, audited(1, store.AuditReclaimNotice, 1), audited(1, store.AuditReclaimDispute, 1),
		{what: "reclaim kept, disputed", sql: `SELECT count(*) FROM reclaims WHERE allocation_id = $1 AND state = 'kept' AND disputed`, args: []any{allocs[1]}, want: 1},
		{what: "allocation kept", sql: `SELECT count(*) FROM allocations WHERE id = $1 AND released_at IS NULL`, args: []any{allocs[1]}, want: 1}})
	cancelJob(1)

	// Confirm mode (experiment), then confirmed by the operator.
	took = r.crashAt("AwaitConfirmation", crashpoint.AfterEffect, anyReclaim, crashTimeout, submitAndComplete(2), nil)
	add("AwaitConfirmation", took, []check{reclaims(2),
		{what: "reclaim awaiting confirmation", sql: `SELECT count(*) FROM reclaims WHERE allocation_id = $1 AND state = 'awaiting_confirmation'`, args: []any{allocs[2]}, want: 1},
		{what: "allocation kept", sql: `SELECT count(*) FROM allocations WHERE id = $1 AND released_at IS NULL`, args: []any{allocs[2]}, want: 1}})
	r.start("", "")
	var confirmID string
	waitFor(t, crashTimeout, "the confirm-mode reclaim awaiting (AwaitConfirmation retried)", func() (bool, string) {
		var state string
		_ = r.db.QueryRow(ctx, `SELECT id, state FROM reclaims WHERE allocation_id = $1`, allocs[2]).Scan(&confirmID, &state)
		if state != string(vocab.ReclaimAwaitConfirm) {
			return false, state
		}
		_, err := r.client.ConfirmReclaim(ctx, confirmID, "crash test: approved")
		return err == nil, errString(err)
	})
	waitFor(t, 4*time.Minute, "the confirmed reclaim released", func() (bool, string) {
		return r.queryInt(`SELECT count(*) FROM reclaims WHERE id = $1 AND state = 'released'`, confirmID) == 1, ""
	})
	r.stop()

	// Report mode (batch).
	took = r.crashAt("CloseReclaim", crashpoint.AfterEffect, anyReclaim, crashTimeout, submitAndComplete(3), nil)
	add("CloseReclaim (report)", took, []check{reclaims(3), audited(3, store.AuditReclaimClose, 1),
		{what: "reclaim reported", sql: `SELECT count(*) FROM reclaims WHERE allocation_id = $1 AND state = 'reported'`, args: []any{allocs[3]}, want: 1},
		{what: "allocation kept", sql: `SELECT count(*) FROM allocations WHERE id = $1 AND released_at IS NULL`, args: []any{allocs[3]}, want: 1}})
	cancelJob(3)

	// The end: every job ended, every reclaim workflow closed.
	r.start("", "")
	waitFor(t, 2*time.Minute, "every job ended", func() (bool, string) {
		n := r.queryInt(`SELECT count(*) FROM jobs WHERE state NOT IN ('cancelled','succeeded','failed')`)
		return n == 0, fmt.Sprintf("%d not ended", n)
	})
	for _, wid := range []string{wf(0), wf(1), wf(2), wf(3)} {
		waitFor(t, time.Minute, "reclaim workflow "+wid+" closed", func() (bool, string) {
			return workflowClosed(t, r, wid), "running"
		})
	}
	r.stop()
	end := []check{
		{what: "four reclaims, one per allocation", sql: `SELECT count(*) FROM reclaims`, want: 4},
		{what: "released: auto and confirm", sql: `SELECT count(*) FROM reclaims WHERE state = 'released'`, want: 2},
		{what: "one reclaim_release audit each", sql: `SELECT count(*) FROM (SELECT subject FROM audit_log WHERE action = 'reclaim_release' GROUP BY subject HAVING count(*) = 1) s`, want: 2},
		{what: "one reclaim_confirm audited", sql: `SELECT count(*) FROM audit_log WHERE action = 'reclaim_confirm' AND subject = $1`, args: []any{jobs[2].ID}, want: 1},
		{what: "one notice in all", sql: `SELECT count(*) FROM notifications WHERE kind = 'job.reclaim_notice'`, want: 1},
		{what: "every job ended", sql: `SELECT count(*) FROM jobs WHERE state NOT IN ('cancelled','succeeded','failed')`, want: 0},
		{what: "nothing charged", sql: `SELECT count(*) FROM gpu_usage WHERE used_milli <> 0`, want: 0},
	}
	add("(end)", 0, append(end, gpuChecks()...))
	logCrashTable(t, rows, time.Since(began))
}

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
