package api

import (
	"context"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/gpugov/gpugov/internal/policy"
	"github.com/gpugov/gpugov/internal/scheduling"
	"github.com/gpugov/gpugov/internal/vocab"
	"github.com/gpugov/gpugov/store"
)

// newQuotaTestEnv is newActionTestEnv with an active policy version (as
// serve stores at start) giving vision 1000 milli-GPU with 1000 to borrow
// and speech 2000 in a100-east, and a running vision job on both GPUs
// (vision borrows 1000 of speech's unused quota).
func newQuotaTestEnv(t *testing.T) (*testEnv, string) {
	t.Helper()
	e := newActionTestEnv(t)
	ctx := context.Background()
	p := policy.Default()
	p.Quotas = []policy.Quota{{Project: "vision", Pool: "a100-east", NominalMilli: 1000, BorrowingLimitMilli: 1000},
		{Project: "speech", Pool: "a100-east", NominalMilli: 2000}}
	if err := e.store.SavePolicyVersion(ctx, p.Hash(), p.Canonical()); err != nil {
		t.Fatal(err)
	}
	if err := e.store.ActivatePolicyVersion(ctx, p.Hash(), "serve", "test policy"); err != nil {
		t.Fatal(err)
	}
	if _, err := e.store.SyncQuotas(ctx, "serve", "test policy"); err != nil {
		t.Fatal(err)
	}
	j, _, err := e.store.CreateJob(ctx, &store.NewJob{Project: "vision", Queue: "train", Tier: vocab.TierStandard,
		Request: scheduling.ResourceRequest{GPUs: 2, Pool: "a100-east"}, RunSeconds: 100})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	if out, err := e.store.ApplyCycle(ctx, "c1", &scheduling.Result{PolicyVersion: p.Hash(), At: now, Placements: []scheduling.Placement{
		{JobID: j.ID, Pool: "a100-east", Node: "node-1", Rank: 1, Borrowed: true,
			GPUs: []scheduling.GPUShare{{UUID: "GPU-aaaa", Milli: 1000}, {UUID: "GPU-bbbb", Milli: 1000}}}}}, now); err != nil || len(out.Placed) != 1 {
		t.Fatalf("placement: %+v %v", out, err)
	}
	return e, p.Hash()
}

// quotaSnapshot is what a rejected quota request must leave as it was.
func (e *testEnv) quotaSnapshot() [4]int {
	e.t.Helper()
	var out [4]int
	for i, q := range []string{`SELECT count(*) FROM policy_versions`, `SELECT count(*) FROM audit_log WHERE action <> 'access_denied'`,
		`SELECT count(*) FROM quota_requests WHERE state = 'pending'`,
		`SELECT coalesce(sum(nominal_milli * 7 + borrowing_limit_milli), 0) FROM quotas`} {
		if err := e.store.Pool().QueryRow(context.Background(), q).Scan(&out[i]); err != nil {
			e.t.Fatal(err)
		}
	}
	return out
}

// TestQuotaRoutes: the ledger, an admin's PUT as a derived policy version,
// a project's request approved and another denied, each audited and waking
// the scheduler only when a quota changed.
func TestQuotaRoutes(t *testing.T) {
	t.Parallel()
	e, base := newQuotaTestEnv(t)

	r := e.do(http.MethodGet, "/v1/quotas", tokAlice, nil)
	var list QuotaList
	r.decode(t, &list)
	want := []QuotaUsage{
		{Pool: "a100-east", Project: "speech", NominalMilli: 2000, LentOutMilli: 1000,
			LentTo: []QuotaBorrower{{Project: "vision", BorrowedMilli: 1000}}},
		{Pool: "a100-east", Project: "vision", NominalMilli: 1000, BorrowingLimitMilli: 1000, UsedMilli: 2000, BorrowedMilli: 1000,
			LentTo: []QuotaBorrower{}},
	}
	if r.status != http.StatusOK || list.Policy != base || !reflect.DeepEqual(list.Quotas, want) {
		t.Fatalf("GET /v1/quotas: %d %s", r.status, r.body)
	}
	if r := e.do(http.MethodGet, "/v1/quotas?pool=elsewhere", tokAlice, nil); r.status != http.StatusOK || !strings.Contains(string(r.body), `"quotas":[]`) {
		t.Fatalf("other pool: %d %s", r.status, r.body)
	}

	// An admin sets speech's quota: a new active version derived from base.
	notified := e.wf.notified
	r = e.do(http.MethodPut, "/v1/quotas/a100-east/speech", tokAdmin, map[string]any{"nominal_milli": 1500, "borrowing_limit_milli": 0, "reason": "rebalance"})
	var ch QuotaChange
	r.decode(t, &ch)
	if r.status != http.StatusOK || !ch.Changed || ch.Before == nil || ch.Before.NominalMilli != 2000 || ch.After.NominalMilli != 1500 ||
		ch.PreviousPolicy != base || ch.Policy == base {
		t.Fatalf("PUT: %d %s", r.status, r.body)
	}
	if active, _ := e.store.ActivePolicyHash(context.Background()); active != ch.Policy || e.wf.notified != notified+1 {
		t.Fatalf("active %s (want %s), woken %d times", active, ch.Policy, e.wf.notified-notified)
	}
	// The same values again: 200, nothing changed, nobody woken.
	if r := e.do(http.MethodPut, "/v1/quotas/a100-east/speech", tokAdmin, map[string]any{"nominal_milli": 1500, "borrowing_limit_milli": 0, "reason": "again"}); r.status != http.StatusOK ||
		!strings.Contains(string(r.body), `"changed":false`) || e.wf.notified != notified+1 {
		t.Fatalf("repeat: %d %s", r.status, r.body)
	}

	// vision asks for more; bob (speech) does not see it; an admin approves.
	r = e.do(http.MethodPost, "/v1/quota-requests", tokAlice, map[string]any{"pool": "a100-east", "project": "vision", "nominal_milli": 2000, "reason": "paper deadline"})
	var req QuotaRequest
	r.decode(t, &req)
	if r.status != http.StatusCreated || req.State != "pending" || req.RequestedBy != "alice" || req.BorrowingLimitMilli != nil {
		t.Fatalf("request: %d %s", r.status, r.body)
	}
	var rl QuotaRequestList
	e.do(http.MethodGet, "/v1/quota-requests?state=pending", tokAlice, nil).decode(t, &rl)
	if len(rl.Requests) != 1 || rl.Requests[0].ID != req.ID {
		t.Fatalf("alice's list %+v", rl)
	}
	e.do(http.MethodGet, "/v1/quota-requests", tokBob, nil).decode(t, &rl)
	if len(rl.Requests) != 0 {
		t.Fatalf("bob sees %+v", rl)
	}
	r = e.do(http.MethodPost, "/v1/quota-requests/"+req.ID+"/approve", tokAdmin, map[string]any{"comment": "two weeks"})
	var decided QuotaRequest
	r.decode(t, &decided)
	if r.status != http.StatusOK || decided.State != "approved" || decided.DecidedBy != "root" || decided.Comment != "two weeks" ||
		decided.Change == nil || decided.Change.After != (Quota{NominalMilli: 2000, BorrowingLimitMilli: 1000}) ||
		decided.Policy != decided.Change.Policy || e.wf.notified != notified+2 {
		t.Fatalf("approve: %d %s", r.status, r.body)
	}
	e.do(http.MethodGet, "/v1/quotas", tokAlice, nil).decode(t, &list)
	if v := list.Quotas[1]; v.Project != "vision" || v.NominalMilli != 2000 || v.BorrowedMilli != 0 || list.Policy != decided.Policy {
		t.Fatalf("after approval: %+v", list)
	}
	if r := e.do(http.MethodPost, "/v1/quota-requests/"+req.ID+"/deny", tokAdmin, map[string]any{"comment": "late"}); r.status != http.StatusConflict {
		t.Fatalf("deciding twice: %d %s", r.status, r.body)
	}
	// An operator asks for speech; the admin denies: nothing changes.
	r = e.do(http.MethodPost, "/v1/quota-requests", tokOps, map[string]any{"pool": "a100-east", "project": "speech", "nominal_milli": 9000,
		"borrowing_limit_milli": 1000, "reason": "growth"})
	r.decode(t, &req)
	before := e.quotaSnapshot()
	r = e.do(http.MethodPost, "/v1/quota-requests/"+req.ID+"/deny", tokAdmin, map[string]any{"comment": "no budget"})
	decided = QuotaRequest{}
	r.decode(t, &decided)
	after := e.quotaSnapshot()
	if r.status != http.StatusOK || decided.State != "denied" || decided.Change != nil || after[0] != before[0] || after[3] != before[3] ||
		after[1] != before[1]+1 || after[2] != before[2]-1 {
		t.Fatalf("deny: %d %s (%v → %v)", r.status, r.body, before, after)
	}
}

// TestQuotaRoutesRejectBadInput: every quota route answers bad input with a
// 4xx naming the field (or the role refused), and nothing stored changes
// nor is the scheduler woken.
func TestQuotaRoutesRejectBadInput(t *testing.T) {
	t.Parallel()
	e, _ := newQuotaTestEnv(t)
	r := e.do(http.MethodPost, "/v1/quota-requests", tokAlice, map[string]any{"pool": "a100-east", "project": "vision", "nominal_milli": 2000, "reason": "x"})
	var pending QuotaRequest
	r.decode(t, &pending)
	good := func(extra map[string]any, drop ...string) map[string]any {
		m := map[string]any{"nominal_milli": 3000, "borrowing_limit_milli": 0, "reason": "why"}
		for k, v := range extra {
			m[k] = v
		}
		for _, k := range drop {
			delete(m, k)
		}
		return m
	}
	req := func(extra map[string]any, drop ...string) map[string]any {
		m := map[string]any{"pool": "a100-east", "project": "vision", "nominal_milli": 3000, "reason": "why"}
		for k, v := range extra {
			m[k] = v
		}
		for _, k := range drop {
			delete(m, k)
		}
		return m
	}
	long := strings.Repeat("x", store.MaxQuotaText+1)
	put, post := "/v1/quotas/a100-east/vision", "/v1/quota-requests"
	approve := "/v1/quota-requests/" + pending.ID + "/approve"
	cases := []badCase{
		{"put by a submitter", tokAlice, http.MethodPut, put, good(nil), http.StatusForbidden, ""},
		{"put by an operator", tokOps, http.MethodPut, put, good(nil), http.StatusForbidden, ""},
		{"put by an agent", tokAgent, http.MethodPut, put, good(nil), http.StatusForbidden, ""},
		{"put without nominal", tokAdmin, http.MethodPut, put, good(nil, "nominal_milli"), http.StatusBadRequest, "nominal_milli"},
		{"put without borrowing limit", tokAdmin, http.MethodPut, put, good(nil, "borrowing_limit_milli"), http.StatusBadRequest, "borrowing_limit_milli"},
		{"put without reason", tokAdmin, http.MethodPut, put, good(nil, "reason"), http.StatusBadRequest, "reason"},
		{"put unknown field", tokAdmin, http.MethodPut, put, good(map[string]any{"nominal": 1}), http.StatusBadRequest, "nominal"},
		{"put a string", tokAdmin, http.MethodPut, put, good(map[string]any{"nominal_milli": "lots"}), http.StatusBadRequest, "nominal_milli"},
		{"put negative", tokAdmin, http.MethodPut, put, good(map[string]any{"nominal_milli": -1}), http.StatusUnprocessableEntity, "nominal_milli"},
		{"put too large", tokAdmin, http.MethodPut, put, good(map[string]any{"borrowing_limit_milli": policy.MaxQuotaMilli + 1}), http.StatusUnprocessableEntity, "borrowing_limit_milli"},
		{"put unknown pool", tokAdmin, http.MethodPut, "/v1/quotas/nowhere/vision", good(nil), http.StatusUnprocessableEntity, "pool"},
		{"put long reason", tokAdmin, http.MethodPut, put, good(map[string]any{"reason": long}), http.StatusUnprocessableEntity, "reason"},
		{"put not JSON", tokAdmin, http.MethodPut, put, "{", http.StatusBadRequest, ""},
		{"request for another project", tokAlice, http.MethodPost, post, req(map[string]any{"project": "speech"}), http.StatusForbidden, "project"},
		{"request by an agent", tokAgent, http.MethodPost, post, req(nil), http.StatusForbidden, ""},
		{"request without pool", tokAlice, http.MethodPost, post, req(nil, "pool"), http.StatusBadRequest, "pool"},
		{"request without project", tokAlice, http.MethodPost, post, req(nil, "project"), http.StatusBadRequest, "project"},
		{"request without nominal", tokAlice, http.MethodPost, post, req(nil, "nominal_milli"), http.StatusBadRequest, "nominal_milli"},
		{"request without reason", tokAlice, http.MethodPost, post, req(nil, "reason"), http.StatusBadRequest, "reason"},
		{"request negative", tokAlice, http.MethodPost, post, req(map[string]any{"nominal_milli": -5}), http.StatusUnprocessableEntity, "nominal_milli"},
		{"request borrowing too large", tokAlice, http.MethodPost, post, req(map[string]any{"borrowing_limit_milli": policy.MaxQuotaMilli + 1}), http.StatusUnprocessableEntity, "borrowing_limit_milli"},
		{"request unknown pool", tokAlice, http.MethodPost, post, req(map[string]any{"pool": "nowhere"}), http.StatusUnprocessableEntity, "pool"},
		{"request unknown field", tokAlice, http.MethodPost, post, req(map[string]any{"priority": 1}), http.StatusBadRequest, "priority"},
		{"approve by a submitter", tokAlice, http.MethodPost, approve, map[string]any{"comment": "mine"}, http.StatusForbidden, ""},
		{"approve by an operator", tokOps, http.MethodPost, approve, map[string]any{"comment": "ok"}, http.StatusForbidden, ""},
		{"approve without comment", tokAdmin, http.MethodPost, approve, map[string]any{}, http.StatusBadRequest, "comment"},
		{"approve long comment", tokAdmin, http.MethodPost, approve, map[string]any{"comment": long}, http.StatusUnprocessableEntity, "comment"},
		{"approve unknown request", tokAdmin, http.MethodPost, "/v1/quota-requests/qr-none/approve", map[string]any{"comment": "ok"}, http.StatusNotFound, "id"},
		{"deny without comment", tokAdmin, http.MethodPost, "/v1/quota-requests/" + pending.ID + "/deny", map[string]any{"comment": ""}, http.StatusBadRequest, "comment"},
		{"list bad state", tokAdmin, http.MethodGet, "/v1/quota-requests?state=open", nil, http.StatusUnprocessableEntity, "state"},
		{"list bad limit", tokAdmin, http.MethodGet, "/v1/quota-requests?limit=0", nil, http.StatusUnprocessableEntity, "limit"},
		{"list another project", tokAlice, http.MethodGet, "/v1/quota-requests?project=speech", nil, http.StatusForbidden, "project"},
		{"ledger by an agent", tokAgent, http.MethodGet, "/v1/quotas", nil, http.StatusForbidden, ""},
		{"ledger without token", "", http.MethodGet, "/v1/quotas", nil, http.StatusUnauthorized, ""},
	}
	before, notified := e.quotaSnapshot(), e.wf.notified
	stored, _ := e.store.GetQuotaRequest(context.Background(), pending.ID)
	for _, c := range cases {
		r := e.do(c.method, c.path, c.token, c.body)
		if r.status != c.status {
			t.Errorf("%s: status %d, want %d: %s", c.name, r.status, c.status, r.body)
			continue
		}
		if got := r.apiError(t); got.Field != c.field {
			t.Errorf("%s: field %q, want %q (%s)", c.name, got.Field, c.field, got.Message)
		}
	}
	if after := e.quotaSnapshot(); after != before {
		t.Errorf("rejected requests changed the store: %v → %v", before, after)
	}
	if got, _ := e.store.GetQuotaRequest(context.Background(), pending.ID); !reflect.DeepEqual(got, stored) {
		t.Errorf("the pending request changed: %+v → %+v", stored, got)
	}
	if e.wf.notified != notified {
		t.Errorf("the scheduler was woken %d times by rejected requests", e.wf.notified-notified)
	}
}
