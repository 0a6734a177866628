package store_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/gpugov/gpugov/internal/experiment"
	"github.com/gpugov/gpugov/internal/policy"
	"github.com/gpugov/gpugov/internal/vocab"
	"github.com/gpugov/gpugov/store"
)

// expPolicies stores two policy versions, the default (active: the
// baseline) and one with a longer aging interval (the candidate), and
// returns their hashes.
func expPolicies(t *testing.T, s *store.Store) (baseline, candidate string) {
	t.Helper()
	ctx := context.Background()
	base := policy.Default()
	cand := policy.Default()
	cand.Aging.IntervalSeconds *= 2
	for _, p := range []*policy.Policy{base, cand} {
		if err := s.SavePolicyVersion(ctx, p.Hash(), p.Canonical()); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.ActivatePolicyVersion(ctx, base.Hash(), "serve", "loaded from policy.yaml"); err != nil {
		t.Fatal(err)
	}
	return base.Hash(), cand.Hash()
}

// newExperiment is an aging experiment on pools.
func newExperiment(baseline, candidate string, pools ...string) *store.Experiment {
	return &store.Experiment{
		Spec: experiment.Spec{Name: "aging x2", Hypothesis: "experiment tier's longest wait down 30 %",
			Candidate: experiment.Candidate{Policy: "version: gpugov.policy/v1"},
			Scope:     experiment.Scope{Pools: pools}, WindowSeconds: 3600,
			Expected: experiment.Expectation{Metric: "longest_wait_s", Target: experiment.Target{Tier: "experiment"},
				Direction: experiment.Decrease, Change: 0.3}},
		BaselineHash: baseline, CandidateHash: candidate, Groups: []vocab.PolicyGroup{vocab.PolicyAging},
		CreatedBy: "admin-alice",
	}
}

func TestCreateAndReadExperiment(t *testing.T) {
	t.Parallel()
	s := newStoreWith(t, testPool("a100", 1, 8), testPool("h100", 1, 8))
	ctx := context.Background()
	base, cand := expPolicies(t, s)
	e := newExperiment(base, cand, "a100")
	e.Spec.Override = &experiment.Override{Reason: "aging and quota move together here"}
	if err := s.CreateExperiment(ctx, e); err != nil {
		t.Fatal(err)
	}
	if len(e.ID) != len("exp-")+12 || e.State != vocab.ExperimentScheduled || e.CreatedAt.IsZero() || !e.StartAt.Equal(e.CreatedAt) {
		t.Fatalf("created %+v", e)
	}
	if e.Spec.Candidate.Policy != "" || e.Spec.Candidate.Hash != cand {
		t.Fatalf("candidate %+v, want the hash only", e.Spec.Candidate)
	}
	got, err := s.GetExperiment(ctx, e.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.Spec.Name != "aging x2" || got.Spec.Expected.Tier != "experiment" || got.BaselineHash != base ||
		got.CandidateHash != cand || len(got.Groups) != 1 || got.Groups[0] != vocab.PolicyAging ||
		got.Pools()[0] != "a100" || !got.HoldsPools() || got.Baseline != nil || got.Outcome != nil {
		t.Fatalf("read back %+v", got)
	}
	if _, err := s.GetExperiment(ctx, "exp-nope"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("unknown experiment: %v, want ErrNotFound", err)
	}
	evs, err := s.ExperimentEvents(ctx, e.ID)
	if err != nil || len(evs) != 1 || evs[0].Kind != store.ExperimentEventCreated {
		t.Fatalf("events %+v (%v), want created", evs, err)
	}
	audit, err := s.AuditFor(ctx, e.ID, 0)
	if err != nil || len(audit) != 2 || audit[0].Action != store.AuditCreateExperiment ||
		audit[1].Action != store.AuditOverrideOneVariable || audit[1].Reason != "aging and quota move together here" {
		t.Fatalf("audit %+v (%v)", audit, err)
	}
	list, err := s.ListExperiments(ctx, 10)
	if err != nil || len(list) != 1 || list[0].ID != e.ID {
		t.Fatalf("list %+v (%v)", list, err)
	}
	if a, err := s.ActiveExperimentFor(ctx, []string{"a100"}); err != nil || a == nil || a.ID != e.ID {
		t.Fatalf("active for a100: %+v (%v)", a, err)
	}
	if ids, err := s.HoldingExperimentIDs(ctx); err != nil || len(ids) != 1 || ids[0] != e.ID {
		t.Fatalf("holding experiments %v (%v)", ids, err)
	}
	if a, err := s.ActiveExperimentFor(ctx, []string{"h100"}); err != nil || a != nil {
		t.Fatalf("active for h100: %+v (%v), want none", a, err)
	}
	if _, err := s.ExperimentEvents(ctx, "exp-nope"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("events of an unknown experiment: %v", err)
	}
}

// TestCreateExperimentRefusesBadInput: each bad field is ErrInvalid naming
// it, and nothing is stored.
func TestCreateExperimentRefusesBadInput(t *testing.T) {
	t.Parallel()
	s := newStoreWith(t, testPool("a100", 1, 8))
	ctx := context.Background()
	base, cand := expPolicies(t, s)
	cases := map[string]func(e *store.Experiment){
		"created_by":       func(e *store.Experiment) { e.CreatedBy = "" },
		"name":             func(e *store.Experiment) { e.Spec.Name = "" },
		"window_s":         func(e *store.Experiment) { e.Spec.WindowSeconds = 0 },
		"scope.pools":      func(e *store.Experiment) { e.Spec.Scope.Pools = nil },
		"scope.pools[1]":   func(e *store.Experiment) { e.Spec.Scope.Pools = []string{"a100", "a100"} },
		"scope.pools[0]":   func(e *store.Experiment) { e.Spec.Scope.Pools = []string{"nowhere"} },
		"candidate":        func(e *store.Experiment) { e.CandidateHash = base },
		"candidate.hash":   func(e *store.Experiment) { e.CandidateHash = "0123456789abcdef" },
		"baseline_hash":    func(e *store.Experiment) { e.BaselineHash = "" },
		"groups[0]":        func(e *store.Experiment) { e.Groups = []vocab.PolicyGroup{"colour"} },
		"candidate_hash":   func(e *store.Experiment) { e.CandidateHash = "" },
		"candidate.hash ≠": func(e *store.Experiment) { e.Spec.Candidate.Hash = "beef" },
	}
	for name, mutate := range cases {
		e := newExperiment(base, cand, "a100")
		mutate(e)
		err := s.CreateExperiment(ctx, e)
		var ve *store.ValidationError
		field := name
		if name == "candidate.hash ≠" {
			field = "candidate.hash"
		}
		if !errors.As(err, &ve) || ve.Field != field {
			t.Errorf("%s: %v, want a validation error naming %s", name, err, field)
		}
	}
	if n := queryInt(t, s, `SELECT count(*) FROM experiments`); n != 0 {
		t.Fatalf("%d experiments stored after refusals", n)
	}
	// A baseline that is no longer the active version is a conflict.
	e := newExperiment(cand, base, "a100")
	if err := s.CreateExperiment(ctx, e); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("stale baseline: %v, want ErrConflict", err)
	}
}

// TestCreateExperimentOneAtATime: while an experiment holds its pools a
// second one is refused naming it, on a shared pool or on others (the
// policy in force is service-wide), also when several race; once it ends
// exactly one of racing creations on disjoint pools wins.
func TestCreateExperimentOneAtATime(t *testing.T) {
	t.Parallel()
	s := newStoreWith(t, testPool("a100", 1, 8), testPool("h100", 1, 8), testPool("l4", 1, 8))
	ctx := context.Background()
	base, cand := expPolicies(t, s)
	first := newExperiment(base, cand, "a100", "h100")
	if err := s.CreateExperiment(ctx, first); err != nil {
		t.Fatal(err)
	}
	for _, pools := range [][]string{{"l4", "h100"}, {"l4"}} {
		err := s.CreateExperiment(ctx, newExperiment(base, cand, pools...))
		var c *store.ExperimentConflict
		if !errors.As(err, &c) || !errors.Is(err, store.ErrConflict) || c.ID != first.ID || !slices.Equal(c.Pools, []string{"a100", "h100"}) {
			t.Fatalf("second on %v: %v (%+v), want a conflict naming %s and its pools", pools, err, c, first.ID)
		}
		if want := "experiment " + first.ID + " holds pool a100, h100; the policy in force is service-wide: one experiment at a time"; err.Error() != want {
			t.Fatalf("message %q, want %q", err, want)
		}
	}
	if _, err := s.AbortExperiment(ctx, first.ID, "admin-alice", "make room", time.Now()); err != nil {
		t.Fatal(err)
	}

	// Racing creations, each on its own pool: exactly one wins.
	var wg sync.WaitGroup
	pools := []string{"a100", "h100", "l4", "l4"}
	errs := make([]error, len(pools))
	for i, p := range pools {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = s.CreateExperiment(ctx, newExperiment(base, cand, p))
		}()
	}
	wg.Wait()
	won := 0
	for _, err := range errs {
		var c *store.ExperimentConflict
		switch {
		case err == nil:
			won++
		case !errors.As(err, &c):
			t.Fatalf("racing create: %v", err)
		}
	}
	if won != 1 {
		t.Fatalf("%d racing creations succeeded, want 1 (%v)", won, errs)
	}
}
