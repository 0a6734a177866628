package api

import (
	"context"
	"encoding/json"
	"net/http"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/gpugov/gpugov/internal/vocab"
)

// walkWorkflows implements every workflow interface the routes use.
type walkWorkflows struct {
	*decidingWorkflows
	exp *experimentWorkflows
}

func (w walkWorkflows) StartExperiment(ctx context.Context, id string) error {
	return w.exp.StartExperiment(ctx, id)
}

func (w walkWorkflows) SignalExperiment(ctx context.Context, id, action, actor, reason string) error {
	return w.exp.SignalExperiment(ctx, id, action, actor, reason)
}

// The callers of the walk: who, and the letter the table below uses.
//
//   - anonymous (no token)           S  submitter of project vision (owns the fixture's jobs)
//     s  submitter of project speech    G  agent of node-1 (the fixture's runs are there)
//     g  agent of node-2                O  operator       A  admin
var walkCallers = []struct {
	letter byte
	token  string
}{{'-', ""}, {'S', tokAlice}, {'s', tokBob}, {'G', "tok-agent-1"}, {'g', "tok-agent-2"}, {'O', tokOps}, {'A', tokAdmin}}

// walkAllowed is, for every route, the callers that must get past
// authorization (any status but 401 and 403); every other caller must get
// 401 (anonymous) or 403. It is written from docs/design.md §2 "Roles and
// tenancy", independently of routeAccess.
var walkAllowed = map[string]string{
	"GET /healthz":         "-SsGgOA",
	"GET /readyz":          "-SsGgOA",
	"GET /metrics":         "-SsGgOA",
	"GET /v1/openapi.json": "-SsGgOA",

	"POST /v1/jobs":                           "SsOA", // each submits to its own project
	"GET /v1/jobs":                            "SsOA", // rows checked below
	"GET /v1/jobs/:id":                        "SOA",
	"PATCH /v1/jobs/:id":                      "SOA",
	"PUT /v1/jobs/:id/prerequisites/:name":    "SGOA", // an agent of the job's pool (node-2 is in none)
	"GET /v1/jobs/:id/events":                 "SOA",
	"POST /v1/jobs/:id/cancel":                "SOA",
	"POST /v1/jobs/:id/hold":                  "SOA",
	"POST /v1/jobs/:id/release":               "SOA",
	"POST /v1/jobs/:id/complete":              "SOA",
	"POST /v1/jobs/:id/drill":                 "OA",
	"POST /v1/jobs/:id/runs/:run/checkpoints": "GOA",
	"GET /v1/queues":                          "SsOA",
	"GET /v1/inventory":                       "SsOA",
	"POST /v1/nodes/:name/inventory":          "GOA",
	"POST /v1/nodes/:name/samples":            "GOA",
	"GET /v1/nodes/:name/runs/:run":           "GOA",

	"GET /v1/preemptions":                  "SsOA",
	"GET /v1/preemptions/:id":              "SOA",
	"GET /v1/reclaims":                     "SsOA",
	"POST /v1/reclaims/:id/confirm":        "OA",
	"POST /v1/reclaims/:id/keep":           "S", // the owning project only, staff included
	"POST /v1/reclaims/:id/dispute":        "S",
	"POST /v1/reclaims/:id/reject-dispute": "OA",
	"GET /v1/audit":                        "OA",
	"GET /v1/notifications":                "SsOA",

	"GET /v1/quotas":                      "SsOA",
	"PUT /v1/quotas/:pool/:project":       "A",
	"POST /v1/quota-requests":             "SsOA",
	"GET /v1/quota-requests":              "SsOA",
	"POST /v1/quota-requests/:id/approve": "A",
	"POST /v1/quota-requests/:id/deny":    "A",
	"POST /v1/policies":                   "A",
	"GET /v1/policies":                    "OA",
	"GET /v1/policies/:hash":              "OA",
	"GET /v1/policies/:hash/diff/:other":  "OA",
	"GET /v1/pools/:pool/readiness":       "SsOA",

	"GET /v1/reports/queues":       "SsOA",
	"GET /v1/reports/wait-reasons": "SsOA",
	"GET /v1/reports/starvation":   "SsOA",
	"GET /v1/reports/compare":      "SsOA",

	"POST /v1/experiments":             "A",
	"GET /v1/experiments":              "SsOA", // read-only for submitters
	"GET /v1/experiments/:id":          "SsOA",
	"POST /v1/experiments/:id/promote": "A",
	"POST /v1/experiments/:id/abort":   "A",
}

// TestEveryRouteEveryRole walks every route gin has registered (a route
// added without a walkAllowed entry fails) with every caller and checks
// who gets past authorization; then that submitters' lists hold their own
// project's rows only, and that the denials were audited without a token.
func TestEveryRouteEveryRole(t *testing.T) {
	t.Parallel()
	e, dwf, p, r := governanceFixture(t)
	toks, err := NewTokens(map[string]Principal{
		tokAlice:      {Name: "alice", Project: "vision", Role: vocab.RoleSubmitter},
		tokBob:        {Name: "bob", Project: "speech", Role: vocab.RoleSubmitter},
		tokOps:        {Name: "olga", Project: "platform", Role: vocab.RoleOperator},
		tokAdmin:      {Name: "root", Project: "platform", Role: vocab.RoleAdmin},
		"tok-agent-1": {Name: "agent-node-1", Project: "platform", Role: vocab.RoleAgent, Node: "node-1"},
		"tok-agent-2": {Name: "agent-node-2", Project: "platform", Role: vocab.RoleAgent, Node: "node-2"},
	})
	if err != nil {
		t.Fatal(err)
	}
	wf := walkWorkflows{decidingWorkflows: dwf, exp: &experimentWorkflows{recordingWorkflows: e.wf}}
	e.server = New(StoreFrom(e.store), wf, toks, WithMetricsHandler(http.NotFoundHandler()), WithLogger(e.server.log))
	ctx := context.Background()
	var runID string
	if err := e.store.Pool().QueryRow(ctx, `SELECT id FROM runs WHERE job_id = $1`, p.VictimJobID).Scan(&runID); err != nil {
		if runID, err = e.store.MarkRunning(ctx, p.VictimJobID, p.AllocationID, 0, time.Now()); err != nil {
			t.Fatal(err)
		}
	}
	params := map[string]string{":name": "node-1", ":run": runID, ":pool": "a100-east", ":project": "vision",
		":hash": "0000", ":other": "0001"}
	idFor := func(path string) string {
		switch {
		case strings.HasPrefix(path, "/v1/preemptions/"):
			return p.ID
		case strings.HasPrefix(path, "/v1/reclaims/"):
			return r.ID
		case strings.HasPrefix(path, "/v1/quota-requests/"):
			return "qr-none"
		case strings.HasPrefix(path, "/v1/experiments/"):
			return "x-none"
		}
		return p.VictimJobID
	}

	routes := e.server.engine.Routes()
	sort.Slice(routes, func(i, j int) bool { return routes[i].Path+routes[i].Method < routes[j].Path+routes[j].Method })
	seen := map[string]bool{}
	cells := 0
	for _, rt := range routes {
		key := rt.Method + " " + rt.Path
		seen[key] = true
		allowed, ok := walkAllowed[key]
		if !ok {
			t.Errorf("%s: registered but not in walkAllowed: say who may call it (and add it to routeAccess)", key)
			continue
		}
		segs := strings.Split(rt.Path, "/")
		for i, s := range segs {
			switch {
			case s == ":id":
				segs[i] = idFor(rt.Path)
			case strings.HasPrefix(s, ":name") && strings.Contains(rt.Path, "prerequisites"):
				segs[i] = "image"
			case strings.HasPrefix(s, ":"):
				segs[i] = params[s]
			}
		}
		path := strings.Join(segs, "/")
		var body any
		if rt.Method != http.MethodGet {
			body = "{}"
		}
		for _, c := range walkCallers {
			cells++
			res := e.do(rt.Method, path, c.token, body)
			denied := res.status == http.StatusUnauthorized || res.status == http.StatusForbidden
			want := strings.IndexByte(allowed, c.letter) >= 0
			switch {
			case want && denied:
				t.Errorf("%s %s as %c: %d %s, want it allowed", rt.Method, path, c.letter, res.status, res.body)
			case !want && !denied:
				t.Errorf("%s %s as %c: %d %s, want 401/403", rt.Method, path, c.letter, res.status, res.body)
			case !want && c.letter == '-' && res.status != http.StatusUnauthorized:
				t.Errorf("%s %s anonymous: %d, want 401", rt.Method, path, res.status)
			case res.status >= 500:
				t.Errorf("%s %s as %c: %d %s", rt.Method, path, c.letter, res.status, res.body)
			}
		}
	}
	for key := range walkAllowed {
		if !seen[key] {
			t.Errorf("walkAllowed has %s, which no longer is a route", key)
		}
	}
	for key := range routeAccess {
		if !seen[key] {
			t.Errorf("routeAccess has %s, which no longer is a route", key)
		}
	}
	t.Logf("route × caller table: %d routes × %d callers = %d requests", len(routes), len(walkCallers), cells)

	// Lists: a submitter's hold its own project's rows only.
	lists := []struct {
		path    string
		project func(body []byte) ([]string, error)
	}{
		{"/v1/jobs", func(b []byte) ([]string, error) {
			var l JobList
			err := json.Unmarshal(b, &l)
			var out []string
			for _, j := range l.Jobs {
				out = append(out, j.Project)
			}
			return out, err
		}},
		{"/v1/reclaims", func(b []byte) ([]string, error) {
			var l ReclaimReport
			err := json.Unmarshal(b, &l)
			var out []string
			for _, x := range l.Reclaims {
				out = append(out, x.Project)
			}
			return out, err
		}},
		{"/v1/preemptions", func(b []byte) ([]string, error) {
			var l PreemptionList
			err := json.Unmarshal(b, &l)
			var out []string
			for range l.Preemptions {
				out = append(out, "vision") // the fixture's are all vision's jobs
			}
			return out, err
		}},
	}
	for _, l := range lists {
		for _, c := range []struct {
			token, project string
			atLeast        int
		}{{tokAlice, "vision", 1}, {tokBob, "speech", 0}, {tokOps, "", 1}} {
			res := e.do(http.MethodGet, l.path, c.token, nil)
			projects, err := l.project(res.body)
			if res.status != http.StatusOK || err != nil || len(projects) < c.atLeast {
				t.Errorf("GET %s as %s: %d %v %s, want ≥ %d rows", l.path, c.token, res.status, err, res.body, c.atLeast)
			}
			for _, pr := range projects {
				if c.project != "" && pr != c.project {
					t.Errorf("GET %s as %s: a row of project %s", l.path, c.token, pr)
				}
			}
		}
	}
	if res := e.do(http.MethodGet, "/v1/reports/queues?project=vision", tokBob, nil); res.status != http.StatusForbidden {
		t.Errorf("speech's queue report of project vision: %d, want 403", res.status)
	}

	// Every denial was audited (coalesced per caller, route and status), and
	// no audit row holds a token.
	var denials int
	if err := e.store.Pool().QueryRow(ctx, `SELECT count(*) FROM audit_log WHERE action = 'access_denied'`).Scan(&denials); err != nil {
		t.Fatal(err)
	}
	if denials == 0 {
		t.Error("no access_denied audit entry")
	}
	for _, tok := range []string{tokAlice, tokBob, tokOps, tokAdmin, "tok-agent-1", "tok-agent-2"} {
		var n int
		if err := e.store.Pool().QueryRow(ctx, `SELECT count(*) FROM audit_log WHERE actor LIKE $1 OR subject LIKE $1 OR reason LIKE $1 OR evidence::text LIKE $1`,
			"%"+tok+"%").Scan(&n); err != nil || n != 0 {
			t.Errorf("token %s in %d audit rows (%v)", tok, n, err)
		}
	}
	t.Logf("%d access_denied audit entries", denials)
}
