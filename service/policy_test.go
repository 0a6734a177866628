package service

import (
	"context"
	"io"
	"log/slog"
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
		go func() { applied <- s.applyPolicy(ctx, reloaded, "loaded from policy.yaml", false) }()
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
