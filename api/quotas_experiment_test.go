package api

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/gpugov/gpugov/internal/scheduling"
	"github.com/gpugov/gpugov/internal/vocab"
	"github.com/gpugov/gpugov/store"
	"github.com/gpugov/gpugov/store/storetest"
)

// quotaCandidate changes vision's quota in a100-east: a quota experiment.
const quotaCandidate = "version: gpugov.policy/v1\nquotas:\n  - {project: vision, pool: a100-east, nominal_milli: 2000}\n"

// quotaRows counts what a refused quota change must leave as it was.
func (e *experimentEnv) quotaRows() [4]int {
	e.t.Helper()
	var out [4]int
	for i, q := range []string{`SELECT count(*) FROM policy_versions`, `SELECT count(*) FROM audit_log WHERE action <> 'access_denied'`,
		`SELECT count(*) FROM quota_requests WHERE state = 'pending'`, `SELECT count(*) FROM quotas`} {
		if err := e.store.Pool().QueryRow(context.Background(), q).Scan(&out[i]); err != nil {
			e.t.Fatal(err)
		}
	}
	return out
}

// While an experiment about quotas holds a pool, PUT /v1/quotas and a quota
// request's approval are a 409 naming it — in its pool the change would
// confound it, in another it would end it — and store nothing; an admin's
// override_reason lets them through, recorded in the audit evidence, and
// the experiment ends at once (policy_changed). A denial needs no override.
func TestQuotaChangeWhileAQuotaExperimentHoldsThePool(t *testing.T) {
	t.Parallel()
	env := newExperimentEnv(t)
	ctx := context.Background()
	if err := env.store.UpsertInventory(ctx, []scheduling.Pool{storetest.Pool("h100-west", vocab.StageObserve, 1, 2)}); err != nil {
		t.Fatal(err)
	}
	x := env.mustCreate(validExperiment(quotaCandidate))
	if len(x.Groups) != 1 || x.Groups[0] != vocab.PolicyQuota {
		t.Fatalf("groups %v, want quota", x.Groups)
	}
	r := env.do(http.MethodPost, "/v1/quota-requests", tokAlice, map[string]any{"pool": "a100-east", "project": "vision",
		"nominal_milli": 4000, "reason": "paper deadline"})
	var req QuotaRequest
	r.decode(t, &req)
	if r.status != http.StatusCreated {
		t.Fatalf("request: %d %s", r.status, r.body)
	}
	set := map[string]any{"nominal_milli": 3000, "borrowing_limit_milli": 0, "reason": "deadline"}
	before := env.quotaRows()
	for _, tc := range []struct {
		name, method, path, want string
		body                     any
	}{
		{"PUT in its pool", http.MethodPut, "/v1/quotas/a100-east/vision", "would confound it", set},
		{"PUT in another pool", http.MethodPut, "/v1/quotas/h100-west/vision", "would end it", set},
		{"approval", http.MethodPost, "/v1/quota-requests/" + req.ID + "/approve", "would confound it", QuotaDecision{Comment: "ok"}},
		{"blank override", http.MethodPut, "/v1/quotas/a100-east/vision", "would confound it",
			map[string]any{"nominal_milli": 3000, "borrowing_limit_milli": 0, "reason": "deadline", "override_reason": "  "}},
	} {
		r := env.do(tc.method, tc.path, tokAdmin, tc.body)
		if e := r.apiError(t); r.status != http.StatusConflict || e.Field != "override_reason" || !strings.Contains(e.Message, x.ID) ||
			!strings.Contains(e.Message, tc.want) {
			t.Errorf("%s: %d %s, want 409 naming %s, %q", tc.name, r.status, r.body, x.ID, tc.want)
		}
	}
	if after := env.quotaRows(); after != before {
		t.Fatalf("refused changes stored rows: %v → %v", before, after)
	}
	if h, _ := env.store.ActivePolicyHash(ctx); h != env.baseline {
		t.Fatalf("active %s, want the baseline %s", h, env.baseline)
	}

	// The override: set and approve, each audited with it.
	set["override_reason"] = "incident: vision must run now"
	r = env.do(http.MethodPut, "/v1/quotas/a100-east/vision", tokAdmin, set)
	var ch QuotaChange
	r.decode(t, &ch)
	if r.status != http.StatusOK || !ch.Changed {
		t.Fatalf("PUT with override: %d %s", r.status, r.body)
	}
	audit, err := env.store.AuditFor(ctx, "a100-east/vision", 0)
	if err != nil || len(audit) != 1 || audit[0].Action != store.AuditSetQuota || audit[0].Evidence["override_experiment"] != x.ID ||
		audit[0].Evidence["override_reason"] != "incident: vision must run now" {
		t.Fatalf("set_quota audit %+v %v, want the override recorded", audit, err)
	}
	// The override ended the experiment at once (its baseline is no longer
	// in force), not at its next step.
	active, _ := env.store.ActivePolicyHash(ctx)
	env.overrideEnded(x.ID, active)
	x = env.mustCreate(validExperiment(quotaCandidate))
	r = env.do(http.MethodPost, "/v1/quota-requests/"+req.ID+"/approve", tokAdmin,
		QuotaDecision{Comment: "granted", OverrideReason: "the experiment is moot"})
	var decided QuotaRequest
	r.decode(t, &decided)
	if r.status != http.StatusOK || decided.State != "approved" || decided.Change == nil || !decided.Change.Changed {
		t.Fatalf("approve with override: %d %s", r.status, r.body)
	}
	for subject, action := range map[string]string{req.ID: store.AuditApproveQuotaRequest, "a100-east/vision": store.AuditSetQuota} {
		es, err := env.store.AuditFor(ctx, subject, 0)
		if err != nil || len(es) == 0 {
			t.Fatalf("audit of %s: %v", subject, err)
		}
		last := es[len(es)-1]
		if last.Action != action || last.Evidence["override_experiment"] != x.ID || last.Evidence["override_reason"] != "the experiment is moot" {
			t.Fatalf("%s audit %+v, want the override recorded", action, last)
		}
	}
	active, _ = env.store.ActivePolicyHash(ctx)
	env.overrideEnded(x.ID, active)

	// A denial changes no quota: no override needed.
	r = env.do(http.MethodPost, "/v1/quota-requests", tokAlice, map[string]any{"pool": "a100-east", "project": "vision",
		"nominal_milli": 9000, "reason": "more"})
	r.decode(t, &req)
	if r := env.do(http.MethodPost, "/v1/quota-requests/"+req.ID+"/deny", tokAdmin, QuotaDecision{Comment: "no"}); r.status != http.StatusOK {
		t.Fatalf("deny: %d %s", r.status, r.body)
	}
	// An unknown request is still a 404, a decided one a 409 from the store.
	if r := env.do(http.MethodPost, "/v1/quota-requests/qr-none/approve", tokAdmin, QuotaDecision{Comment: "x"}); r.status != http.StatusNotFound {
		t.Fatalf("unknown request: %d %s", r.status, r.body)
	}
	if r := env.do(http.MethodPost, "/v1/quota-requests/"+req.ID+"/approve", tokAdmin, QuotaDecision{Comment: "x"}); r.status != http.StatusConflict ||
		strings.Contains(string(r.body), x.ID) {
		t.Fatalf("decided request: %d %s, want the store's 409", r.status, r.body)
	}
}

// An experiment about another variable tolerates quota changes (undoing it
// keeps them): PUT /v1/quotas and an approval need no override.
func TestQuotaChangeWhileAnotherExperimentHoldsThePool(t *testing.T) {
	t.Parallel()
	env := newExperimentEnv(t)
	ctx := context.Background()
	x := env.mustCreate(validExperiment(agingCandidate))
	r := env.do(http.MethodPut, "/v1/quotas/a100-east/vision", tokAdmin, map[string]any{"nominal_milli": 3000,
		"borrowing_limit_milli": 0, "reason": "deadline"})
	if r.status != http.StatusOK {
		t.Fatalf("PUT during an aging experiment: %d %s", r.status, r.body)
	}
	r = env.do(http.MethodPost, "/v1/quota-requests", tokAlice, map[string]any{"pool": "a100-east", "project": "vision",
		"nominal_milli": 4000, "reason": "paper deadline"})
	var req QuotaRequest
	r.decode(t, &req)
	if r := env.do(http.MethodPost, "/v1/quota-requests/"+req.ID+"/approve", tokAdmin, QuotaDecision{Comment: "ok"}); r.status != http.StatusOK {
		t.Fatalf("approve during an aging experiment: %d %s", r.status, r.body)
	}
	audit, _ := env.store.AuditFor(ctx, "a100-east/vision", 0)
	for _, a := range audit {
		if a.Evidence["override_experiment"] != nil {
			t.Fatalf("an override recorded without one: %+v (experiment %s)", a, x.ID)
		}
	}
}
