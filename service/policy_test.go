package service

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/gpugov/gpugov/internal/policy"
	"github.com/gpugov/gpugov/internal/scheduling"
	"github.com/gpugov/gpugov/internal/vocab"
	"github.com/gpugov/gpugov/store"
	"github.com/gpugov/gpugov/store/storetest"
)

// TestQuotaChangeIsThePolicyInForce: a quota set through the store (as the
// API does) is the policy the next cycle plans and records with; a restart
// on the same policy keeps it; a different (edited) policy supersedes it and
// its quotas become the stored ones exactly.
func TestQuotaChangeIsThePolicyInForce(t *testing.T) {
	t.Parallel()
	st, _ := storetest.NewStore(t, storetest.Fixture{Pools: []scheduling.Pool{storetest.Pool("p", vocab.StageObserve, 1, 2)}})
	ctx := context.Background()
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	file := policy.Default()
	file.Quotas = []policy.Quota{{Project: "vision", Pool: "p", NominalMilli: 1000}}
	start := func(p *policy.Policy) *Service {
		t.Helper()
		s := &Service{cfg: Config{Logger: logger}, store: st, static: p}
		if err := s.applyStartPolicy(ctx); err != nil {
			t.Fatal(err)
		}
		return s
	}
	storedQuotas := func() []scheduling.Quota {
		t.Helper()
		snap, err := st.LoadSnapshot(ctx, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		return snap.Quotas
	}

	s := start(file)
	if sp, err := s.schedulingPolicy(ctx); err != nil || sp.Version != file.Hash() {
		t.Fatalf("at start: %v %v, want %s", sp, err, file.Hash())
	}
	res, err := st.SetQuota(ctx, store.QuotaChange{Pool: "p", Project: "speech", NominalMilli: 500, Actor: "root", Reason: "new team"})
	if err != nil {
		t.Fatal(err)
	}
	sp, err := s.schedulingPolicy(ctx)
	if err != nil || sp.Version != res.Policy || len(s.currentPolicy().Quotas) != 2 {
		t.Fatalf("after the change the cycle plans with %v (%v), want the derived %s", sp, err, res.Policy)
	}

	// Restarted on the same file: the derived version stays in force.
	s = start(file)
	if got := s.currentPolicy().Hash(); got != res.Policy || len(storedQuotas()) != 2 {
		t.Fatalf("restart: in force %s with quotas %+v, want the derived %s", got, storedQuotas(), res.Policy)
	}
	if a, _ := st.ActivePolicyHash(ctx); a != res.Policy {
		t.Fatalf("restart activated %s", a)
	}

	// An edited file supersedes it: its own quotas, exactly.
	edited := policy.Default()
	edited.Quotas = []policy.Quota{{Project: "vision", Pool: "p", NominalMilli: 3000}}
	s = start(edited)
	if got := s.currentPolicy().Hash(); got != edited.Hash() {
		t.Fatalf("edited file: in force %s, want %s", got, edited.Hash())
	}
	if q := storedQuotas(); len(q) != 1 || q[0].Project != "vision" || q[0].NominalMilli != 3000 {
		t.Fatalf("edited file: stored quotas %+v", q)
	}
	audit, _ := st.AuditFor(ctx, "p/speech", 0)
	if len(audit) != 2 || audit[1].Actor != PolicyActor || audit[1].Evidence["after"] != nil {
		t.Fatalf("the superseded quota's removal is not audited: %+v", audit)
	}
}

// TestRefreshDoesNotUndoAReload runs a reload while a cycle's refresh has
// loaded the previously active version (a quota change's) but not yet made
// it the policy in force, as a race orders them: the reload waits for the
// refresh, and its version is the policy in force after both, as it is the
// active one.
func TestRefreshDoesNotUndoAReload(t *testing.T) {
	t.Parallel()
	st, _ := storetest.NewStore(t, storetest.Fixture{Pools: []scheduling.Pool{storetest.Pool("p", vocab.StageObserve, 1, 2)}})
	ctx := context.Background()
	file := policy.Default()
	file.Quotas = []policy.Quota{{Project: "vision", Pool: "p", NominalMilli: 1000}}
	s := &Service{cfg: Config{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}, store: st, static: file}
	if err := s.applyStartPolicy(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := st.SetQuota(ctx, store.QuotaChange{Pool: "p", Project: "speech", NominalMilli: 500, Actor: "root", Reason: "new team"}); err != nil {
		t.Fatal(err)
	}
	reloaded := policy.Default()
	reloaded.Quotas = []policy.Quota{{Project: "vision", Pool: "p", NominalMilli: 3000}}
	applied := make(chan error, 1)
	s.refreshLoaded = func() {
		s.refreshLoaded = nil
		go func() { applied <- s.applyPolicy(ctx, reloaded, "loaded from policy.yaml", StageSourceReload) }()
		// Without serialization the reload completes here; with it, it
		// waits for this refresh to end.
		select {
		case err := <-applied:
			applied <- err
		case <-time.After(time.Second):
		}
	}
	if err := s.refreshPolicy(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-applied; err != nil {
		t.Fatal(err)
	}
	active, _ := st.ActivePolicyHash(ctx)
	if got := s.currentPolicy().Hash(); active != reloaded.Hash() || got != active {
		t.Fatalf("in force %s, active %s, want the reload's %s", got, active, reloaded.Hash())
	}
}

// TestActivatedVersionIsACompleteSwitch: a version activated through the
// store (as POST /v1/policies, an experiment's switch or a rollback do) is
// in force at the next refresh with everything it sets — queues and
// low-risk flags, stored quotas, pool stages — each effect audited by
// PolicyActor naming the hash (a stage widening written with the version,
// as the API does, needs nothing more; one activated alone is judged on
// readiness and refused); a restart on the same file keeps it; a rollback
// to the file's version restores the file's settings; an edited file
// supersedes an applied version.
func TestActivatedVersionIsACompleteSwitch(t *testing.T) {
	t.Parallel()
	st, _ := storetest.NewStore(t, storetest.Fixture{Pools: []scheduling.Pool{storetest.Pool("p", vocab.StageObserve, 1, 2)}})
	ctx := context.Background()
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	file := policy.Default()
	file.Queues = policy.DefaultQueues()
	file.Quotas = []policy.Quota{{Project: "vision", Pool: "p", NominalMilli: 1000}}
	file.Pools = map[string]policy.Pool{"p": {Stage: vocab.StageObserve}}
	start := func(p *policy.Policy) *Service {
		t.Helper()
		s := &Service{cfg: Config{Logger: logger}, store: st, static: p}
		if err := s.applyStartPolicy(ctx); err != nil {
			t.Fatal(err)
		}
		return s
	}
	type state struct {
		stage       vocab.AutomationStage
		quota       int64
		lowRisk     []string
		expMaxShare float64
		queues      int
	}
	read := func() state {
		t.Helper()
		snap, err := st.LoadSnapshot(ctx, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		qs, err := st.ListQueues(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var s state
		s.stage, s.queues = snap.Pools[0].Stage, len(qs)
		if len(snap.Quotas) == 1 {
			s.quota = snap.Quotas[0].NominalMilli
		}
		for _, q := range qs {
			if q.LowRisk {
				s.lowRisk = append(s.lowRisk, q.Name)
			}
			if q.Name == "experiment" {
				s.expMaxShare = q.MaxShare
			}
		}
		return s
	}
	inForce := func(s *Service, want string) {
		t.Helper()
		sp, err := s.schedulingPolicy(ctx)
		if err != nil || sp.Version != want {
			t.Fatalf("the cycle plans with %v (%v), want %s", sp, err, want)
		}
	}

	s := start(file)
	inForce(s, file.Hash())
	if got := read(); got.stage != vocab.StageObserve || got.quota != 1000 || len(got.lowRisk) != 1 || got.queues != 4 {
		t.Fatalf("at start %+v", got)
	}

	cand := policy.Default()
	cand.Queues = policy.DefaultQueues()
	cand.Queues[3].LowRisk, cand.Queues[3].MaxShare = false, 0.5
	cand.Queues[2].LowRisk = true
	cand.Queues = append(cand.Queues, policy.Queue{Name: "batch", Tier: "standard", Share: 1})
	cand.Quotas = []policy.Quota{{Project: "vision", Pool: "p", NominalMilli: 2000}}
	cand.Pools = map[string]policy.Pool{"p": {Stage: vocab.StageTrial}}
	cand.FairShare.HalfLifeSeconds = 3600
	// As POST /v1/policies with override_readiness does: the version and
	// its stage widening (the pool is not ready) are written together, so
	// the refresh finds the stage already set.
	req := store.StageChangeRequest{Stages: cand.Stages(), Actor: "root", Reason: "try the trial stage", Source: "api",
		PolicyHash: cand.Hash(), Policy: cand, Override: true}
	plan, err := st.PlanStageChanges(ctx, req)
	if err != nil || len(plan) != 1 || plan[0].Outcome != vocab.StageChangeOverridden {
		t.Fatalf("plan %+v, %v", plan, err)
	}
	if changed, err := st.ActivatePolicyStaged(ctx, cand.Hash(), cand.Canonical(), "root", "try the trial stage", nil, req, plan); err != nil || !changed {
		t.Fatalf("activate: %v %v", changed, err)
	}
	inForce(s, cand.Hash())
	got := read()
	if got.stage != vocab.StageTrial || got.quota != 2000 || len(got.lowRisk) != 1 || got.lowRisk[0] != "standard" ||
		got.expMaxShare != 0.5 || got.queues != 5 {
		t.Fatalf("after the switch %+v", got)
	}
	if s.currentPolicy().FairShare.HalfLifeSeconds != 3600 {
		t.Fatalf("half-life in force %v", s.currentPolicy().FairShare.HalfLifeSeconds)
	}
	audit, _ := st.AuditFor(ctx, "p", 0)
	last := audit[len(audit)-1]
	if last.Action != store.AuditOverrideReadiness || last.Actor != "root" || last.Reason != "try the trial stage" {
		t.Fatalf("stage change audit %+v", last)
	}
	if a, _ := st.AuditFor(ctx, "p/vision", 0); len(a) == 0 || a[len(a)-1].Actor != PolicyActor || !strings.Contains(a[len(a)-1].Reason, cand.Hash()) {
		t.Fatalf("quota sync audit %+v", a)
	}

	// A restart on the same file keeps the applied version, with its effects.
	s = start(file)
	inForce(s, cand.Hash())
	if got := read(); got.stage != vocab.StageTrial || got.quota != 2000 {
		t.Fatalf("after restart %+v", got)
	}

	// A rollback to the file's version restores what the file sets.
	if _, err := st.ActivatePolicy(ctx, file.Hash(), nil, "root", "rollback", nil); err != nil {
		t.Fatal(err)
	}
	inForce(s, file.Hash())
	if got := read(); got.stage != vocab.StageObserve || got.quota != 1000 || len(got.lowRisk) != 1 || got.lowRisk[0] != "experiment" ||
		got.expMaxShare != 0 {
		t.Fatalf("after rollback %+v", got)
	}

	// Activated again through the store alone (as an experiment's switch
	// does), the version is in force but its widening is judged at the
	// refresh: the pool is not ready, so the stage stays observe, refused.
	if _, err := st.ActivatePolicy(ctx, cand.Hash(), nil, "root", "again", nil); err != nil {
		t.Fatal(err)
	}
	inForce(s, cand.Hash())
	if got := read(); got.stage != vocab.StageObserve || got.quota != 2000 {
		t.Fatalf("after a second switch %+v, want the stage kept and the rest applied", got)
	}
	hist, _ := st.PoolStageHistory(ctx, "p", 1)
	if len(hist) != 1 || hist[0].Outcome != vocab.StageChangeRefused || hist[0].Source != StageSourceRefresh || hist[0].Actor != PolicyActor {
		t.Fatalf("history %+v", hist)
	}

	// An edited file supersedes an applied version at the next start.
	edited := policy.Default()
	edited.Queues = policy.DefaultQueues()
	edited.Quotas = []policy.Quota{{Project: "vision", Pool: "p", NominalMilli: 3000}}
	edited.Pools = map[string]policy.Pool{"p": {Stage: vocab.StageObserve}}
	s = start(edited)
	inForce(s, edited.Hash())
	if got := read(); got.stage != vocab.StageObserve || got.quota != 3000 {
		t.Fatalf("edited file %+v", got)
	}
}

// TestStartPolicyAuditSaysWhereItCameFrom: the start's policy activation is
// audited with the policy's source — the default policy, or the one of the
// service's configuration (Config.Policy), never the one for the other.
func TestStartPolicyAuditSaysWhereItCameFrom(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	configured := policy.Default()
	configured.Pools = map[string]policy.Pool{"p": {Stage: vocab.StageTrial}}
	for _, c := range []struct {
		name   string
		cfg    *policy.Policy
		reason string
	}{
		{"default", nil, "default policy (no policy file)"},
		{"configured", configured, "policy of the service's configuration (no policy file)"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			st, _ := storetest.NewStore(t, storetest.Fixture{Pools: []scheduling.Pool{storetest.Pool("p", vocab.StageObserve, 1, 2)}})
			s := &Service{cfg: Config{Logger: logger, Policy: c.cfg}, store: st}
			if err := s.loadPolicy(); err != nil {
				t.Fatal(err)
			}
			if err := s.applyStartPolicy(ctx); err != nil {
				t.Fatal(err)
			}
			audit, err := st.AuditFor(ctx, s.filePolicy().Hash(), 0)
			if err != nil || len(audit) != 1 || audit[0].Action != store.AuditActivatePolicy || audit[0].Reason != c.reason {
				t.Fatalf("audit of the start's activation %+v (%v), want reason %q", audit, err, c.reason)
			}
		})
	}
}
