package store_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/gpugov/gpugov/internal/policy"
	"github.com/gpugov/gpugov/internal/scheduling"
	"github.com/gpugov/gpugov/internal/vocab"
	"github.com/gpugov/gpugov/store"
	"github.com/gpugov/gpugov/store/storetest"
)

// fileVersion stores and activates p as serve does for a policy file.
func fileVersion(t *testing.T, s *store.Store, p *policy.Policy) string {
	t.Helper()
	ctx := context.Background()
	if err := s.SavePolicyVersion(ctx, p.Hash(), p.Canonical()); err != nil {
		t.Fatal(err)
	}
	if err := s.ActivatePolicyVersion(ctx, p.Hash(), "serve", "loaded from policy.yaml"); err != nil {
		t.Fatal(err)
	}
	return p.Hash()
}

// withAging returns a copy of the default policy with another aging cap.
func withAging(cap float64) *policy.Policy {
	p := policy.Default()
	p.Aging.CapPoints = cap
	return p
}

// TestActivatePolicyDerivesFromActive: a version activated through the
// store is stored, active, derived from the active one with the file's
// version as base, and audited with the caller's evidence; a repeat
// changes nothing; a switch back to the base clears its lineage; an
// already stored version is activated by hash alone.
func TestActivatePolicyDerivesFromActive(t *testing.T) {
	t.Parallel()
	s, _ := newStore(t)
	ctx := context.Background()
	base := fileVersion(t, s, policy.Default())

	a := withAging(4000)
	changed, err := s.ActivatePolicy(ctx, a.Hash(), a.Canonical(), "root", "try a higher aging cap", map[string]any{"experiment": "exp-1"})
	if err != nil || !changed {
		t.Fatalf("activate a: %v %v", changed, err)
	}
	v, err := s.ActivePolicyVersion(ctx)
	if err != nil || v.Hash != a.Hash() || v.DerivedFrom != base || v.BaseHash != base {
		t.Fatalf("active after a: %+v %v", v, err)
	}
	audit, _ := s.AuditFor(ctx, a.Hash(), 0)
	if len(audit) != 1 || audit[0].Action != store.AuditActivatePolicy || audit[0].Actor != "root" ||
		audit[0].Reason != "try a higher aging cap" || audit[0].Evidence["previous"] != base || audit[0].Evidence["experiment"] != "exp-1" {
		t.Fatalf("audit %+v", audit)
	}
	// A repeat changes and audits nothing, body or not.
	for _, body := range []json.RawMessage{a.Canonical(), nil} {
		if changed, err := s.ActivatePolicy(ctx, a.Hash(), body, "root", "again", nil); err != nil || changed {
			t.Fatalf("repeat: %v %v", changed, err)
		}
	}
	// A chain keeps the base.
	b := withAging(5000)
	if _, err := s.ActivatePolicy(ctx, b.Hash(), b.Canonical(), "root", "higher still", nil); err != nil {
		t.Fatal(err)
	}
	if v, _ := s.ActivePolicyVersion(ctx); v.Hash != b.Hash() || v.DerivedFrom != a.Hash() || v.BaseHash != base {
		t.Fatalf("chained %+v", v)
	}
	// Back to a, stored already: by hash alone, lineage of this activation.
	if changed, err := s.ActivatePolicy(ctx, a.Hash(), nil, "root", "back to a", nil); err != nil || !changed {
		t.Fatalf("back to a: %v %v", changed, err)
	}
	if v, _ := s.ActivePolicyVersion(ctx); v.Hash != a.Hash() || v.DerivedFrom != b.Hash() || v.BaseHash != base {
		t.Fatalf("back to a %+v", v)
	}
	// Back to the base: the file's version again, without lineage.
	if changed, err := s.ActivatePolicy(ctx, base, nil, "root", "rollback", nil); err != nil || !changed {
		t.Fatalf("rollback: %v %v", changed, err)
	}
	if v, _ := s.ActivePolicyVersion(ctx); v.Hash != base || v.DerivedFrom != "" || v.BaseHash != "" {
		t.Fatalf("rollback %+v", v)
	}
	if n := queryInt(t, s, `SELECT count(*) FROM audit_log WHERE action = 'activate_policy'`); n != 5 {
		t.Fatalf("%d activations audited, want 5", n)
	}
}

// TestActivatePolicyWithoutActive: with no active version the version is
// activated without lineage.
func TestActivatePolicyWithoutActive(t *testing.T) {
	t.Parallel()
	s, _ := newStore(t)
	p := withAging(100)
	if changed, err := s.ActivatePolicy(context.Background(), p.Hash(), p.Canonical(), "root", "first", nil); err != nil || !changed {
		t.Fatalf("activate: %v %v", changed, err)
	}
	if v, err := s.ActivePolicyVersion(context.Background()); err != nil || v.Hash != p.Hash() || v.BaseHash != "" || v.DerivedFrom != "" {
		t.Fatalf("active %+v %v", v, err)
	}
}

// TestActivatePolicyRefusals: bad input, an unknown hash without a body and
// a body that conflicts with the stored one change nothing.
func TestActivatePolicyRefusals(t *testing.T) {
	t.Parallel()
	s, _ := newStore(t)
	ctx := context.Background()
	base := fileVersion(t, s, policy.Default())
	a := withAging(4000)
	before := quotaCounts(t, s)
	for _, tc := range []struct {
		name               string
		hash               string
		body               json.RawMessage
		actor, reason      string
		field              string
		notFound, conflict bool
	}{
		{name: "short hash", hash: "abc", body: a.Canonical(), actor: "root", reason: "x", field: "hash"},
		{name: "upper-case hash", hash: strings.ToUpper(a.Hash()), body: a.Canonical(), actor: "root", reason: "x", field: "hash"},
		{name: "no actor", hash: a.Hash(), body: a.Canonical(), reason: "x", field: "actor"},
		{name: "no reason", hash: a.Hash(), body: a.Canonical(), actor: "root", field: "reason"},
		{name: "long reason", hash: a.Hash(), body: a.Canonical(), actor: "root", reason: strings.Repeat("x", store.MaxPolicyReason+1), field: "reason"},
		{name: "not json", hash: a.Hash(), body: json.RawMessage(`{`), actor: "root", reason: "x", field: "body"},
		{name: "not a policy", hash: a.Hash(), body: json.RawMessage(`{"version":"gpugov.policy/v1","bogus":1}`), actor: "root", reason: "x", field: "body"},
		{name: "other hash", hash: a.Hash(), body: withAging(1).Canonical(), actor: "root", reason: "x", field: "body"},
		{name: "unknown", hash: a.Hash(), actor: "root", reason: "x", notFound: true},
	} {
		_, err := s.ActivatePolicy(ctx, tc.hash, tc.body, tc.actor, tc.reason, nil)
		var ve *store.ValidationError
		switch {
		case tc.field != "" && (!errors.As(err, &ve) || ve.Field != tc.field || !errors.Is(err, store.ErrInvalid)):
			t.Errorf("%s: %v, want invalid %s", tc.name, err, tc.field)
		case tc.notFound && !errors.Is(err, store.ErrNotFound):
			t.Errorf("%s: %v, want not found", tc.name, err)
		}
	}
	if after := quotaCounts(t, s); after != before {
		t.Fatalf("refusals changed the store: %v → %v", before, after)
	}
	// A stored body that is not the hash's (SavePolicyVersion does not check).
	if err := s.SavePolicyVersion(ctx, a.Hash(), withAging(7).Canonical()); err != nil {
		t.Fatal(err)
	}
	before = quotaCounts(t, s)
	if _, err := s.ActivatePolicy(ctx, a.Hash(), nil, "root", "x", nil); !errors.Is(err, store.ErrInvalid) {
		t.Errorf("stored body of another hash: %v", err)
	}
	if _, err := s.ActivatePolicy(ctx, a.Hash(), a.Canonical(), "root", "x", nil); !errors.Is(err, store.ErrConflict) {
		t.Errorf("conflicting body: %v", err)
	}
	if after := quotaCounts(t, s); after != before {
		t.Fatalf("refusals changed the store: %v → %v", before, after)
	}
	if h, _ := s.ActivePolicyHash(ctx); h != base {
		t.Fatalf("active %s, want %s", h, base)
	}
}

// TestFileReloadClearsLineage: a file version that equals an API-derived
// one becomes its own base when the file loads it, so what the API derives
// next records the file's version as base.
func TestFileReloadClearsLineage(t *testing.T) {
	t.Parallel()
	s, _ := newStore(t)
	ctx := context.Background()
	fileVersion(t, s, policy.Default())
	a := withAging(4000)
	if _, err := s.ActivatePolicy(ctx, a.Hash(), a.Canonical(), "root", "api", nil); err != nil {
		t.Fatal(err)
	}
	fileVersion(t, s, a) // the change copied into the file
	if v, _ := s.ActivePolicyVersion(ctx); v.Hash != a.Hash() || v.BaseHash != "" || v.DerivedFrom != "" {
		t.Fatalf("file version %+v", v)
	}
	b := withAging(5000)
	if _, err := s.ActivatePolicy(ctx, b.Hash(), b.Canonical(), "root", "api", nil); err != nil {
		t.Fatal(err)
	}
	if v, _ := s.ActivePolicyVersion(ctx); v.BaseHash != a.Hash() {
		t.Fatalf("derived %+v, want base %s", v, a.Hash())
	}
}

// TestListAndGetPolicyVersions: newest first with lineage; a version is
// found by hash or unique prefix; a short, non-hex or ambiguous prefix is
// refused naming hash.
func TestListAndGetPolicyVersions(t *testing.T) {
	t.Parallel()
	s, _ := newStore(t)
	ctx := context.Background()
	base := fileVersion(t, s, policy.Default())
	a := withAging(4000)
	if _, err := s.ActivatePolicy(ctx, a.Hash(), a.Canonical(), "root", "api", nil); err != nil {
		t.Fatal(err)
	}
	list, err := s.ListPolicyVersions(ctx, 0)
	if err != nil || len(list) != 2 || list[0].Hash != a.Hash() || !list[0].Active || list[0].DerivedFrom != base ||
		list[1].Hash != base || list[1].Active || list[1].BaseHash != "" {
		t.Fatalf("list %+v %v", list, err)
	}
	if one, err := s.ListPolicyVersions(ctx, 1); err != nil || len(one) != 1 {
		t.Fatalf("limit 1: %+v %v", one, err)
	}
	for _, q := range []string{a.Hash(), a.Hash()[:8], strings.ToUpper(a.Hash()[:12])} {
		v, err := s.GetPolicyVersion(ctx, q)
		if err != nil || v.Hash != a.Hash() || !v.Active || v.BaseHash != base {
			t.Fatalf("get %s: %+v %v", q, v, err)
		}
		if p, err := policy.FromCanonical(v.Body); err != nil || p.Hash() != a.Hash() {
			t.Fatalf("body of %s: %v", q, err)
		}
	}
	for _, q := range []string{"", "abcdef1", "zzzzzzzz", a.Hash() + "0"} {
		var ve *store.ValidationError
		if _, err := s.GetPolicyVersion(ctx, q); !errors.As(err, &ve) || ve.Field != "hash" {
			t.Errorf("get %q: %v, want invalid hash", q, err)
		}
	}
	if _, err := s.GetPolicyVersion(ctx, strings.Repeat("0", 64)); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("unknown: %v", err)
	}
	// Two versions sharing an 8-digit prefix (bodies SavePolicyVersion stores unchecked).
	for _, h := range []string{"deadbeef" + strings.Repeat("0", 56), "deadbeef" + strings.Repeat("1", 56)} {
		if err := s.SavePolicyVersion(ctx, h, json.RawMessage(`{}`)); err != nil {
			t.Fatal(err)
		}
	}
	_, err = s.GetPolicyVersion(ctx, "deadbeef")
	if !errors.Is(err, store.ErrInvalid) || !strings.Contains(err.Error(), "ambiguous") {
		t.Fatalf("ambiguous: %v", err)
	}
	if v, err := s.GetPolicyVersion(ctx, "deadbeef1"); err != nil || !strings.HasSuffix(v.Hash, "1111") {
		t.Fatalf("unique longer prefix: %+v %v", v, err)
	}
}

// TestLastDecisionNamesThePolicy: the last decision carries the policy
// version its cycle recorded, whether it comes from the decisions rows (a
// placement) or from the explanation of a later cycle that changed nothing.
func TestLastDecisionNamesThePolicy(t *testing.T) {
	t.Parallel()
	s := newStoreWith(t, testPool("p", 1, 2))
	ctx := context.Background()
	waiting := submit(t, s, "vision", "p", 2, 0)
	placed := submit(t, s, "vision", "p", 1, 0)
	wait := scheduling.WaitStatus{JobID: waiting.ID, Reason: vocab.ReasonCapacityBusy, Rank: 2, Detail: "busy"}
	if _, err := s.ApplyCycle(ctx, "pv-1", &scheduling.Result{PolicyVersion: "aaaa", At: t0, Waiting: []scheduling.WaitStatus{wait},
		Placements: []scheduling.Placement{place(placed.ID, "p", storetest.NodeName("p", 0), 1000, storetest.GPUName("p", 0, 0))}}, t0); err != nil {
		t.Fatal(err)
	}
	// A second cycle under another version leaves the wait as it was: no decision row.
	if _, err := s.ApplyCycle(ctx, "pv-2", &scheduling.Result{PolicyVersion: "bbbb", At: t0.Add(time.Minute),
		Waiting: []scheduling.WaitStatus{wait}}, t0.Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	for id, want := range map[string]string{placed.ID: "aaaa", waiting.ID: "bbbb"} {
		j, err := s.GetJob(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		d, err := s.LastDecision(ctx, j)
		if err != nil || d == nil || d.Policy != want {
			t.Errorf("%s: %+v %v, want policy %s", id, d, err, want)
		}
	}
}
