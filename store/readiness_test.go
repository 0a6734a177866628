package store_test

import (
	"context"
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpugov/gpugov/internal/governance"
	"github.com/gpugov/gpugov/internal/policy"
	"github.com/gpugov/gpugov/internal/scheduling"
	"github.com/gpugov/gpugov/internal/vocab"
	"github.com/gpugov/gpugov/store"
	"github.com/gpugov/gpugov/store/storetest"
)

// readinessPolicy is a policy whose only queue, train, sets its
// protection explicitly, with a one-hour readiness window and a longest
// wait floor of an hour (the fixture's waiting job is not a regression).
func readinessPolicy(t *testing.T) *policy.Policy {
	t.Helper()
	p, err := policy.Parse("readiness.yaml", []byte(`version: gpugov.policy/v1
queues:
  - {name: train, tier: standard, share: 1, low_risk: true}
automation:
  readiness: {window_s: 3600, longest_wait_floor_s: 3600}
`))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// readinessFixture is pool p (trial, 2 GPUs) at now: job a, checkpointable,
// running since now−50 min with a checkpoint a minute old; job b waiting
// capacity_busy since its first evaluation a second after its submission
// at now−40 min.
func readinessFixture(t *testing.T) (*store.Store, *store.Job, time.Time) {
	t.Helper()
	pool := storetest.Pool("p", vocab.StageTrial, 1, 2)
	s, _ := storetest.NewStore(t, storetest.Fixture{Pools: []scheduling.Pool{pool}, Queues: []scheduling.Queue{storetest.TrainQueue}})
	ctx := context.Background()
	now := t0.Add(2 * time.Hour)
	a, _, run := runningJob(t, s, pool, 0, true, now.Add(-50*time.Minute))
	if err := s.RecordCheckpoint(ctx, a.ID, run, scheduling.Checkpoint{At: now.Add(-time.Minute), Step: 10}); err != nil {
		t.Fatal(err)
	}
	b := storetest.Submit(t, s, &store.NewJob{Project: "y", Queue: "train", Tier: vocab.TierStandard, SubmitTime: now.Add(-40 * time.Minute),
		Request: scheduling.ResourceRequest{GPUs: 2, Pool: "p"}})
	if _, err := s.ApplyCycle(ctx, "c-b", &scheduling.Result{Waiting: []scheduling.WaitStatus{{JobID: b.ID,
		Reason: vocab.ReasonCapacityBusy, Detail: "1 of 2 free"}}}, now.Add(-40*time.Minute+time.Second)); err != nil {
		t.Fatal(err)
	}
	return s, a, now
}

// TestPoolReadinessNumbers: the readiness of a pool from its stored
// records, with the numbers; save and restore fail until the running
// job's profile has a verified resume, then every check passes.
func TestPoolReadinessNumbers(t *testing.T) {
	t.Parallel()
	s, a, now := readinessFixture(t)
	ctx := context.Background()
	p := readinessPolicy(t)
	r, err := s.PoolReadiness(ctx, "p", p, now)
	if err != nil {
		t.Fatal(err)
	}
	if r.Ready || !slices.Equal(r.Failed, []vocab.ReadinessCheck{vocab.ReadinessSaveRestore}) || r.Stage != vocab.StageTrial {
		t.Fatalf("readiness %s (failed %v): %+v", r.Summary(), r.Failed, r.Checks[0])
	}
	byName := map[vocab.ReadinessCheck]governance.CheckResult{}
	for _, c := range r.Checks {
		byName[c.Check] = c
	}
	// b waited 2400 s in the window: 1 s not_yet_evaluated, then 2399 s capacity_busy (a was placed at its submission).
	if d := byName[vocab.ReadinessWaitReasons].Detail; d != "100.0% of 2399 job-seconds waited after a first evaluation carry a wait reason (min 80.0%); 0.0% of all 2400 waiting job-seconds still not_yet_evaluated (max 20.0%); service latency 0.0%" {
		t.Errorf("wait reasons: %s", d)
	}
	if d := byName[vocab.ReadinessRunningIdle].Detail; d != "1 of 1 running allocations (100.0%, min 90.0%) have a utilisation sample (0) or progress (1) from the last 600 s" {
		t.Errorf("running/idle: %s", d)
	}
	if d := byName[vocab.ReadinessProtection].Detail; d != "all 1 queues set protected or low_risk explicitly; 0 protection windows (0 active now)" {
		t.Errorf("protection: %s", d)
	}
	if d := byName[vocab.ReadinessSaveRestore].Detail; d != "0 of 1 checkpointable profiles have 1+ verified resumes and a failure rate ≤ 20.0%; profile x/simulated has 0 verified resumes, needs 1" {
		t.Errorf("save/restore: %s", d)
	}
	if d := byName[vocab.ReadinessLongestWait].Detail; d != "longest wait 2400 s is within the 3600 s floor (window before: none)" {
		t.Errorf("longest wait: %s", d)
	}
	if len(r.Profiles) != 1 || r.Profiles[0].Profile != "x/simulated" || r.Profiles[0].Jobs != 1 {
		t.Errorf("profiles %+v", r.Profiles)
	}
	if err := s.RecordResumeEvidence(ctx, store.ResumeEvidence{Key: "drill-1", JobID: a.ID, Kind: vocab.EvidenceDrill,
		Outcome: vocab.ResumeVerified, At: now.Add(-10 * time.Minute)}); err != nil {
		t.Fatal(err)
	}
	if r, err = s.PoolReadiness(ctx, "p", p, now); err != nil || !r.Ready {
		t.Fatalf("after the evidence: %s (%v)", r.Summary(), err)
	}
	if _, err := s.PoolReadiness(ctx, "nosuch", p, now); !errors.Is(err, store.ErrNoPool) || !errors.Is(err, store.ErrNotFound) {
		t.Errorf("unknown pool: %v", err)
	}
	// Every pool at once (what serve exports) reads the same.
	all, err := s.PoolsReadiness(ctx, p, now)
	if err != nil || len(all) != 1 || all["p"] == nil || !reflect.DeepEqual(all["p"], r) {
		t.Errorf("PoolsReadiness %+v, %v; want p's readiness %+v", all, err, r)
	}
}

// TestStageChangesGatedOnReadiness: a widening whose readiness fails is
// refused (the stage kept, the refusal in the history and the audit), an
// override applies it (audited with the admin's reason), a narrowing is
// always applied, a pool without history takes its first stage at start,
// and a restore after an inventory import rewrote the stage adds no history.
func TestStageChangesGatedOnReadiness(t *testing.T) {
	t.Parallel()
	s, _, now := readinessFixture(t)
	ctx := context.Background()
	p := readinessPolicy(t)
	req := func(stage vocab.AutomationStage) store.StageChangeRequest {
		return store.StageChangeRequest{Stages: map[string]vocab.AutomationStage{"p": stage, "unknown": stage}, Actor: "serve",
			Reason: "loaded from policy.yaml", Source: "reload", PolicyHash: p.Hash(), Policy: p, At: now}
	}
	plan, err := s.ChangePoolStages(ctx, req(vocab.StageAutomate))
	if err != nil || len(plan) != 1 || plan[0].Outcome != vocab.StageChangeRefused || plan[0].From != vocab.StageTrial ||
		plan[0].Readiness == nil || !slices.Equal(plan[0].Readiness.Failed, []vocab.ReadinessCheck{vocab.ReadinessSaveRestore}) {
		t.Fatalf("widening without evidence: %+v, %v", plan, err)
	}
	stage := func() vocab.AutomationStage {
		t.Helper()
		g, err := s.GovernedStage(ctx, "p")
		if err != nil {
			t.Fatal(err)
		}
		stored := vocab.AutomationStage("")
		if err := s.Pool().QueryRow(ctx, `SELECT stage FROM pools WHERE name = 'p'`).Scan(&stored); err != nil || stored != g {
			t.Fatalf("stored stage %s, governed %s (%v)", stored, g, err)
		}
		return g
	}
	if got := stage(); got != vocab.StageTrial {
		t.Fatalf("stage %s after a refusal, want trial kept", got)
	}
	lastAudit := func() store.AuditEntry {
		t.Helper()
		a, err := s.AuditFor(ctx, "p", 100)
		if err != nil || len(a) == 0 {
			t.Fatalf("audit of p: %v", err)
		}
		return a[len(a)-1]
	}
	if a := lastAudit(); a.Action != store.AuditRefusePoolStage || a.Actor != "serve" || !strings.Contains(a.Evidence["readiness"].(string), "save_restore_proven failed") {
		t.Errorf("refusal audit %+v", a)
	}
	over := req(vocab.StageAutomate)
	over.Override, over.Actor, over.Reason, over.Source = true, "root", "evidence comes from the drill this afternoon", "api"
	if plan, err = s.ChangePoolStages(ctx, over); err != nil || len(plan) != 1 || plan[0].Outcome != vocab.StageChangeOverridden {
		t.Fatalf("override: %+v, %v", plan, err)
	}
	if got := stage(); got != vocab.StageAutomate {
		t.Fatalf("stage %s after the override", got)
	}
	if a := lastAudit(); a.Action != store.AuditOverrideReadiness || a.Actor != "root" || a.Reason != over.Reason {
		t.Errorf("override audit %+v", a)
	}
	// An inventory import rewrites pools.stage; the governed stage asked for again is restored, with no history row.
	if _, err := s.Pool().Exec(ctx, `UPDATE pools SET stage = 'observe' WHERE name = 'p'`); err != nil {
		t.Fatal(err)
	}
	if plan, err = s.ChangePoolStages(ctx, req(vocab.StageAutomate)); err != nil || len(plan) != 1 || plan[0].Outcome != "" {
		t.Fatalf("restore: %+v, %v", plan, err)
	}
	if got := stage(); got != vocab.StageAutomate {
		t.Fatalf("stage %s after the restore", got)
	}
	if plan, err = s.ChangePoolStages(ctx, req(vocab.StageObserve)); err != nil || len(plan) != 1 || plan[0].Outcome != vocab.StageChangeApplied ||
		plan[0].Readiness != nil {
		t.Fatalf("narrowing: %+v, %v", plan, err)
	}
	hist, err := s.PoolStageHistory(ctx, "p", 10)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, h := range hist {
		got = append(got, string(h.From)+">"+string(h.To)+":"+string(h.Outcome)+":"+h.Actor)
	}
	if want := []string{"automate>observe:applied:serve", "trial>automate:overridden:root", "trial>automate:refused:serve"}; !slices.Equal(got, want) {
		t.Errorf("history %v, want %v", got, want)
	}
	if hist[2].Readiness == nil || hist[2].Readiness.Ready || hist[2].Source != "reload" || hist[2].PolicyHash != p.Hash() {
		t.Errorf("refused row %+v", hist[2])
	}
	// A pool without history takes its first stage at start, as initial.
	if err := s.UpsertInventory(ctx, []scheduling.Pool{storetest.Pool("fresh", vocab.StageObserve, 1, 1)}); err != nil {
		t.Fatal(err)
	}
	start := store.StageChangeRequest{Stages: map[string]vocab.AutomationStage{"fresh": vocab.StageAutomate}, Actor: "serve",
		Reason: "start", Source: "start", Policy: p, Initial: true, At: now}
	if plan, err = s.ChangePoolStages(ctx, start); err != nil || len(plan) != 1 || plan[0].Outcome != vocab.StageChangeInitial {
		t.Fatalf("initial: %+v, %v", plan, err)
	}
	// Once it has history, the next start's widening is gated.
	start.Stages["fresh"] = vocab.StageAutomate
	if _, err := s.ChangePoolStages(ctx, store.StageChangeRequest{Stages: map[string]vocab.AutomationStage{"fresh": vocab.StageObserve},
		Actor: "serve", Reason: "narrow", Source: "reload", Policy: p, At: now}); err != nil {
		t.Fatal(err)
	}
	plan, err = s.ChangePoolStages(ctx, start)
	if err != nil || len(plan) != 1 || plan[0].Outcome == vocab.StageChangeInitial {
		t.Fatalf("second start: %+v, %v", plan, err)
	}
}

// TestActivatePolicyStaged: the version and its stage changes are written
// in one transaction; a plan with a refusal writes nothing.
func TestActivatePolicyStaged(t *testing.T) {
	t.Parallel()
	s, a, now := readinessFixture(t)
	ctx := context.Background()
	p := readinessPolicy(t)
	p.Pools = map[string]policy.Pool{"p": {Stage: vocab.StageAutomate}}
	req := store.StageChangeRequest{Stages: p.Stages(), Actor: "root", Reason: "automate p", Source: "api", PolicyHash: p.Hash(), Policy: p, At: now}
	plan, err := s.PlanStageChanges(ctx, req)
	if err != nil || !store.Refused(plan) {
		t.Fatalf("plan %+v, %v", plan, err)
	}
	if _, err := s.ActivatePolicyStaged(ctx, p.Hash(), p.Canonical(), "root", "automate p", nil, req, plan); !errors.Is(err, store.ErrInvalid) {
		t.Fatalf("refused plan: %v, want ErrInvalid", err)
	}
	if n := queryInt(t, s, `SELECT count(*) FROM policy_versions`); n != 0 {
		t.Fatalf("%d policy versions stored by a refused activation", n)
	}
	if err := s.RecordResumeEvidence(ctx, store.ResumeEvidence{Key: "drill-1", JobID: a.ID, Kind: vocab.EvidenceDrill,
		Outcome: vocab.ResumeVerified, At: now.Add(-time.Minute)}); err != nil {
		t.Fatal(err)
	}
	if plan, err = s.PlanStageChanges(ctx, req); err != nil || len(plan) != 1 || plan[0].Outcome != vocab.StageChangeApplied {
		t.Fatalf("plan with evidence %+v, %v", plan, err)
	}
	changed, err := s.ActivatePolicyStaged(ctx, p.Hash(), p.Canonical(), "root", "automate p", nil, req, plan)
	if err != nil || !changed {
		t.Fatalf("activate: %v %v", changed, err)
	}
	if h, _ := s.ActivePolicyHash(ctx); h != p.Hash() {
		t.Errorf("active %s", h)
	}
	if g, _ := s.GovernedStage(ctx, "p"); g != vocab.StageAutomate {
		t.Errorf("stage %s", g)
	}
	hist, _ := s.PoolStageHistory(ctx, "p", 1)
	if len(hist) != 1 || hist[0].Outcome != vocab.StageChangeApplied || hist[0].Actor != "root" || hist[0].Readiness == nil || !hist[0].Readiness.Ready {
		t.Errorf("history %+v", hist)
	}
}

// TestPoolReadinessCountsObservedProgress: a running allocation with no
// checkpoint and no utilisation sample is told apart from an idle one once
// the reclaim scan observed its step advance (runs.progress_at,
// ObserveRunSteps): progress lines count as output.
func TestPoolReadinessCountsObservedProgress(t *testing.T) {
	t.Parallel()
	pool := storetest.Pool("p", vocab.StageTrial, 1, 2)
	s, _ := storetest.NewStore(t, storetest.Fixture{Pools: []scheduling.Pool{pool}, Queues: []scheduling.Queue{storetest.TrainQueue}})
	ctx := context.Background()
	now := t0.Add(2 * time.Hour)
	_, _, run := runningJob(t, s, pool, 0, true, now.Add(-50*time.Minute))
	p := readinessPolicy(t)
	detail := func() string {
		t.Helper()
		r, err := s.PoolReadiness(ctx, "p", p, now)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range r.Checks {
			if c.Check == vocab.ReadinessRunningIdle {
				return c.Detail
			}
		}
		t.Fatal("no running/idle check")
		return ""
	}
	if d := detail(); !strings.HasPrefix(d, "0 of 1 running allocations") {
		t.Fatalf("before any progress: %s", d)
	}
	if _, err := s.ObserveRunSteps(ctx, []store.RunStep{{RunID: run, Step: 7}}, now.Add(-time.Minute)); err != nil {
		t.Fatal(err)
	}
	if d := detail(); d != "1 of 1 running allocations (100.0%, min 90.0%) have a utilisation sample (0) or progress (1) from the last 600 s" {
		t.Fatalf("after observed progress: %s", d)
	}
}

// TestReadinessWindowFitsAReport: the loader's bound on
// automation.readiness.window_s keeps the two windows readiness reads
// within one queue report (MaxReportWindow), so no loadable policy makes
// every readiness evaluation fail.
func TestReadinessWindowFitsAReport(t *testing.T) {
	if got := 2 * time.Duration(policy.MaxReadinessWindowSeconds) * time.Second; got > store.MaxReportWindow {
		t.Fatalf("two readiness windows are %s, more than a report's %s", got, store.MaxReportWindow)
	}
}
