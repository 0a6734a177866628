package api

import (
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/gpugov/gpugov/internal/vocab"
)

// pagedRoutes are the GET list routes and their page-size parameter: each
// takes 1..vocab.MaxListLimit (docs/design.md "Bounds of outside input").
var pagedRoutes = []struct {
	route, path, param string
	ok                 bool // a page of MaxListLimit answers 200 on an empty database
}{
	{"/v1/jobs", "/v1/jobs", "limit", true},
	{"/v1/notifications", "/v1/notifications", "limit", true},
	{"/v1/audit", "/v1/audit", "limit", true},
	{"/v1/experiments", "/v1/experiments", "limit", true},
	{"/v1/policies", "/v1/policies", "limit", true},
	{"/v1/preemptions", "/v1/preemptions", "limit", true},
	{"/v1/reclaims", "/v1/reclaims", "limit", true},
	{"/v1/quota-requests", "/v1/quota-requests", "limit", true},
	{"/v1/pools/:pool/readiness", "/v1/pools/a100/readiness", "history", false},
}

// unpagedRoutes are the GET routes that answer a collection in one page,
// and why that page is bounded without a limit.
var unpagedRoutes = map[string]string{
	"/v1/jobs/:id/events":            "one job's wait events, bounded by that job's history",
	"/v1/queues":                     "the configured queues, a handful set by the policy",
	"/v1/inventory":                  "the pools' nodes and GPUs, bounded by the cluster (MaxGPUsPerNode per node)",
	"/v1/quotas":                     "the policy's quotas, one per project and pool",
	"/v1/reports/queues":             "a report: groups, bounded by the window (at most 90 days)",
	"/v1/reports/wait-reasons":       "a report: pools × reasons",
	"/v1/reports/starvation":         "a report: its starving list is capped (starving_limit)",
	"/v1/reports/compare":            "two reports",
	"/v1/policies/:hash/diff/:other": "one diff",
}

// TestListRoutesBoundPageSize asks every GET list route for pages outside
// 1..MaxListLimit (a 4xx naming the parameter, nothing read) and for the
// largest page (answered), and checks that every GET route of the server
// is classified: paged, unpaged for a stated reason, or not a list.
func TestListRoutesBoundPageSize(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t)
	for _, r := range pagedRoutes {
		for _, v := range []string{"0", "-1", "1001", "x", "1e3", "99999999999999999999"} {
			res := env.do(http.MethodGet, r.path+"?"+r.param+"="+v, tokAdmin, nil)
			if res.status < 400 || res.status > 499 {
				t.Errorf("GET %s?%s=%s: status %d, want 4xx", r.path, r.param, v, res.status)
				continue
			}
			if e := res.apiError(t); e.Field != r.param {
				t.Errorf("GET %s?%s=%s: error names %q, want %q (%s)", r.path, r.param, v, e.Field, r.param, e.Message)
			}
		}
		if !r.ok {
			continue
		}
		if res := env.do(http.MethodGet, r.path+"?"+r.param+"="+strconv.Itoa(vocab.MaxListLimit), tokAdmin, nil); res.status != http.StatusOK {
			t.Errorf("GET %s?%s=%d: status %d, want 200: %s", r.path, r.param, vocab.MaxListLimit, res.status, res.body)
		}
	}
	paged := map[string]bool{}
	for _, r := range pagedRoutes {
		paged[r.route] = true
	}
	for _, ri := range env.server.engine.Routes() {
		if ri.Method != http.MethodGet || !strings.HasPrefix(ri.Path, "/v1/") || paged[ri.Path] || unpagedRoutes[ri.Path] != "" {
			continue
		}
		// A route that answers one thing: its path ends in a parameter
		// (/v1/jobs/:id), or it is one document.
		last := ri.Path[strings.LastIndex(ri.Path, "/")+1:]
		if strings.HasPrefix(last, ":") || slices.Contains([]string{"openapi.json"}, last) {
			continue
		}
		t.Errorf("GET %s is neither paged (pagedRoutes) nor listed with a reason in unpagedRoutes", ri.Path)
	}
}
