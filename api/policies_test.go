package api

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/gpugov/gpugov/internal/policy"
	"github.com/gpugov/gpugov/internal/vocab"
	"github.com/gpugov/gpugov/store"
)

// newPolicyTestEnv is a test env with the default policy as the active
// (file-loaded) version, as serve stores at start; it returns its hash.
func newPolicyTestEnv(t *testing.T) (*testEnv, string) {
	t.Helper()
	e := newTestEnv(t)
	ctx := context.Background()
	p := policy.Default()
	if err := e.store.SavePolicyVersion(ctx, p.Hash(), p.Canonical()); err != nil {
		t.Fatal(err)
	}
	if err := e.store.ActivatePolicyVersion(ctx, p.Hash(), "serve", "loaded from policy.yaml"); err != nil {
		t.Fatal(err)
	}
	return e, p.Hash()
}

// policyRows counts what a refused apply must leave as it was.
func (e *testEnv) policyRows() [2]int {
	e.t.Helper()
	var out [2]int
	for i, q := range []string{`SELECT count(*) FROM policy_versions`, `SELECT count(*) FROM audit_log WHERE action <> 'access_denied'`} {
		if err := e.store.Pool().QueryRow(context.Background(), q).Scan(&out[i]); err != nil {
			e.t.Fatal(err)
		}
	}
	return out
}

const candidateYAML = `version: gpugov.policy/v1
aging: {cap_points: 4500}
`

// TestApplyPolicy: an admin's apply stores and activates the file's
// version derived from the active one, audited, waking the scheduler, and
// answers the diff by group; a repeat changes nothing.
func TestApplyPolicy(t *testing.T) {
	t.Parallel()
	e, base := newPolicyTestEnv(t)
	want, err := policy.Parse("x", []byte(candidateYAML))
	if err != nil {
		t.Fatal(err)
	}
	r := e.do(http.MethodPost, "/v1/policies", tokAdmin, PolicyApply{Policy: candidateYAML, Reason: "longer waits age further"})
	if r.status != http.StatusOK {
		t.Fatalf("apply: %d %s", r.status, r.body)
	}
	var out PolicyApplied
	r.decode(t, &out)
	if out.Hash != want.Hash() || out.Previous != base || !out.Changed || len(out.Groups) != 1 || out.Groups[0] != vocab.PolicyAging ||
		len(out.Diff) != 1 || out.Diff[0].Changes[0] != (policy.FieldChange{Field: "aging.cap_points", Before: "3000", After: "4500"}) {
		t.Fatalf("answer %+v", out)
	}
	ctx := context.Background()
	v, err := e.store.ActivePolicyVersion(ctx)
	if err != nil || v.Hash != out.Hash || v.DerivedFrom != base || v.BaseHash != base {
		t.Fatalf("active %+v %v", v, err)
	}
	audit, _ := e.store.AuditFor(ctx, out.Hash, 0)
	if len(audit) != 1 || audit[0].Action != store.AuditActivatePolicy || audit[0].Actor != "root" ||
		audit[0].Reason != "longer waits age further" || audit[0].Evidence["previous"] != base || audit[0].Evidence["source"] != "api" {
		t.Fatalf("audit %+v", audit)
	}
	if e.wf.notified != 1 {
		t.Fatalf("scheduler woken %d times", e.wf.notified)
	}
	// The same file again: nothing changes, nothing is woken.
	r = e.do(http.MethodPost, "/v1/policies", tokAdmin, PolicyApply{Policy: candidateYAML, Reason: "again"})
	var again PolicyApplied
	r.decode(t, &again)
	if r.status != http.StatusOK || again.Changed || len(again.Diff) != 0 || again.Groups == nil || e.wf.notified != 1 {
		t.Fatalf("repeat: %d %+v", r.status, again)
	}
}

// TestApplyPolicyRefusals: every refusal names the field (the file's line
// and field for the loader's problems) and stores nothing.
func TestApplyPolicyRefusals(t *testing.T) {
	t.Parallel()
	e, _ := newPolicyTestEnv(t)
	before := e.policyRows()
	for _, tc := range []struct {
		name   string
		token  string
		body   any
		status int
		field  string
		msg    string
	}{
		{"operator", tokOps, PolicyApply{Policy: candidateYAML, Reason: "x"}, http.StatusForbidden, "", "only an admin"},
		{"submitter", tokAlice, PolicyApply{Policy: candidateYAML, Reason: "x"}, http.StatusForbidden, "", "only an admin"},
		{"no reason", tokAdmin, PolicyApply{Policy: candidateYAML}, http.StatusBadRequest, "reason", "required"},
		{"no policy", tokAdmin, PolicyApply{Reason: "x"}, http.StatusBadRequest, "policy", "required"},
		{"unknown body field", tokAdmin, `{"policy": "x", "reason": "x", "force": true}`, http.StatusBadRequest, "force", ""},
		{"yaml syntax", tokAdmin, PolicyApply{Policy: "version: [", Reason: "x", File: "mine.yaml"}, http.StatusBadRequest, "policy", "mine.yaml:"},
		{"bad value", tokAdmin, PolicyApply{Policy: "version: gpugov.policy/v1\naging:\n  cap_points: -5\n", Reason: "x"},
			http.StatusUnprocessableEntity, "policy.aging.cap_points", "policy.yaml:3: aging.cap_points:"},
		{"unknown field", tokAdmin, PolicyApply{Policy: "version: gpugov.policy/v1\nagin: {}\n", Reason: "x"},
			http.StatusUnprocessableEntity, "policy.agin", "policy.yaml:2:"},
		{"no version", tokAdmin, PolicyApply{Policy: "aging: {}\n", Reason: "x"}, http.StatusUnprocessableEntity, "policy.version", ""},
		{"long reason", tokAdmin, PolicyApply{Policy: candidateYAML, Reason: strings.Repeat("x", 1025)}, http.StatusUnprocessableEntity, "reason", ""},
	} {
		r := e.do(http.MethodPost, "/v1/policies", tc.token, tc.body)
		if r.status != tc.status {
			t.Errorf("%s: %d %s, want %d", tc.name, r.status, r.body, tc.status)
			continue
		}
		got := r.apiError(t)
		if got.Field != tc.field || !strings.Contains(got.Message, tc.msg) {
			t.Errorf("%s: %+v, want field %q message with %q", tc.name, got, tc.field, tc.msg)
		}
	}
	if after := e.policyRows(); after != before {
		t.Fatalf("refusals changed the store: %v → %v", before, after)
	}
	// Several problems: each listed, by line.
	r := e.do(http.MethodPost, "/v1/policies", tokAdmin, PolicyApply{
		Policy: "version: gpugov.policy/v1\naging:\n  cap_points: -5\npreemption:\n  grace_s: -1\n", Reason: "x"})
	got := r.apiError(t)
	if r.status != http.StatusUnprocessableEntity || len(got.Details) != 2 || got.Details[1].Field != "policy.preemption.grace_s" ||
		!strings.HasPrefix(got.Details[1].Message, "policy.yaml:5: ") {
		t.Fatalf("two problems: %d %+v", r.status, got)
	}
}

// TestListShowDiffPolicies: operators and admins list, show (by prefix) and
// diff versions; a submitter may not; unknown and bad hashes are named.
func TestListShowDiffPolicies(t *testing.T) {
	t.Parallel()
	e, base := newPolicyTestEnv(t)
	r := e.do(http.MethodPost, "/v1/policies", tokAdmin, PolicyApply{Policy: candidateYAML, Reason: "try"})
	var applied PolicyApplied
	r.decode(t, &applied)

	var list PolicyVersionList
	r = e.do(http.MethodGet, "/v1/policies", tokOps, nil)
	r.decode(t, &list)
	if r.status != http.StatusOK || len(list.Versions) != 2 || list.Versions[0].Hash != applied.Hash || !list.Versions[0].Active ||
		list.Versions[0].DerivedFrom != base || list.Versions[0].BaseHash != base || list.Versions[1].Hash != base || list.Versions[1].Active {
		t.Fatalf("list: %d %+v", r.status, list)
	}
	r = e.do(http.MethodGet, "/v1/policies?limit=1", tokAdmin, nil)
	var one PolicyVersionList
	r.decode(t, &one)
	if r.status != http.StatusOK || len(one.Versions) != 1 || one.Versions[0].Hash != applied.Hash {
		t.Fatalf("limit 1: %d %s", r.status, r.body)
	}

	var detail PolicyVersionDetail
	r = e.do(http.MethodGet, "/v1/policies/"+applied.Hash[:8], tokOps, nil)
	r.decode(t, &detail)
	p, err := policy.FromCanonical(detail.Policy)
	if r.status != http.StatusOK || detail.Hash != applied.Hash || err != nil || p.Hash() != applied.Hash || p.Aging.CapPoints != 4500 {
		t.Fatalf("show: %d %+v %v", r.status, detail, err)
	}

	var d PolicyDiff
	r = e.do(http.MethodGet, "/v1/policies/"+base[:10]+"/diff/"+applied.Hash, tokAdmin, nil)
	r.decode(t, &d)
	if r.status != http.StatusOK || d.From != base || d.To != applied.Hash || len(d.Groups) != 1 || d.Groups[0] != vocab.PolicyAging ||
		d.Diff[0].Changes[0].Field != "aging.cap_points" {
		t.Fatalf("diff: %d %+v", r.status, d)
	}
	r = e.do(http.MethodGet, "/v1/policies/"+base+"/diff/"+base, tokAdmin, nil)
	if r.status != http.StatusOK || !strings.Contains(string(r.body), `"diff":[]`) {
		t.Fatalf("empty diff: %d %s", r.status, r.body)
	}

	for _, tc := range []struct {
		path, token string
		status      int
		field       string
	}{
		{"/v1/policies", tokAlice, http.StatusForbidden, ""},
		{"/v1/policies/" + base, tokAlice, http.StatusForbidden, ""},
		{"/v1/policies/" + base + "/diff/" + base, tokBob, http.StatusForbidden, ""},
		{"/v1/policies?limit=0", tokOps, http.StatusUnprocessableEntity, "limit"},
		{"/v1/policies/" + strings.Repeat("0", 64), tokOps, http.StatusNotFound, "hash"},
		{"/v1/policies/xyz", tokOps, http.StatusUnprocessableEntity, "hash"},
		{"/v1/policies/" + base + "/diff/abc", tokOps, http.StatusUnprocessableEntity, "other"},
		{"/v1/policies/00000000/diff/" + base, tokOps, http.StatusNotFound, "hash"},
	} {
		r := e.do(http.MethodGet, tc.path, tc.token, nil)
		if r.status != tc.status || r.apiError(t).Field != tc.field {
			t.Errorf("GET %s: %d %s, want %d field %q", tc.path, r.status, r.body, tc.status, tc.field)
		}
	}
}
