package activities_test

import (
	"context"
	"encoding/json"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.temporal.io/sdk/testsuite"

	"github.com/gpugov/gpugov/activities"
	"github.com/gpugov/gpugov/internal/experiment"
	"github.com/gpugov/gpugov/internal/policy"
	"github.com/gpugov/gpugov/internal/queuereport"
	"github.com/gpugov/gpugov/internal/scheduling"
	"github.com/gpugov/gpugov/internal/vocab"
	"github.com/gpugov/gpugov/internal/webhook/webhooktest"
	"github.com/gpugov/gpugov/store"
	"github.com/gpugov/gpugov/store/storetest"
)

// expStart is when the experiments of these tests start: a window of 600 s
// on each side of it.
var expStart = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

// expClock is the activities' clock, set by the test.
type expClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *expClock) set(t time.Time) { c.mu.Lock(); c.now = t; c.mu.Unlock() }
func (c *expClock) Now() time.Time  { c.mu.Lock(); defer c.mu.Unlock(); return c.now }

// expFixture is a store with pool p1, the default policy active (the
// baseline) and an aging candidate stored, jobs submitted at the given
// offsets from expStart, and an experiment on p1 created with spec (its
// candidate, start and scope filled in), run by activities on a test
// activity environment with clock.
type expFixture struct {
	st    *store.Store
	env   *testsuite.TestActivityEnvironment
	clock *expClock
	e     *store.Experiment
	base  string
	cand  string
	rec   *rollbackCounter
}

// rollbackCounter is the activities' GovernanceRecorder in these tests: it
// counts the experiment rollbacks reported (gpugov_experiment_rollbacks_total).
type rollbackCounter struct {
	mu        sync.Mutex
	rollbacks int
}

func (r *rollbackCounter) RecordPreemption(context.Context, string, string, *float64, *bool) {}
func (r *rollbackCounter) RecordReclaim(context.Context, string, string, string, string, float64, bool) {
}
func (r *rollbackCounter) RecordExperimentRollback(context.Context) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.rollbacks++
}

func (r *rollbackCounter) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.rollbacks
}

func newExpFixture(t *testing.T, spec experiment.Spec, submitAt ...time.Duration) *expFixture {
	t.Helper()
	return newExpFixtureWith(t, nil, spec, submitAt...)
}

// newExpFixtureWith is newExpFixture with the policy in force cfg (nil: the default).
func newExpFixtureWith(t *testing.T, cfg *policy.Policy, spec experiment.Spec, submitAt ...time.Duration) *expFixture {
	t.Helper()
	ctx := context.Background()
	st, _ := storetest.NewStore(t, storetest.Fixture{
		Pools: []scheduling.Pool{storetest.Pool(testPool, vocab.StageObserve, 1, 4)}, Queues: []scheduling.Queue{storetest.TrainQueue}})
	base, cand := policy.Default(), policy.Default()
	cand.Aging.IntervalSeconds *= 2
	if err := st.SavePolicyVersion(ctx, cand.Hash(), cand.Canonical()); err != nil {
		t.Fatal(err)
	}
	if _, err := st.ActivatePolicy(ctx, base.Hash(), base.Canonical(), "serve", "policy file", nil); err != nil {
		t.Fatal(err)
	}
	for _, d := range submitAt {
		storetest.Submit(t, st, &store.NewJob{Project: "vision", Queue: "train", Tier: vocab.TierStandard,
			SubmitTime: expStart.Add(d), Request: scheduling.ResourceRequest{GPUs: 1, Pool: testPool}})
	}
	start := expStart
	spec.Start, spec.Scope.Pools = &start, []string{testPool}
	e := &store.Experiment{Spec: spec, BaselineHash: base.Hash(), CandidateHash: cand.Hash(),
		Groups: []vocab.PolicyGroup{vocab.PolicyAging}, CreatedBy: "admin-alice"}
	if err := st.CreateExperiment(ctx, e); err != nil {
		t.Fatal(err)
	}
	clock := &expClock{now: expStart}
	var suite testsuite.WorkflowTestSuite
	env := suite.NewTestActivityEnvironment()
	rec := &rollbackCounter{}
	activities.Register(env, activities.Deps{Store: st, Now: clock.Now, CycleIntervalSeconds: 5,
		Governance: func() *policy.Policy { return cfg }, Metrics: rec})
	return &expFixture{st: st, env: env, clock: clock, e: e, base: base.Hash(), cand: cand.Hash(), rec: rec}
}

// step runs activity name with in at the clock's time t and returns the status.
func (f *expFixture) step(t *testing.T, at time.Time, name string, in any) *activities.ExperimentStatus {
	t.Helper()
	f.clock.set(at)
	val, err := f.env.ExecuteActivity(name, in)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	var st activities.ExperimentStatus
	if err := val.Get(&st); err != nil {
		t.Fatal(err)
	}
	return &st
}

func (f *expFixture) active(t *testing.T) string {
	t.Helper()
	h, err := f.st.ActivePolicyHash(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func (f *expFixture) kinds(t *testing.T) []string {
	t.Helper()
	evs, err := f.st.ExperimentEvents(context.Background(), f.e.ID)
	if err != nil {
		t.Fatal(err)
	}
	out := make([]string, len(evs))
	for i, ev := range evs {
		out[i] = ev.Kind
	}
	return out
}

func fp(v float64) *float64 { return &v }

// submittedSpec expects the jobs submitted in the scope to double; its
// rollback condition is a cap on the jobs submitted in the window so far.
func submittedSpec(cap float64) experiment.Spec {
	return experiment.Spec{Name: "submissions", Hypothesis: "twice the submissions", WindowSeconds: 600,
		Expected: experiment.Expectation{Metric: "submitted", Direction: experiment.Increase, Change: 1},
		Rollback: []experiment.Condition{{Name: "submission cap", Metric: "submitted", Above: fp(cap)}}, MinSample: 1}
}

// TestExperimentActivitiesKeptAndPromoted runs the steps on PostgreSQL:
// the baseline window (2 submissions before the start) is measured and
// stored, the candidate switched in, a check measures the window so far
// on the queue report's definitions, the full window (4 submissions) meets
// the expected doubling, so the candidate stays and is promoted.
func TestExperimentActivitiesKeptAndPromoted(t *testing.T) {
	f := newExpFixture(t, submittedSpec(10), -500*time.Second, -400*time.Second,
		100*time.Second, 200*time.Second, 400*time.Second, 500*time.Second)
	ref := &activities.ExperimentRef{ID: f.e.ID}
	st := f.step(t, expStart, "LoadExperiment", ref)
	if st.State != vocab.ExperimentScheduled || st.Pool != testPool || !st.StartAt.Equal(expStart) || st.CheckIntervalSeconds != 50 {
		t.Fatalf("load: %+v", st)
	}
	if st = f.step(t, expStart, "MeasureExperimentBaseline", ref); st.State != vocab.ExperimentBaseline {
		t.Fatalf("baseline: %+v", st)
	}
	e, err := f.st.GetExperiment(context.Background(), f.e.ID)
	if err != nil || e.Baseline == nil || e.Baseline.Total.Submitted != 2 {
		t.Fatalf("stored baseline %+v (%v), want 2 submitted", e.Baseline, err)
	}
	if st = f.step(t, expStart, "SwitchExperiment", ref); st.State != vocab.ExperimentRunning || f.active(t) != f.cand {
		t.Fatalf("switch: %+v, active %s", st, f.active(t))
	}
	st = f.step(t, expStart.Add(300*time.Second), "CheckExperiment", &activities.ExperimentCheckInput{ID: f.e.ID, N: 1})
	if st.State != vocab.ExperimentRunning {
		t.Fatalf("check: %+v", st)
	}
	evs, _ := f.st.ExperimentEvents(context.Background(), f.e.ID)
	if last := evs[len(evs)-1]; last.Kind != store.ExperimentEventCheck || !strings.Contains(last.Detail, "total submitted 2 jobs ≤ 10 jobs") {
		t.Fatalf("check event %+v", last)
	}
	st = f.step(t, expStart.Add(601*time.Second), "FinishExperiment", ref)
	if st.State != vocab.ExperimentFinished || st.Verdict != vocab.VerdictKept || !st.Holds || f.active(t) != f.cand {
		t.Fatalf("finish: %+v", st)
	}
	e, _ = f.st.GetExperiment(context.Background(), f.e.ID)
	if e.Outcome == nil || e.Outcome.Expected.Before == nil || *e.Outcome.Expected.Before != 2 || *e.Outcome.Expected.After != 4 ||
		!e.Outcome.Expected.Met {
		t.Fatalf("outcome %+v", e.Outcome)
	}
	st = f.step(t, expStart.Add(700*time.Second), "PromoteExperiment",
		&activities.ExperimentDecisionInput{ID: f.e.ID, Actor: "admin-alice", Reason: "keep it"})
	if !st.Promoted || st.Holds {
		t.Fatalf("promote: %+v", st)
	}
	want := []string{"created", "baseline_measured", "switched", "check", "verdict", "promoted"}
	if got := f.kinds(t); !slices.Equal(got, want) {
		t.Fatalf("timeline %v, want %v", got, want)
	}
	// A second promotion or an abort now is ignored (logged), not an error.
	if st = f.step(t, expStart.Add(800*time.Second), "AbortExperiment",
		&activities.ExperimentDecisionInput{ID: f.e.ID, Actor: "admin-bob"}); st.State != vocab.ExperimentFinished {
		t.Fatalf("abort after promotion: %+v", st)
	}
}

// TestExperimentActivitiesRollBack: a check that breaches rolls back at
// once, with the numbers that breached in the outcome, and notifies the
// admins through the outbox: the notification is delivered, signed, to the
// policy's notifications.admins webhook.
func TestExperimentActivitiesRollBack(t *testing.T) {
	t.Setenv("GPUGOV_TEST_ADMINS_SECRET", "adm1n")
	recv := &webhooktest.Receiver{T: t, Secret: []byte("adm1n")}
	srv := httptest.NewServer(recv)
	defer srv.Close()
	cfg := policy.Default()
	cfg.Notifications.Admins = &policy.Webhook{URL: srv.URL + "/admins", SecretEnv: "GPUGOV_TEST_ADMINS_SECRET"}
	f := newExpFixtureWith(t, cfg, submittedSpec(2), -500*time.Second, 100*time.Second, 150*time.Second, 200*time.Second)
	ref := &activities.ExperimentRef{ID: f.e.ID}
	f.step(t, expStart, "MeasureExperimentBaseline", ref)
	f.step(t, expStart, "SwitchExperiment", ref)
	st := f.step(t, expStart.Add(250*time.Second), "CheckExperiment", &activities.ExperimentCheckInput{ID: f.e.ID, N: 1})
	if st.State != vocab.ExperimentFinished || st.Verdict != vocab.VerdictRolledBack || !strings.Contains(st.Detail, "total submitted 3 jobs > 2 jobs") {
		t.Fatalf("check with a breach: %+v", st)
	}
	if f.active(t) != f.base {
		t.Fatal("the breach did not restore the baseline")
	}
	if n := f.rec.count(); n != 1 {
		t.Fatalf("%d rollbacks counted, want 1", n)
	}
	want := []string{"created", "baseline_measured", "switched", "check", "rolled_back", "verdict"}
	if got := f.kinds(t); !slices.Equal(got, want) {
		t.Fatalf("timeline %v, want %v", got, want)
	}
	ns, err := f.st.ListNotifications(context.Background(), store.NotificationFilter{Project: policy.AdminsRecipient})
	if err != nil || len(ns) != 1 || ns[0].Kind != vocab.NotifyExperimentRolledBack {
		t.Fatalf("admins notifications %+v (%v)", ns, err)
	}
	val, err := f.env.ExecuteActivity("SweepNotifications", &activities.SweepInput{})
	var sw activities.SweepResult
	if err != nil || val.Get(&sw) != nil || !slices.Equal(sw.Projects, []string{policy.AdminsRecipient}) {
		t.Fatalf("sweep %+v (%v), want the admins routed", sw, err)
	}
	if _, err := f.env.ExecuteActivity("DeliverNotification", &activities.DeliverInput{ID: ns[0].ID}); err != nil {
		t.Fatal(err)
	}
	reqs := recv.Requests()
	var body struct {
		Type    string `json:"type"`
		Project string `json:"project"`
		Data    struct {
			ExperimentID string `json:"experiment_id"`
			Breaches     []struct {
				Value, Threshold float64
				Text             string
			} `json:"breaches"`
		} `json:"data"`
	}
	if len(reqs) != 1 || json.Unmarshal(reqs[0].Body, &body) != nil || body.Type != string(vocab.NotifyExperimentRolledBack) ||
		body.Project != policy.AdminsRecipient || body.Data.ExperimentID != f.e.ID || len(body.Data.Breaches) != 1 ||
		body.Data.Breaches[0].Value != 3 || body.Data.Breaches[0].Threshold != 2 || body.Data.Breaches[0].Text != "total submitted 3 jobs > 2 jobs" {
		t.Fatalf("admins webhook got %d requests: %+v", len(reqs), reqs)
	}
	// The workflow's next steps find it finished.
	if st = f.step(t, expStart.Add(601*time.Second), "FinishExperiment", ref); st.Verdict != vocab.VerdictRolledBack {
		t.Fatalf("finish after rollback: %+v", st)
	}
}

// TestExperimentActivitiesInconclusiveReverts: too few jobs in the
// candidate window is inconclusive, and the baseline is restored.
func TestExperimentActivitiesInconclusiveReverts(t *testing.T) {
	spec := submittedSpec(10)
	spec.MinSample = 5
	f := newExpFixture(t, spec, -500*time.Second, 100*time.Second)
	ref := &activities.ExperimentRef{ID: f.e.ID}
	f.step(t, expStart, "MeasureExperimentBaseline", ref)
	f.step(t, expStart, "SwitchExperiment", ref)
	st := f.step(t, expStart.Add(601*time.Second), "FinishExperiment", ref)
	if st.Verdict != vocab.VerdictInconclusive || st.Holds || f.active(t) != f.base || !strings.Contains(st.Detail, "min_sample") {
		t.Fatalf("finish: %+v, active %s", st, f.active(t))
	}
}

// TestExperimentActivitiesRetriedCheckActsOnTheRecordedBreach: an attempt
// of check 1 recorded a breach and failed before its rollback; the retry,
// whose fresh measurement breaches nothing (1 submission, cap 10), still
// rolls back on the breach the timeline shows.
func TestExperimentActivitiesRetriedCheckActsOnTheRecordedBreach(t *testing.T) {
	f := newExpFixture(t, submittedSpec(10), -500*time.Second, 100*time.Second)
	ref := &activities.ExperimentRef{ID: f.e.ID}
	f.step(t, expStart, "MeasureExperimentBaseline", ref)
	f.step(t, expStart, "SwitchExperiment", ref)
	e, err := f.st.GetExperiment(context.Background(), f.e.ID)
	if err != nil {
		t.Fatal(err)
	}
	breach := experiment.ConditionResult{Condition: e.Spec.Rollback[0], Value: fp(11), Threshold: fp(10), Breached: true,
		Text: "total submitted 11 jobs > 10 jobs"}
	w := experiment.Measurement{Window: queuereport.Window{From: expStart, To: expStart.Add(200 * time.Second)}}
	if _, err := f.st.RecordExperimentCheck(context.Background(), f.e.ID, 1, w, []experiment.ConditionResult{breach},
		expStart.Add(200*time.Second)); err != nil {
		t.Fatal(err)
	}
	st := f.step(t, expStart.Add(250*time.Second), "CheckExperiment", &activities.ExperimentCheckInput{ID: f.e.ID, N: 1})
	if st.State != vocab.ExperimentFinished || st.Verdict != vocab.VerdictRolledBack || !strings.Contains(st.Detail, "11 jobs > 10 jobs") {
		t.Fatalf("retried check: %+v, want rolled back on the recorded breach", st)
	}
	if f.active(t) != f.base {
		t.Fatal("the recorded breach did not restore the baseline")
	}
}
