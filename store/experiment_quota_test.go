package store_test

import (
	"context"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpugov/gpugov/internal/experiment"
	"github.com/gpugov/gpugov/internal/policy"
	"github.com/gpugov/gpugov/internal/scheduling"
	"github.com/gpugov/gpugov/internal/vocab"
	"github.com/gpugov/gpugov/store"
)

// quotaBaseline is the default policy with two quotas in a100.
func quotaBaseline() *policy.Policy {
	p := policy.Default()
	p.Quotas = []policy.Quota{{Project: "vision", Pool: "a100", NominalMilli: 1000},
		{Project: "nlp", Pool: "a100", NominalMilli: 2000, BorrowingLimitMilli: 1000}}
	return p
}

// runningWith stores base and cand, activates base as the file's version,
// and takes an experiment on a100 varying groups through its baseline and
// switch.
func runningWith(t *testing.T, s *store.Store, base, cand *policy.Policy, groups ...vocab.PolicyGroup) *store.Experiment {
	t.Helper()
	ctx := context.Background()
	for _, p := range []*policy.Policy{base, cand} {
		if err := s.SavePolicyVersion(ctx, p.Hash(), p.Canonical()); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.ActivatePolicyVersion(ctx, base.Hash(), "serve", "loaded from policy.yaml"); err != nil {
		t.Fatal(err)
	}
	e := newExperiment(base.Hash(), cand.Hash(), "a100")
	e.Groups = groups
	if err := s.CreateExperiment(ctx, e); err != nil {
		t.Fatal(err)
	}
	if _, err := s.RecordExperimentBaseline(ctx, e.ID, baselineMeasurement(), t0); err != nil {
		t.Fatal(err)
	}
	got, err := s.SwitchExperiment(ctx, e.ID, t0)
	if err != nil || got.State != vocab.ExperimentRunning || activeHash(t, s) != cand.Hash() {
		t.Fatalf("switch: %+v (%v)", got, err)
	}
	return got
}

// activeVersion returns the active version and its decoded policy.
func activeVersion(t *testing.T, s *store.Store) (*store.PolicyVersion, *policy.Policy) {
	t.Helper()
	v, err := s.ActivePolicyVersion(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	p, err := policy.FromCanonical(v.Body)
	if err != nil {
		t.Fatal(err)
	}
	return v, p
}

// lastAudit is the newest audit entry of subject with action.
func lastAudit(t *testing.T, s *store.Store, subject, action string) store.AuditEntry {
	t.Helper()
	es, err := s.AuditFor(context.Background(), subject, 0)
	if err != nil {
		t.Fatal(err)
	}
	for i := len(es) - 1; i >= 0; i-- {
		if es[i].Action == action {
			return es[i]
		}
	}
	t.Fatalf("no %s audit of %s in %+v", action, subject, es)
	return store.AuditEntry{}
}

// TestExperimentRestoreKeepsWindowQuotaChanges: a quota changed during the
// window (SetQuota: one changed, one added; and, for the abort, one removed
// by a version applied through ActivatePolicy) survives the rollback, the
// abort and the not_met revert: the restored version is the baseline (its
// aging) with those quotas, derived from the version it replaces, audited
// with the kept changes; SyncQuotas then stores exactly its quotas.
func TestExperimentRestoreKeepsWindowQuotaChanges(t *testing.T) {
	t.Parallel()
	for _, how := range []string{"rollback", "abort", "not_met"} {
		t.Run(how, func(t *testing.T) {
			t.Parallel()
			s := newStoreWith(t, testPool("a100", 1, 8))
			ctx := context.Background()
			base := quotaBaseline()
			cand := quotaBaseline()
			cand.Aging.IntervalSeconds *= 2
			e := runningWith(t, s, base, cand, vocab.PolicyAging)
			for _, c := range []store.QuotaChange{
				{Pool: "a100", Project: "vision", NominalMilli: 4000, BorrowingLimitMilli: 500, Actor: "admin-alice", Reason: "approved request"},
				{Pool: "a100", Project: "audio", NominalMilli: 1500, Actor: "admin-alice", Reason: "new team"},
			} {
				if _, err := s.SetQuota(ctx, c); err != nil {
					t.Fatal(err)
				}
			}
			want := []policy.Quota{{Project: "vision", Pool: "a100", NominalMilli: 4000, BorrowingLimitMilli: 500},
				base.Quotas[1], {Project: "audio", Pool: "a100", NominalMilli: 1500}}
			wantKept := 2 // vision changed, audio added
			if how == "abort" {
				_, p := activeVersion(t, s)
				without, _ := p.WithoutQuota("nlp", "a100")
				if _, err := s.ActivatePolicy(ctx, without.Hash(), without.Canonical(), "admin-carol", "nlp unlimited", nil); err != nil {
					t.Fatal(err)
				}
				want = slices.Delete(want, 1, 2)
				wantKept++ // nlp removed
			}
			if got, err := s.VerifyExperimentPolicy(ctx, e.ID, t0.Add(60e9)); err != nil || got.State != vocab.ExperimentRunning {
				t.Fatalf("after the quota changes: %+v (%v), want running", got, err)
			}
			replaced := activeHash(t, s)

			action, kind := store.AuditExperimentRevert, store.ExperimentEventReverted
			var err error
			switch how {
			case "rollback":
				action, kind = store.AuditExperimentRollback, store.ExperimentEventRolledBack
				breach := experiment.ConditionResult{Condition: experiment.Condition{Name: "p95", Metric: "wait_p95_s"},
					Value: f64(412), Baseline: f64(300), Threshold: f64(360), Breached: true, Text: "wait_p95_s 412 s > 360 s"}
				_, err = s.RollBackExperiment(ctx, e.ID, &experiment.Outcome{Verdict: vocab.VerdictRolledBack,
					Reason: breach.Text, Breaches: []experiment.ConditionResult{breach}}, t0.Add(600e9))
			case "abort":
				_, err = s.AbortExperiment(ctx, e.ID, "admin-bob", "stop", t0.Add(600e9))
			case "not_met":
				_, err = s.FinishExperiment(ctx, e.ID, &experiment.Outcome{Verdict: vocab.VerdictNotMet, Reason: "−10 %"}, t0.Add(3600e9))
			}
			if err != nil {
				t.Fatal(err)
			}

			v, restored := activeVersion(t, s)
			if v.Hash == base.Hash() || v.Hash == replaced {
				t.Fatalf("active %s: want a version derived from the baseline %s", v.Hash, base.Hash())
			}
			if restored.Aging != base.Aging || !reflect.DeepEqual(restored.Quotas, want) {
				t.Fatalf("restored aging %+v quotas %+v, want the baseline's aging %+v and quotas %+v",
					restored.Aging, restored.Quotas, base.Aging, want)
			}
			if groups := policy.Groups(policy.Diff(base, restored)); !slices.Equal(groups, []vocab.PolicyGroup{vocab.PolicyQuota}) {
				t.Fatalf("restored differs from the baseline in %v, want quota only", groups)
			}
			if v.DerivedFrom != replaced || v.BaseHash != base.Hash() {
				t.Fatalf("lineage derived_from %s base %s, want %s and %s", v.DerivedFrom, v.BaseHash, replaced, base.Hash())
			}
			a := lastAudit(t, s, e.ID, action)
			kept, _ := a.Evidence["kept_quotas"].([]any)
			if a.Evidence["restored"] != v.Hash || a.Evidence["replaced"] != replaced || len(kept) != wantKept {
				t.Fatalf("%s evidence %+v", action, a.Evidence)
			}
			first := kept[0].(map[string]any)
			if first["project"] != "vision" || first["kept"].(map[string]any)["nominal_milli"] != float64(4000) ||
				first["candidate"].(map[string]any)["nominal_milli"] != float64(1000) {
				t.Fatalf("kept quota %+v", first)
			}
			if sw := experimentSwitches(t, s, e.ID); sw[len(sw)-1].Subject != v.Hash || sw[len(sw)-1].Evidence["kept_quotas"] == nil {
				t.Fatalf("activation %+v", sw[len(sw)-1])
			}
			evs, _ := s.ExperimentEvents(ctx, e.ID)
			var detail string
			for _, ev := range evs {
				if ev.Kind == kind {
					detail = ev.Detail
				}
			}
			if !strings.Contains(detail, "made during the window kept") || !strings.Contains(detail, "quota of vision in a100 nominal 4000") ||
				!strings.Contains(detail, v.Hash[:12]) {
				t.Fatalf("%s event %q", kind, detail)
			}
			if how == "abort" && !strings.Contains(detail, "quota of nlp in a100 removed") {
				t.Fatalf("abort event %q lacks the removal", detail)
			}
			if _, err := s.SyncQuotas(ctx, "serve", "policy version "+v.Hash); err != nil {
				t.Fatal(err)
			}
			snap, err := s.LoadSnapshot(ctx, time.Now())
			if err != nil {
				t.Fatal(err)
			}
			wantStored := restored.SchedulingQuotas()
			slices.SortFunc(wantStored, func(x, y scheduling.Quota) int { return strings.Compare(x.Project, y.Project) })
			if !reflect.DeepEqual(snap.Quotas, wantStored) {
				t.Fatalf("stored quotas %+v, want %+v", snap.Quotas, wantStored)
			}
		})
	}
}

// TestQuotaExperimentRestoresExactly: an experiment about quotas restores
// its baseline exactly (its quotas are the variable), saying so; a quota
// changed during its window is another policy: it ends the experiment,
// restoring nothing.
func TestQuotaExperimentRestoresExactly(t *testing.T) {
	t.Parallel()
	s := newStoreWith(t, testPool("a100", 1, 8), testPool("h100", 1, 8))
	ctx := context.Background()
	base := quotaBaseline()
	cand := quotaBaseline()
	cand.Quotas[0].NominalMilli = 3000
	e := runningWith(t, s, base, cand, vocab.PolicyQuota)
	if _, err := s.FinishExperiment(ctx, e.ID, &experiment.Outcome{Verdict: vocab.VerdictNotMet, Reason: "−10 %"}, t0.Add(3600e9)); err != nil {
		t.Fatal(err)
	}
	if activeHash(t, s) != base.Hash() {
		t.Fatal("a quota experiment must restore its baseline exactly")
	}
	a := lastAudit(t, s, e.ID, store.AuditExperimentRevert)
	if a.Evidence["restored"] != base.Hash() || a.Evidence["quota_variable"] != true || a.Evidence["kept_quotas"] != nil {
		t.Fatalf("revert evidence %+v", a.Evidence)
	}
	evs, _ := s.ExperimentEvents(ctx, e.ID)
	if last := evs[len(evs)-1]; last.Kind != store.ExperimentEventReverted ||
		!strings.Contains(last.Detail, "restored exactly, its quotas included, since quota is the experiment's variable") {
		t.Fatalf("reverted event %+v", last)
	}

	// A second one, on h100: a quota change during its window ends it.
	e2 := newExperiment(base.Hash(), cand.Hash(), "h100")
	e2.Groups = []vocab.PolicyGroup{vocab.PolicyQuota}
	if err := s.CreateExperiment(ctx, e2); err != nil {
		t.Fatal(err)
	}
	if _, err := s.RecordExperimentBaseline(ctx, e2.ID, baselineMeasurement(), t0); err != nil {
		t.Fatal(err)
	}
	if _, err := s.SwitchExperiment(ctx, e2.ID, t0); err != nil {
		t.Fatal(err)
	}
	res, err := s.SetQuota(ctx, store.QuotaChange{Pool: "h100", Project: "vision", NominalMilli: 500, Actor: "admin-alice", Reason: "override"})
	if err != nil {
		t.Fatal(err)
	}
	got, err := s.AbortExperiment(ctx, e2.ID, "admin-bob", "stop", t0.Add(60e9))
	if err != nil || got.State != vocab.ExperimentAborted || activeHash(t, s) != res.Policy {
		t.Fatalf("abort after a quota change: %+v (%v), active %s want %s", got, err, activeHash(t, s), res.Policy)
	}
	if kinds := eventKinds(t, s, e2.ID); kinds[len(kinds)-1] != store.ExperimentEventPolicyChanged {
		t.Fatalf("timeline %v", kinds)
	}
}

// TestQuotaSetBackKeepsTheCandidateInForce: a quota set during the window
// and then set back to its earlier value re-activates an older version
// whose derived_from no longer leads to the candidate (lineage records the
// latest activation); it still differs from the candidate only in quotas,
// so the aging experiment goes on running.
func TestQuotaSetBackKeepsTheCandidateInForce(t *testing.T) {
	t.Parallel()
	s := newStoreWith(t, testPool("a100", 1, 8))
	ctx := context.Background()
	base := quotaBaseline()
	cand := quotaBaseline()
	cand.Aging.IntervalSeconds *= 2
	e := runningWith(t, s, base, cand, vocab.PolicyAging)
	for i, milli := range []int64{4000, 5000, 4000} {
		if _, err := s.SetQuota(ctx, store.QuotaChange{Pool: "a100", Project: "vision", NominalMilli: milli,
			Actor: "admin-alice", Reason: "request"}); err != nil {
			t.Fatalf("change %d: %v", i, err)
		}
		if got, err := s.VerifyExperimentPolicy(ctx, e.ID, t0.Add(time.Duration(i+1)*time.Minute)); err != nil || got.State != vocab.ExperimentRunning {
			t.Fatalf("after quota change %d (%d milli): %+v (%v), want running", i, milli, got, err)
		}
	}
}
