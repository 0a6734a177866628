package store_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpugov/gpugov/internal/experiment"
	"github.com/gpugov/gpugov/internal/policy"
	"github.com/gpugov/gpugov/internal/queuereport"
	"github.com/gpugov/gpugov/internal/scheduling"
	"github.com/gpugov/gpugov/internal/vocab"
	"github.com/gpugov/gpugov/store"
)

func f64(v float64) *float64 { return &v }

// baselineMeasurement is a baseline with 12 jobs, the experiment tier's
// longest wait 5400 s.
func baselineMeasurement() *experiment.Measurement {
	return &experiment.Measurement{
		Window: queuereport.Window{From: t0.Add(-3600e9), To: t0},
		Total:  queuereport.Group{Key: map[string]string{}, Jobs: 12, Started: 10},
		ByTier: []queuereport.Group{{Key: map[string]string{queuereport.KeyTier: "experiment"}, Jobs: 6, LongestWaitS: f64(5400)}},
	}
}

// runningExperiment creates an experiment on pool a100 and takes it through
// its baseline and switch.
func runningExperiment(t *testing.T, s *store.Store) (e *store.Experiment, base, cand string) {
	t.Helper()
	ctx := context.Background()
	base, cand = expPolicies(t, s)
	e = newExperiment(base, cand, "a100")
	e.Spec.Rollback = []experiment.Condition{{Name: "production p95", Metric: "wait_p95_s",
		Target: experiment.Target{Tier: "production"}, AboveBaselineFactor: f64(1.2)}}
	if err := s.CreateExperiment(ctx, e); err != nil {
		t.Fatal(err)
	}
	got, err := s.RecordExperimentBaseline(ctx, e.ID, baselineMeasurement(), t0)
	if err != nil || got.State != vocab.ExperimentBaseline || got.Baseline == nil || got.Baseline.Total.Jobs != 12 {
		t.Fatalf("baseline: %+v (%v)", got, err)
	}
	if got, err = s.SwitchExperiment(ctx, e.ID, t0); err != nil || got.State != vocab.ExperimentRunning || got.SwitchedAt == nil {
		t.Fatalf("switch: %+v (%v)", got, err)
	}
	return got, base, cand
}

func activeHash(t *testing.T, s *store.Store) string {
	t.Helper()
	h, err := s.ActivePolicyHash(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func eventKinds(t *testing.T, s *store.Store, id string) []string {
	t.Helper()
	evs, err := s.ExperimentEvents(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	out := make([]string, len(evs))
	for i, ev := range evs {
		out[i] = ev.Kind
	}
	return out
}

func auditActions(t *testing.T, s *store.Store, subject string) []string {
	t.Helper()
	es, err := s.AuditFor(context.Background(), subject, 0)
	if err != nil {
		t.Fatal(err)
	}
	out := make([]string, len(es))
	for i, e := range es {
		out[i] = e.Action
	}
	return out
}

// experimentSwitches returns the activate_policy entries made by the experiment.
func experimentSwitches(t *testing.T, s *store.Store, id string) []store.AuditEntry {
	t.Helper()
	var out []store.AuditEntry
	rows, err := s.Pool().Query(context.Background(), `SELECT subject, reason, evidence FROM audit_log
		WHERE action = 'activate_policy' AND actor = $1 ORDER BY id`, store.ExperimentWorkflowID(id))
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var e store.AuditEntry
		if err := rows.Scan(&e.Subject, &e.Reason, &e.Evidence); err != nil {
			t.Fatal(err)
		}
		out = append(out, e)
	}
	return out
}

// TestExperimentKeptAndPromoted: the switch activates the candidate as the
// experiment (audited with the baseline's numbers); checks are recorded
// once each; a kept verdict leaves the candidate in force and the pool
// held until the promotion.
func TestExperimentKeptAndPromoted(t *testing.T) {
	t.Parallel()
	s := newStoreWith(t, testPool("a100", 1, 8))
	ctx := context.Background()
	e, base, cand := runningExperiment(t, s)
	if activeHash(t, s) != cand {
		t.Fatal("the candidate is not active after the switch")
	}
	sw := experimentSwitches(t, s, e.ID)
	if len(sw) != 1 || sw[0].Subject != cand || sw[0].Evidence["previous"] != base || sw[0].Evidence["baseline_jobs"] != float64(12) {
		t.Fatalf("switch audit %+v", sw)
	}
	// A retried switch and baseline change nothing.
	if _, err := s.SwitchExperiment(ctx, e.ID, t0.Add(1e9)); err != nil {
		t.Fatal(err)
	}
	if _, err := s.RecordExperimentBaseline(ctx, e.ID, baselineMeasurement(), t0.Add(1e9)); err != nil {
		t.Fatal(err)
	}
	if n := len(experimentSwitches(t, s, e.ID)); n != 1 {
		t.Fatalf("%d switches after a retry, want 1", n)
	}
	results := []experiment.ConditionResult{{Condition: e.Spec.Rollback[0], Value: f64(300), Baseline: f64(290),
		Threshold: f64(348), Text: "production tier wait_p95_s 300 s ≤ 1.2 × baseline 290 s = 348 s"}}
	w := experiment.Measurement{Window: queuereport.Window{From: t0, To: t0.Add(300e9)}, Total: queuereport.Group{Jobs: 4}}
	for range 2 {
		if _, err := s.RecordExperimentCheck(ctx, e.ID, 1, w, results, t0.Add(300e9)); err != nil {
			t.Fatal(err)
		}
	}
	evs, err := s.ExperimentEvents(ctx, e.ID)
	if err != nil {
		t.Fatal(err)
	}
	last := evs[len(evs)-1]
	if last.Kind != store.ExperimentEventCheck || !strings.Contains(last.Detail, "check 1 over") ||
		!strings.Contains(last.Detail, "300 s ≤ 1.2 × baseline 290 s") {
		t.Fatalf("check event %+v", last)
	}
	var back []experiment.ConditionResult
	if err := json.Unmarshal(last.Data, &back); err != nil || len(back) != 1 || *back[0].Value != 300 {
		t.Fatalf("check data %s (%v)", last.Data, err)
	}
	out := &experiment.Outcome{Verdict: vocab.VerdictKept, Reason: "experiment longest_wait_s 5400 s → 3000 s (−44.4 %): met"}
	got, err := s.FinishExperiment(ctx, e.ID, out, t0.Add(3600e9))
	if err != nil || got.State != vocab.ExperimentFinished || got.Verdict != vocab.VerdictKept || got.Outcome == nil ||
		got.EndedAt == nil || !got.HoldsPools() {
		t.Fatalf("finish kept: %+v (%v)", got, err)
	}
	if activeHash(t, s) != cand {
		t.Fatal("a kept candidate must stay in force")
	}
	// The pool is still held: a new experiment there is refused.
	var c *store.ExperimentConflict
	if err := s.CreateExperiment(ctx, newExperiment(cand, base, "a100")); !errors.As(err, &c) || c.ID != e.ID {
		t.Fatalf("create while kept: %v, want a conflict naming %s", err, e.ID)
	}
	if _, err := s.AbortExperiment(ctx, e.ID, "", "", t0); !errors.Is(err, store.ErrInvalid) {
		t.Fatalf("abort without actor: %v", err)
	}
	got, err = s.PromoteExperiment(ctx, e.ID, "admin-alice", "ship it", t0.Add(3700e9))
	if err != nil || got.PromotedAt == nil || got.HoldsPools() || got.State != vocab.ExperimentFinished {
		t.Fatalf("promote: %+v (%v)", got, err)
	}
	if activeHash(t, s) != cand {
		t.Fatal("the promoted candidate must stay active")
	}
	want := []string{"created", "baseline_measured", "switched", "check", "verdict", "promoted"}
	if got := eventKinds(t, s, e.ID); !slices.Equal(got, want) {
		t.Fatalf("timeline %v, want %v", got, want)
	}
	wantAudit := []string{store.AuditCreateExperiment, store.AuditExperimentSwitch, store.AuditExperimentPromote}
	if got := auditActions(t, s, e.ID); !slices.Equal(got, wantAudit) {
		t.Fatalf("audit %v, want %v", got, wantAudit)
	}
	if _, err := s.AbortExperiment(ctx, e.ID, "admin-bob", "late", t0); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("abort after promotion: %v, want ErrConflict", err)
	}
	// The pool is free again; the candidate is the new baseline.
	if err := s.CreateExperiment(ctx, newExperiment(cand, base, "a100")); err != nil {
		t.Fatalf("create after promotion: %v", err)
	}
}

// TestExperimentNotMetReverts: not_met restores the baseline, audited.
func TestExperimentNotMetReverts(t *testing.T) {
	t.Parallel()
	s := newStoreWith(t, testPool("a100", 1, 8))
	ctx := context.Background()
	e, base, _ := runningExperiment(t, s)
	got, err := s.FinishExperiment(ctx, e.ID, &experiment.Outcome{Verdict: vocab.VerdictNotMet, Reason: "−10 %, expected −30 %"}, t0.Add(3600e9))
	if err != nil || got.State != vocab.ExperimentFinished || got.Verdict != vocab.VerdictNotMet || got.HoldsPools() {
		t.Fatalf("finish not met: %+v (%v)", got, err)
	}
	if activeHash(t, s) != base {
		t.Fatal("not_met must restore the baseline")
	}
	if got := eventKinds(t, s, e.ID); !slices.Equal(got[3:], []string{"verdict", "reverted"}) {
		t.Fatalf("timeline %v", got)
	}
	if got := auditActions(t, s, e.ID); !slices.Contains(got, store.AuditExperimentRevert) {
		t.Fatalf("audit %v lacks experiment_revert", got)
	}
	sw := experimentSwitches(t, s, e.ID)
	if len(sw) != 2 || sw[1].Subject != base || sw[1].Evidence["verdict"] != "not_met" {
		t.Fatalf("switches %+v", sw)
	}
	if _, err := s.AbortExperiment(ctx, e.ID, "admin-bob", "", t0); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("abort after not_met: %v, want ErrConflict", err)
	}
	if _, err := s.PromoteExperiment(ctx, e.ID, "admin-bob", "", t0); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("promote after not_met: %v, want ErrConflict", err)
	}
	// A retried finish changes nothing.
	if _, err := s.FinishExperiment(ctx, e.ID, &experiment.Outcome{Verdict: vocab.VerdictNotMet}, t0.Add(3601e9)); err != nil {
		t.Fatal(err)
	}
	if n := len(experimentSwitches(t, s, e.ID)); n != 2 {
		t.Fatalf("%d switches after a retried finish", n)
	}
}

// TestExperimentRollBack: a breach restores the baseline at once, with
// the numbers in the audit and an admins' notification.
func TestExperimentRollBack(t *testing.T) {
	t.Parallel()
	s := newStoreWith(t, testPool("a100", 1, 8))
	ctx := context.Background()
	e, base, _ := runningExperiment(t, s)
	breach := experiment.ConditionResult{Condition: e.Spec.Rollback[0], Value: f64(412), Baseline: f64(300), Threshold: f64(360),
		Breached: true, Text: "production tier wait_p95_s 412 s > 1.2 × baseline 300 s = 360 s"}
	if _, err := s.RollBackExperiment(ctx, e.ID, &experiment.Outcome{Verdict: vocab.VerdictNotMet}, t0); !errors.Is(err, store.ErrInvalid) {
		t.Fatalf("rollback without breach: %v", err)
	}
	out := &experiment.Outcome{Verdict: vocab.VerdictRolledBack, Reason: "rolled back: " + breach.Text,
		Breaches: []experiment.ConditionResult{breach}}
	got, err := s.RollBackExperiment(ctx, e.ID, out, t0.Add(600e9))
	if err != nil || got.State != vocab.ExperimentFinished || got.Verdict != vocab.VerdictRolledBack || len(got.Outcome.Breaches) != 1 {
		t.Fatalf("rollback: %+v (%v)", got, err)
	}
	if activeHash(t, s) != base {
		t.Fatal("the rollback must restore the baseline")
	}
	if got := eventKinds(t, s, e.ID); !slices.Equal(got[3:], []string{"rolled_back", "verdict"}) {
		t.Fatalf("timeline %v", got)
	}
	// The rolled_back event carries the breached results, as a check does.
	evs, err := s.ExperimentEvents(ctx, e.ID)
	if err != nil {
		t.Fatal(err)
	}
	var carried []experiment.ConditionResult
	if err := json.Unmarshal(evs[3].Data, &carried); err != nil || len(carried) != 1 || !carried[0].Breached ||
		carried[0].Value == nil || *carried[0].Value != 412 || carried[0].Threshold == nil || *carried[0].Threshold != 360 {
		t.Fatalf("rolled_back event data %s (%v), want the breach with its numbers", evs[3].Data, err)
	}
	audit, err := s.AuditFor(ctx, e.ID, 0)
	if err != nil {
		t.Fatal(err)
	}
	rb := audit[len(audit)-1]
	bs, _ := rb.Evidence["breaches"].([]any)
	if rb.Action != store.AuditExperimentRollback || len(bs) != 1 || bs[0].(map[string]any)["value"] != float64(412) ||
		!strings.Contains(rb.Reason, "412 s > 1.2 × baseline 300 s = 360 s") {
		t.Fatalf("rollback audit %+v", rb)
	}
	ns, err := s.ListNotifications(ctx, store.NotificationFilter{Project: policy.AdminsRecipient})
	if err != nil || len(ns) != 1 || ns[0].Kind != vocab.NotifyExperimentRolledBack || ns[0].JobID != "" ||
		ns[0].Data["experiment_id"] != e.ID || ns[0].Data["restored"] != true {
		t.Fatalf("admins notifications %+v (%v)", ns, err)
	}
	if !strings.Contains(string(ns[0].Body()), `"412 s > 1.2`) && !strings.Contains(string(ns[0].Body()), "412") {
		t.Fatalf("notification body lacks the numbers: %s", ns[0].Body())
	}
	// Retried: nothing more.
	if _, err := s.RollBackExperiment(ctx, e.ID, out, t0.Add(601e9)); err != nil {
		t.Fatal(err)
	}
	if ns, _ := s.ListNotifications(ctx, store.NotificationFilter{Project: policy.AdminsRecipient}); len(ns) != 1 {
		t.Fatalf("%d notifications after a retried rollback", len(ns))
	}
	// With no admins webhook the dispatcher marks it unrouted: it stays readable.
	sw, err := s.SweepNotifications(ctx, nil, t0.Add(-1e9), t0.Add(602e9))
	if err != nil || sw.Unrouted != 1 {
		t.Fatalf("sweep %+v (%v)", sw, err)
	}
}

// TestExperimentAbort: an abort before the switch switches nothing; an
// abort while running restores the baseline.
func TestExperimentAbort(t *testing.T) {
	t.Parallel()
	s := newStoreWith(t, testPool("a100", 1, 8), testPool("h100", 1, 8))
	ctx := context.Background()
	e, base, _ := runningExperiment(t, s)
	got, err := s.AbortExperiment(ctx, e.ID, "admin-bob", "the queue is on fire", t0.Add(60e9))
	if err != nil || got.State != vocab.ExperimentAborted || got.EndedAt == nil || got.HoldsPools() {
		t.Fatalf("abort: %+v (%v)", got, err)
	}
	if activeHash(t, s) != base {
		t.Fatal("an abort while running must restore the baseline")
	}
	if got := eventKinds(t, s, e.ID); !slices.Equal(got[3:], []string{"aborted", "reverted"}) {
		t.Fatalf("timeline %v", got)
	}
	if got := auditActions(t, s, e.ID); !slices.Equal(got[len(got)-2:], []string{store.AuditExperimentAbort, store.AuditExperimentRevert}) {
		t.Fatalf("audit %v", got)
	}
	if _, err := s.AbortExperiment(ctx, e.ID, "admin-bob", "again", t0.Add(61e9)); err != nil {
		t.Fatalf("second abort: %v", err)
	}

	// Scheduled: aborted, nothing switched.
	_, cand := base, e.CandidateHash
	sched := newExperiment(base, cand, "h100")
	if err := s.CreateExperiment(ctx, sched); err != nil {
		t.Fatal(err)
	}
	if got, err := s.AbortExperiment(ctx, sched.ID, "admin-bob", "", t0); err != nil || got.State != vocab.ExperimentAborted {
		t.Fatalf("abort scheduled: %+v (%v)", got, err)
	}
	if len(experimentSwitches(t, s, sched.ID)) != 0 || activeHash(t, s) != base {
		t.Fatal("aborting a scheduled experiment switched the policy")
	}
	if _, err := s.SwitchExperiment(ctx, sched.ID, t0); err != nil {
		t.Fatalf("switch after abort: %v", err)
	}
	if activeHash(t, s) != base {
		t.Fatal("a switch after the abort switched the policy")
	}
}

// TestExperimentPolicyChangedOutside: a quota approved meanwhile keeps
// the candidate in force; another applied policy ends the experiment
// aborted, restoring nothing.
func TestExperimentPolicyChangedOutside(t *testing.T) {
	t.Parallel()
	s := newStoreWith(t, testPool("a100", 1, 8))
	ctx := context.Background()
	e, _, cand := runningExperiment(t, s)
	if _, err := s.SetQuota(ctx, store.QuotaChange{Pool: "a100", Project: "vision", NominalMilli: 4000,
		Actor: "admin-alice", Reason: "approved request"}); err != nil {
		t.Fatal(err)
	}
	derived := activeHash(t, s)
	if derived == cand {
		t.Fatal("SetQuota did not derive a version")
	}
	got, err := s.VerifyExperimentPolicy(ctx, e.ID, t0.Add(60e9))
	if err != nil || got.State != vocab.ExperimentRunning {
		t.Fatalf("after a quota change: %+v (%v), want running", got, err)
	}
	other := policy.Default()
	other.Aging.CapPoints++
	if _, err := s.ActivatePolicy(ctx, other.Hash(), other.Canonical(), "admin-carol", "manual change", nil); err != nil {
		t.Fatal(err)
	}
	got, err = s.VerifyExperimentPolicy(ctx, e.ID, t0.Add(120e9))
	if err != nil || got.State != vocab.ExperimentAborted || got.Verdict != "" {
		t.Fatalf("after another policy: %+v (%v), want aborted", got, err)
	}
	if activeHash(t, s) != other.Hash() {
		t.Fatal("the experiment fought the applied policy")
	}
	evs, _ := s.ExperimentEvents(ctx, e.ID)
	if last := evs[len(evs)-1]; last.Kind != store.ExperimentEventPolicyChanged || !strings.Contains(last.Detail, other.Hash()[:12]) {
		t.Fatalf("last event %+v", last)
	}
	if got := auditActions(t, s, e.ID); got[len(got)-1] != store.AuditExperimentAbort {
		t.Fatalf("audit %v", got)
	}
	// Later steps are no-ops on the aborted experiment.
	if got, err := s.FinishExperiment(ctx, e.ID, &experiment.Outcome{Verdict: vocab.VerdictNotMet}, t0.Add(3600e9)); err != nil ||
		got.State != vocab.ExperimentAborted || activeHash(t, s) != other.Hash() {
		t.Fatalf("finish after abort: %+v (%v)", got, err)
	}
}

// TestExperimentSwitchRefusedAfterOutsideChange: when the active version is
// no longer the baseline at the switch, the experiment ends aborted.
func TestExperimentSwitchRefusedAfterOutsideChange(t *testing.T) {
	t.Parallel()
	s := newStoreWith(t, testPool("a100", 1, 8))
	ctx := context.Background()
	base, cand := expPolicies(t, s)
	e := newExperiment(base, cand, "a100")
	if err := s.CreateExperiment(ctx, e); err != nil {
		t.Fatal(err)
	}
	if _, err := s.SwitchExperiment(ctx, e.ID, t0); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("switch before the baseline: %v, want ErrConflict", err)
	}
	if _, err := s.RecordExperimentBaseline(ctx, e.ID, baselineMeasurement(), t0); err != nil {
		t.Fatal(err)
	}
	other := policy.Default()
	other.Aging.CapPoints++
	if _, err := s.ActivatePolicy(ctx, other.Hash(), other.Canonical(), "admin-carol", "manual change", nil); err != nil {
		t.Fatal(err)
	}
	got, err := s.SwitchExperiment(ctx, e.ID, t0)
	if err != nil || got.State != vocab.ExperimentAborted || activeHash(t, s) != other.Hash() {
		t.Fatalf("switch after an outside change: %+v (%v)", got, err)
	}
	if got := eventKinds(t, s, e.ID); got[len(got)-1] != store.ExperimentEventPolicyChanged {
		t.Fatalf("timeline %v", got)
	}
}

// TestVerifyExperimentPolicyBeforeTheSwitch: before its switch an
// experiment expects its baseline in force; VerifyExperimentPolicy (which
// the API runs right after an override) leaves it while the baseline is
// active and ends it aborted, policy_changed, once another version is.
func TestVerifyExperimentPolicyBeforeTheSwitch(t *testing.T) {
	t.Parallel()
	s := newStoreWith(t, testPool("a100", 1, 8))
	ctx := context.Background()
	base, cand := expPolicies(t, s)
	e := newExperiment(base, cand, "a100")
	if err := s.CreateExperiment(ctx, e); err != nil {
		t.Fatal(err)
	}
	if got, err := s.VerifyExperimentPolicy(ctx, e.ID, t0); err != nil || got.State != vocab.ExperimentScheduled {
		t.Fatalf("baseline in force: %+v (%v), want scheduled", got, err)
	}
	if _, err := s.RecordExperimentBaseline(ctx, e.ID, baselineMeasurement(), t0); err != nil {
		t.Fatal(err)
	}
	other := policy.Default()
	other.Aging.CapPoints++
	if _, err := s.ActivatePolicy(ctx, other.Hash(), other.Canonical(), "admin-carol", "override", nil); err != nil {
		t.Fatal(err)
	}
	got, err := s.VerifyExperimentPolicy(ctx, e.ID, t0.Add(1e9))
	if err != nil || got.State != vocab.ExperimentAborted || got.HoldsPools() || activeHash(t, s) != other.Hash() {
		t.Fatalf("after another policy: %+v (%v), want aborted, nothing restored", got, err)
	}
	evs, _ := s.ExperimentEvents(ctx, e.ID)
	if last := evs[len(evs)-1]; last.Kind != store.ExperimentEventPolicyChanged ||
		!strings.Contains(last.Detail, "before the switch: the active policy version is "+other.Hash()[:12]+", not the baseline") {
		t.Fatalf("last event %+v", last)
	}
}

// TestExperimentTimelineTexts: one job is "1 job", a long window and a large
// value are written out in full (no exponent), and a verdict event does not
// repeat its verdict word.
func TestExperimentTimelineTexts(t *testing.T) {
	t.Parallel()
	s := newStoreWith(t, testPool("a100", 1, 8))
	ctx := context.Background()
	base, cand := expPolicies(t, s)
	e := newExperiment(base, cand, "a100")
	e.Spec.WindowSeconds = 2592000
	if err := s.CreateExperiment(ctx, e); err != nil {
		t.Fatal(err)
	}
	m := &experiment.Measurement{Window: queuereport.Window{From: t0.Add(-3600e9), To: t0},
		Total:  queuereport.Group{Key: map[string]string{}, Jobs: 1, Started: 1},
		ByTier: []queuereport.Group{{Key: map[string]string{queuereport.KeyTier: "experiment"}, Jobs: 1, LongestWaitS: f64(1234567)}}}
	if _, err := s.RecordExperimentBaseline(ctx, e.ID, m, t0); err != nil {
		t.Fatal(err)
	}
	if _, err := s.SwitchExperiment(ctx, e.ID, t0); err != nil {
		t.Fatal(err)
	}
	out := &experiment.Outcome{Verdict: vocab.VerdictInconclusive,
		Reason: "inconclusive: experiment tier had 1 job in the baseline window and 0 jobs in the candidate window; a verdict needs at least 5 in each (min_sample)"}
	if _, err := s.FinishExperiment(ctx, e.ID, out, t0.Add(3600e9)); err != nil {
		t.Fatal(err)
	}
	evs, err := s.ExperimentEvents(ctx, e.ID)
	if err != nil {
		t.Fatal(err)
	}
	details := map[string]string{}
	for _, ev := range evs {
		details[ev.Kind] = ev.Detail
	}
	for kind, want := range map[string]string{
		store.ExperimentEventCreated:          "window 2592000 s from",
		store.ExperimentEventBaselineMeasured: ": 1 job, 1 started; experiment tier longest_wait_s = 1235000 s (1 job)",
		store.ExperimentEventVerdict:          "verdict inconclusive — experiment tier had 1 job",
	} {
		if !strings.Contains(details[kind], want) {
			t.Errorf("%s event %q, want %q in it", kind, details[kind], want)
		}
	}
	if strings.Contains(details[store.ExperimentEventVerdict], "inconclusive: ") {
		t.Errorf("verdict event repeats the verdict: %q", details[store.ExperimentEventVerdict])
	}
}

// TestBaselineNamesTheVersionsItsCyclesRanUnder: the baseline event says
// which versions the window's cycles really ran under (here an older one,
// then the baseline), not only the baseline version.
func TestBaselineNamesTheVersionsItsCyclesRanUnder(t *testing.T) {
	t.Parallel()
	s := newStoreWith(t, testPool("a100", 1, 8))
	ctx := context.Background()
	base, cand := policy.Default(), policy.Default()
	cand.Aging.IntervalSeconds *= 2
	for _, p := range []*policy.Policy{base, cand} {
		if err := s.SavePolicyVersion(ctx, p.Hash(), p.Canonical()); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.ActivatePolicyVersion(ctx, base.Hash(), "serve", "policy file"); err != nil {
		t.Fatal(err)
	}
	older := strings.Repeat("a", 64)
	for i, c := range []struct {
		version string
		at      time.Duration
	}{{older, -50 * time.Minute}, {older, -40 * time.Minute}, {base.Hash(), -10 * time.Minute}} {
		if _, err := s.ApplyCycle(ctx, fmt.Sprintf("c%d", i), &scheduling.Result{PolicyVersion: c.version}, t0.Add(c.at)); err != nil {
			t.Fatal(err)
		}
	}
	e := newExperiment(base.Hash(), cand.Hash(), "a100")
	if err := s.CreateExperiment(ctx, e); err != nil {
		t.Fatal(err)
	}
	if _, err := s.RecordExperimentBaseline(ctx, e.ID, baselineMeasurement(), t0); err != nil {
		t.Fatal(err)
	}
	evs, err := s.ExperimentEvents(ctx, e.ID)
	if err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("(baseline version %s; its cycles ran under aaaaaaaaaaaa, %s)", base.Hash()[:12], base.Hash()[:12])
	for _, ev := range evs {
		if ev.Kind == store.ExperimentEventBaselineMeasured {
			if !strings.Contains(ev.Detail, want) {
				t.Fatalf("baseline event %q, want it to contain %q", ev.Detail, want)
			}
			return
		}
	}
	t.Fatalf("no baseline event in %+v", evs)
}
