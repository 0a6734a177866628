package console

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpugov/gpugov/api"
	"github.com/gpugov/gpugov/internal/experiment"
	"github.com/gpugov/gpugov/internal/governance"
	"github.com/gpugov/gpugov/internal/policy"
	"github.com/gpugov/gpugov/internal/queuereport"
	"github.com/gpugov/gpugov/internal/scheduling"
	"github.com/gpugov/gpugov/internal/temporalx"
	"github.com/gpugov/gpugov/internal/vocab"
	"github.com/gpugov/gpugov/store"
	"github.com/gpugov/gpugov/store/storetest"
)

// Test tokens, as the API's tests name them.
const (
	tokAlice = "tok-alice" // submitter, project vision
	tokBob   = "tok-bob"   // submitter, project speech
	tokOps   = "tok-ops"   // operator
	tokAdmin = "tok-admin" // admin
	tokAgent = "tok-agent" // agent of node-1
)

// workflows stands for Temporal, which the API reaches only through its
// Workflows interfaces (tested against a real dev server in workflows/).
type workflows struct {
	mu        sync.Mutex
	decisions []string
}

func (*workflows) StartJob(context.Context, string, temporalx.JobAttributes) error { return nil }
func (*workflows) CancelJob(context.Context, string, temporalx.JobAttributes, string, string) error {
	return nil
}
func (*workflows) NotifySubmitted(context.Context, string) error                          { return nil }
func (*workflows) StartExperiment(context.Context, string) error                          { return nil }
func (*workflows) SignalExperiment(context.Context, string, string, string, string) error { return nil }
func (w *workflows) DecideReclaim(_ context.Context, allocationID, signal, actor, _ string) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.decisions = append(w.decisions, signal+" "+allocationID+" "+actor)
	return nil
}

// fixture is a console over a real store in PostgreSQL holding, in pool
// a100-east (two A100s): a running checkpointable vision job (victim) and a
// running one whose allocation is being reclaimed (failed), a waiting
// delivery job a would-preempt record is for (trigger), a waiting 2-GPU
// vision job with a prerequisite not ready (waiting), and a waiting speech
// job (bobs).
type fixture struct {
	st                               *store.Store
	wf                               *workflows
	handler                          http.Handler
	victim, failed, trigger, waiting *store.Job
	bobs                             *store.Job
	preemption                       *store.PreemptionRecord
	reclaim                          *store.Reclaim
}

var testPools = []scheduling.Pool{{
	Name: "a100-east", Available: true, Stage: vocab.StageObserve,
	Nodes: []scheduling.Node{{
		Name: "node-1", CPUMilli: 64000, MemoryMiB: 512000, Schedulable: true,
		GPUs: []scheduling.GPU{
			{UUID: "GPU-aaaa", Model: "A100-SXM4-80GB", MemoryMiB: 81920, NVLinkDomain: "nv0", Healthy: true},
			{UUID: "GPU-bbbb", Model: "A100-SXM4-80GB", MemoryMiB: 81920, NVLinkDomain: "nv0", Healthy: true},
		},
	}},
}}

var testQueues = []scheduling.Queue{
	{Name: "train", Tier: vocab.TierStandard, ServiceShare: 1, MaxWait: 2 * time.Hour},
	{Name: "delivery", Tier: vocab.TierKeyProject, ServiceShare: 1, MaxWait: 30 * time.Minute},
}

func newFixture(t *testing.T, opts Options) *fixture {
	t.Helper()
	st, _ := storetest.NewStore(t, storetest.Fixture{Pools: testPools, Queues: testQueues})
	toks, err := api.NewTokens(map[string]api.Principal{
		tokAlice: {Name: "alice", Project: "vision", Role: vocab.RoleSubmitter},
		tokBob:   {Name: "bob", Project: "speech", Role: vocab.RoleSubmitter},
		tokOps:   {Name: "olga", Project: "platform", Role: vocab.RoleOperator},
		tokAdmin: {Name: "root", Project: "platform", Role: vocab.RoleAdmin},
		tokAgent: {Name: "agent-1", Project: "platform", Role: vocab.RoleAgent, Node: "node-1"},
	})
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{st: st, wf: &workflows{}}
	discard := slog.New(slog.NewTextHandler(io.Discard, nil))
	srv := api.New(api.StoreFrom(st), f.wf, toks, api.WithLogger(discard))
	if opts.Logger == nil {
		opts.Logger = discard
	}
	c, err := New(srv, st, opts)
	if err != nil {
		t.Fatal(err)
	}
	f.handler = Mount(c, srv.Handler())
	ctx := context.Background()
	mk := func(project, queue string, tier vocab.Tier, gpus int, rec scheduling.RecoveryEvidence, pre ...scheduling.Prerequisite) *store.Job {
		j, _, err := st.CreateJob(ctx, &store.NewJob{Project: project, Queue: queue, Tier: tier,
			Request: scheduling.ResourceRequest{GPUs: gpus, Pool: "a100-east"}, Recovery: rec, RunSeconds: 100, Prerequisites: pre})
		if err != nil {
			t.Fatal(err)
		}
		return j
	}
	f.victim = mk("vision", "train", vocab.TierStandard, 1, scheduling.RecoveryEvidence{Checkpointable: true, CheckpointIntervalSeconds: 60})
	f.failed = mk("vision", "train", vocab.TierStandard, 1, scheduling.RecoveryEvidence{})
	f.trigger = mk("vision", "delivery", vocab.TierKeyProject, 1, scheduling.RecoveryEvidence{})
	f.waiting = mk("vision", "train", vocab.TierStandard, 2, scheduling.RecoveryEvidence{},
		scheduling.Prerequisite{Name: "dataset", Ready: false, Message: "copying"})
	f.bobs = mk("speech", "train", vocab.TierStandard, 1, scheduling.RecoveryEvidence{})
	time.Sleep(20 * time.Millisecond) // the waits last a measurable time
	now := time.Now()
	busy := func(j *store.Job) scheduling.WaitStatus {
		return scheduling.WaitStatus{JobID: j.ID, Reason: vocab.ReasonCapacityBusy, Detail: "needs GPUs; 0 of 2 free", ReEvaluate: "when a GPU is released"}
	}
	out, err := st.ApplyCycle(ctx, "c1", &scheduling.Result{PolicyVersion: "t", At: now, Placements: []scheduling.Placement{
		{JobID: f.victim.ID, Pool: "a100-east", Node: "node-1", Rank: 1, GPUs: []scheduling.GPUShare{{UUID: "GPU-aaaa", Milli: 1000}}},
		{JobID: f.failed.ID, Pool: "a100-east", Node: "node-1", Rank: 2, GPUs: []scheduling.GPUShare{{UUID: "GPU-bbbb", Milli: 1000}}},
	}, Waiting: []scheduling.WaitStatus{busy(f.trigger), busy(f.waiting), busy(f.bobs)}}, now)
	if err != nil || len(out.Placed) != 2 {
		t.Fatalf("placements: %+v %v", out, err)
	}
	for _, p := range out.Placed {
		if _, err := st.MarkRunning(ctx, p.JobID, p.AllocationID, 0, now); err != nil {
			t.Fatal(err)
		}
	}
	prop := []scheduling.PreemptionProposal{{ForJobID: f.trigger.ID, Pool: "a100-east", Act: false, Reason: "would free GPU-aaaa",
		Victims: []scheduling.Victim{{JobID: f.victim.ID, AllocationID: out.Placed[0].AllocationID, GPUs: 1, EstimatedLossGPUSeconds: 75}}}}
	if _, err := st.ApplyCycle(ctx, "c2", &scheduling.Result{PolicyVersion: "t", At: now, Preemptions: prop}, now); err != nil {
		t.Fatal(err)
	}
	if _, err := st.RecordWouldPreempt(ctx, "c2", prop, now); err != nil {
		t.Fatal(err)
	}
	ps, err := st.ListPreemptions(ctx, store.PreemptionFilter{})
	if err != nil || len(ps) != 1 {
		t.Fatalf("preemptions %+v (%v), want one", ps, err)
	}
	f.preemption = &ps[0]
	ev := governance.Evidence{AllocationID: out.Placed[1].AllocationID, JobID: f.failed.ID, Project: "vision", Queue: "train",
		Pool: "a100-east", GPUs: 1, JobState: "running", GrantedAt: now}
	r, _, err := st.OpenReclaim(ctx, store.NewReclaim{Evidence: ev, Finding: governance.Finding{Class: vocab.ClassFailed, Basis: "run failed"},
		Decision: governance.ModeDecision{Mode: vocab.ModeNotify, Configured: vocab.ModeNotify, Stage: vocab.StageAutomate}, At: now})
	if err != nil {
		t.Fatal(err)
	}
	if f.reclaim, err = st.NoticeReclaim(ctx, r.ID, now.Add(time.Hour), now); err != nil {
		t.Fatal(err)
	}
	return f
}

// browser is a signed-in (or not) client: a cookie jar over an httptest server.
type browser struct {
	t   *testing.T
	srv *httptest.Server
	c   *http.Client
}

func (f *fixture) browser(t *testing.T, tlsServer bool) *browser {
	t.Helper()
	var srv *httptest.Server
	if tlsServer {
		srv = httptest.NewTLSServer(f.handler)
	} else {
		srv = httptest.NewServer(f.handler)
	}
	t.Cleanup(srv.Close)
	jar, _ := cookiejar.New(nil)
	c := srv.Client()
	c.Jar = jar
	c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	return &browser{t: t, srv: srv, c: c}
}

// page is one answer.
type answer struct {
	status int
	header http.Header
	body   string
}

func (b *browser) get(path string) answer {
	b.t.Helper()
	resp, err := b.c.Get(b.srv.URL + path)
	if err != nil {
		b.t.Fatal(err)
	}
	return readAnswer(b.t, resp)
}

func (b *browser) post(path string, form url.Values) answer {
	b.t.Helper()
	resp, err := b.c.PostForm(b.srv.URL+path, form)
	if err != nil {
		b.t.Fatal(err)
	}
	return readAnswer(b.t, resp)
}

func readAnswer(t *testing.T, resp *http.Response) answer {
	t.Helper()
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return answer{status: resp.StatusCode, header: resp.Header, body: string(data)}
}

var csrfField = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

// csrf returns the CSRF token of the first form on the page at path.
func (b *browser) csrf(path string) string {
	b.t.Helper()
	a := b.get(path)
	m := csrfField.FindStringSubmatch(a.body)
	if a.status != http.StatusOK || m == nil {
		b.t.Fatalf("GET %s: %d, no csrf field:\n%s", path, a.status, a.body)
	}
	return m[1]
}

// signIn signs in with token and returns the sign-in answer.
func (b *browser) signIn(token string) answer {
	b.t.Helper()
	return b.post("/ui/sign-in", url.Values{"token": {token}, "csrf": {b.csrf("/ui/sign-in")}, "next": {"/ui/overview"}})
}

func (f *fixture) signedIn(t *testing.T, token string) *browser {
	t.Helper()
	b := f.browser(t, false)
	if a := b.signIn(token); a.status != http.StatusSeeOther || a.header.Get("Location") != "/ui/overview" {
		t.Fatalf("sign in: %d %s %s", a.status, a.header.Get("Location"), a.body)
	}
	return b
}

func sessionCookie(t *testing.T, h http.Header) *http.Cookie {
	t.Helper()
	for _, line := range h.Values("Set-Cookie") {
		ck, err := http.ParseSetCookie(line)
		if err == nil && ck.Name == SessionCookie {
			return ck
		}
	}
	return nil
}

func mustContain(t *testing.T, what string, a answer, want ...string) {
	t.Helper()
	for _, w := range want {
		if !strings.Contains(a.body, w) {
			t.Errorf("%s: no %q in the page (%d):\n%s", what, w, a.status, a.body)
			return
		}
	}
}

func mustNotContain(t *testing.T, what string, a answer, not ...string) {
	t.Helper()
	for _, w := range not {
		if strings.Contains(a.body, w) {
			t.Errorf("%s: %q in the page, must not be", what, w)
		}
	}
}

// TestSignInSessionCookie: the token form signs in; the cookie is
// HttpOnly, SameSite=Strict, path /ui/, Secure only under TLS; the store
// keeps the SHA-256 of the session ID, never the ID; a bad token, a
// missing sign-in CSRF value and an agent token are refused without a
// session; pages without a session redirect to the form.
func TestSignInSessionCookie(t *testing.T) {
	t.Parallel()
	f := newFixture(t, Options{})
	for _, tlsServer := range []bool{false, true} {
		b := f.browser(t, tlsServer)
		if a := b.get("/ui/overview"); a.status != http.StatusSeeOther || !strings.HasPrefix(a.header.Get("Location"), "/ui/sign-in?next=") {
			t.Fatalf("overview without a session: %d %q, want a redirect to the sign-in form", a.status, a.header.Get("Location"))
		}
		a := b.signIn(tokAlice)
		ck := sessionCookie(t, a.header)
		if a.status != http.StatusSeeOther || ck == nil {
			t.Fatalf("sign in: %d, cookie %v: %s", a.status, ck, a.body)
		}
		if !ck.HttpOnly || ck.SameSite != http.SameSiteStrictMode || ck.Path != "/ui/" || ck.Secure != tlsServer || ck.MaxAge != int(SessionTTL.Seconds()) {
			t.Errorf("TLS %v: cookie %+v, want HttpOnly, SameSite=Strict, Path=/ui/, Secure=%v, Max-Age %d", tlsServer, ck, tlsServer, int(SessionTTL.Seconds()))
		}
		d := sha256.Sum256([]byte(ck.Value))
		var n, plain int
		ctx := context.Background()
		if err := f.st.Pool().QueryRow(ctx, `SELECT count(*) FROM console_sessions WHERE id_digest = $1 AND expires_at > now()`, d[:]).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if err := f.st.Pool().QueryRow(ctx, `SELECT count(*) FROM console_sessions WHERE id_digest = $1 OR token_digest = $1`, []byte(ck.Value)).Scan(&plain); err != nil {
			t.Fatal(err)
		}
		if n != 1 || plain != 0 {
			t.Errorf("sessions with the ID's digest %d (want 1), with the ID itself %d (want 0)", n, plain)
		}
		if a := b.get("/ui/overview"); a.status != http.StatusOK {
			t.Fatalf("overview after sign-in: %d %s", a.status, a.body)
		}
	}
	b := f.browser(t, false)
	for _, c := range []struct {
		name, token string
		forged      bool
		status      int
	}{
		{"unknown token", "tok-nobody", false, http.StatusUnauthorized},
		{"no sign-in csrf", tokAlice, true, http.StatusForbidden},
		{"agent token", tokAgent, false, http.StatusForbidden},
		{"empty token", "", false, http.StatusBadRequest},
	} {
		csrf := b.csrf("/ui/sign-in")
		if c.forged {
			csrf = "forged"
		}
		a := b.post("/ui/sign-in", url.Values{"token": {c.token}, "csrf": {csrf}})
		if a.status != c.status || sessionCookie(t, a.header) != nil {
			t.Errorf("%s: %d, session cookie %v; want %d and no session", c.name, a.status, sessionCookie(t, a.header), c.status)
		}
		mustContain(t, c.name, a, `data-testid="sign-in-error"`)
	}
	if a := b.post("/ui/sign-in", url.Values{"token": {tokAlice}, "csrf": {b.csrf("/ui/sign-in")}, "next": {"https://evil.example/"}}); a.header.Get("Location") != "/ui/overview" {
		t.Errorf("sign-in with an outside next: redirect %q, want /ui/overview", a.header.Get("Location"))
	}
}

// TestSignOutAndCSRF: a form posted without the session's CSRF token is
// 403 and changes nothing; sign-out with it deletes the session row and the
// cookie, after which the old cookie no longer works.
func TestSignOutAndCSRF(t *testing.T) {
	t.Parallel()
	f := newFixture(t, Options{})
	b := f.signedIn(t, tokAlice)
	if a := b.post("/ui/sign-out", url.Values{"csrf": {"wrong"}}); a.status != http.StatusForbidden {
		t.Fatalf("sign-out with a wrong csrf: %d", a.status)
	}
	if a := b.post("/ui/jobs/"+f.waiting.ID+"/hold", url.Values{"reason": {"forged"}}); a.status != http.StatusForbidden {
		t.Fatalf("hold without csrf: %d, want 403", a.status)
	}
	if j, _ := f.st.GetJob(context.Background(), f.waiting.ID); j.Held {
		t.Fatal("a hold without the CSRF token was applied")
	}
	other := f.signedIn(t, tokAlice) // another session's token is no good either
	if a := b.post("/ui/jobs/"+f.waiting.ID+"/hold", url.Values{"csrf": {other.csrf("/ui/overview")}}); a.status != http.StatusForbidden {
		t.Fatalf("hold with another session's csrf: %d, want 403", a.status)
	}
	a := b.post("/ui/sign-out", url.Values{"csrf": {b.csrf("/ui/overview")}})
	if ck := sessionCookie(t, a.header); a.status != http.StatusSeeOther || ck == nil || ck.MaxAge >= 0 {
		t.Fatalf("sign-out: %d, cookie %+v, want 303 deleting the cookie", a.status, ck)
	}
	var n int
	if err := f.st.Pool().QueryRow(context.Background(), `SELECT count(*) FROM console_sessions`).Scan(&n); err != nil || n != 1 {
		t.Fatalf("%d sessions left (%v), want only the other one", n, err)
	}
	if a := b.get("/ui/overview"); a.status != http.StatusSeeOther {
		t.Fatalf("overview after sign-out: %d, want a redirect to sign in", a.status)
	}
	if a := b.get("/ui/fragment/waiting-jobs"); a.status != http.StatusUnauthorized {
		t.Fatalf("fragment after sign-out: %d, want 401", a.status)
	}
}

// TestOverviewPage: pools with GPU use, the waits per queue and tier, the
// reason-share chart with its verdict and the pool's stage and readiness,
// for an admin (every project) and a submitter (its own).
func TestOverviewPage(t *testing.T) {
	t.Parallel()
	f := newFixture(t, Options{})
	a := f.signedIn(t, tokAdmin).get("/ui/overview")
	if a.status != http.StatusOK {
		t.Fatalf("overview: %d %s", a.status, a.body)
	}
	mustContain(t, "admin overview", a, `data-testid="pool-table"`, `data-pool="a100-east"`,
		`<td class="num" data-testid="gpus-used">2</td>`, `<td class="num" data-testid="gpus-free">0</td>`,
		`data-testid="pool-stage">observe<`, `data-testid="wait-table"`, `data-queue="train" data-tier="standard"`,
		`<svg class="chart" data-testid="reason-share"`, `data-segment="capacity"`, `data-testid="main-problem"`, "main problem is capacity")
	mustNotContain(t, "admin overview", a, `data-chart="reason-share"`)
	s := f.signedIn(t, tokBob).get("/ui/overview")
	mustContain(t, "bob's overview", s, "You see project <strong>speech</strong> only", `<td class="num" data-testid="gpus-used">0</td>`)
	if a := f.signedIn(t, tokAdmin).get("/ui/overview?window=forever"); a.status != http.StatusBadRequest || !strings.Contains(a.body, `data-testid="error-field">window<`) {
		t.Errorf("bad window: %d, want 400 naming window", a.status)
	}
}

// TestQueuePage: the wait histogram of the standard tier has the started
// jobs with the objective marked, a tier with no start says so, the
// overlay is drawn, and the waiting jobs list holds the viewer's jobs only.
func TestQueuePage(t *testing.T) {
	t.Parallel()
	f := newFixture(t, Options{})
	b := f.signedIn(t, tokAdmin)
	a := b.get("/ui/queue?window=1h")
	if a.status != http.StatusOK {
		t.Fatalf("queue: %d %s", a.status, a.body)
	}
	mustContain(t, "queue page", a, `data-tier="standard"`, `<svg class="chart" data-testid="wait-histogram"`, `data-count="2"`,
		`data-testid="objective-marker"`, `data-testid="no-data" data-chart="wait-histogram"`, `data-testid="wait-overlay"`,
		`data-testid="waiting-jobs" data-refresh="/ui/fragment/waiting-jobs"`,
		`data-job="`+f.waiting.ID+`" data-reason="capacity_busy"`, `data-job="`+f.bobs.ID+`"`, "needs GPUs; 0 of 2 free")
	fr := b.get("/ui/fragment/waiting-jobs")
	mustContain(t, "fragment", fr, `data-job="`+f.bobs.ID+`"`)
	mustNotContain(t, "fragment", fr, "<html")
	alice := f.signedIn(t, tokAlice).get("/ui/fragment/waiting-jobs")
	mustContain(t, "alice's waiting jobs", alice, `data-job="`+f.waiting.ID+`"`)
	mustNotContain(t, "alice's waiting jobs", alice, f.bobs.ID)
	if a := b.get("/ui/queue?tier=gold"); a.status != http.StatusBadRequest {
		t.Errorf("unknown tier: %d, want 400", a.status)
	}
	if a := b.get("/ui/queue?before=yesterday"); a.status != http.StatusBadRequest {
		t.Errorf("bad before: %d, want 400", a.status)
	}
}

// TestJobPageTenancy: a submitter opens its own job's why page with its
// actions and the Temporal link, gets the 403 page for another project's
// job; an admin opens both.
func TestJobPageTenancy(t *testing.T) {
	t.Parallel()
	f := newFixture(t, Options{TemporalUI: "http://temporal.test:8233/"})
	alice := f.signedIn(t, tokAlice)
	a := alice.get("/ui/jobs/" + f.waiting.ID)
	if a.status != http.StatusOK {
		t.Fatalf("own job: %d %s", a.status, a.body)
	}
	mustContain(t, "alice's job", a, `data-testid="job-why"`, `data-testid="wait-reason">capacity_busy<`, "needs GPUs; 0 of 2 free",
		`data-testid="priority-parts"`, `<svg class="chart" data-testid="job-timeline"`, `data-testid="hold-button"`, `data-testid="cancel-button"`,
		`data-testid="amend-form"`, `data-prerequisite="dataset"`,
		`href="http://temporal.test:8233/namespaces/default/workflows/job%2F`+f.waiting.ID+`"`)
	forbidden := alice.get("/ui/jobs/" + f.bobs.ID)
	if forbidden.status != http.StatusForbidden {
		t.Fatalf("bob's job as alice: %d, want 403", forbidden.status)
	}
	mustContain(t, "403 page", forbidden, `data-testid="error-page" data-status="403"`, "may not access jobs of project")
	mustNotContain(t, "403 page", forbidden, "needs GPUs")
	if a := alice.get("/ui/jobs/j-nonexistent"); a.status != http.StatusNotFound && a.status != http.StatusBadRequest {
		t.Errorf("unknown job: %d, want the API's 404 or 400", a.status)
	}
	admin := f.signedIn(t, tokAdmin)
	for _, id := range []string{f.waiting.ID, f.bobs.ID, f.victim.ID} {
		if a := admin.get("/ui/jobs/" + id); a.status != http.StatusOK {
			t.Errorf("admin job %s: %d", id, a.status)
		}
	}
	mustContain(t, "running job", admin.get("/ui/jobs/"+f.victim.ID), `data-testid="preemption-row"`, "victim")
	list := alice.get("/ui/jobs")
	mustContain(t, "alice's jobs", list, `data-job="`+f.waiting.ID+`"`, `data-refresh="/ui/fragment/jobs?"`)
	mustNotContain(t, "alice's jobs", list, f.bobs.ID)
	// A query parameter a page does not read, or one given twice, is the
	// API's own 400 naming it (api.CheckQueryParams), not ignored; a filter
	// it passes on is checked by the API (422 naming it).
	for path, field := range map[string]string{
		"/ui/jobs?limit=abc": "limit", "/ui/fragment/jobs?limit=abc": "limit", "/ui/jobs?state=waiting&state=placed": "state",
		"/ui/overview?tier=standard": "tier", "/ui/jobs/" + f.waiting.ID + "?x=1": "x", "/ui/fragment/waiting-jobs?state=waiting": "state",
	} {
		a := alice.get(path)
		if a.status != http.StatusBadRequest || !strings.Contains(a.body, `data-testid="error-field">`+field+`<`) {
			t.Errorf("%s: %d, want 400 naming %s:\n%s", path, a.status, field, a.body)
		}
	}
	mustContain(t, "unknown page parameter", alice.get("/ui/jobs?limit=abc"), "GET /ui/jobs takes only project, queue, reason, state")
	if a := alice.get("/ui/jobs?queue=bogus"); a.status != http.StatusUnprocessableEntity || !strings.Contains(a.body, `data-testid="error-field">queue<`) {
		t.Errorf("/ui/jobs?queue=bogus: %d, want the API's 422 naming queue", a.status)
	}
	for _, ok := range []string{"/ui/jobs?state=waiting&queue=train", "/ui/jobs/" + f.waiting.ID + "?done=hold", "/ui/reclaims?done=keep", "/ui/queue?window=1h&tier=standard"} {
		if a := alice.get(ok); a.status != http.StatusOK {
			t.Errorf("%s: %d, want 200", ok, a.status)
		}
	}
}

// TestJobActions: hold and release through the console are applied (and
// audited with the token's name by the API); another project's submitter
// gets the API's 403; a prerequisite is marked ready; an amendment changes
// the request, a bad one is 400 naming the field.
func TestJobActions(t *testing.T) {
	t.Parallel()
	f := newFixture(t, Options{})
	ctx := context.Background()
	alice := f.signedIn(t, tokAlice)
	path := "/ui/jobs/" + f.waiting.ID
	a := alice.post(path+"/hold", url.Values{"csrf": {alice.csrf(path)}, "reason": {"wait for data"}})
	if a.status != http.StatusSeeOther || a.header.Get("Location") != path+"?done=hold" {
		t.Fatalf("hold: %d %q %s", a.status, a.header.Get("Location"), a.body)
	}
	if j, _ := f.st.GetJob(ctx, f.waiting.ID); !j.Held {
		t.Fatal("hold not applied")
	}
	var actor string
	if err := f.st.Pool().QueryRow(ctx, `SELECT actor FROM audit_log WHERE action = 'hold' AND subject = $1`, f.waiting.ID).Scan(&actor); err != nil || actor != "alice" {
		t.Errorf("hold audited by %q (%v), want alice", actor, err)
	}
	page := alice.get(path + "?done=hold")
	mustContain(t, "held job", page, `data-testid="action-done"`, `data-testid="release-button"`, `data-held="true"`)
	mustNotContain(t, "held job", page, `data-testid="hold-button"`)
	bob := f.signedIn(t, tokBob)
	if a := bob.post(path+"/release", url.Values{"csrf": {bob.csrf("/ui/overview")}}); a.status != http.StatusForbidden {
		t.Fatalf("bob releasing alice's job: %d, want 403", a.status)
	}
	if a := alice.post(path+"/release", url.Values{"csrf": {alice.csrf(path)}}); a.status != http.StatusSeeOther {
		t.Fatalf("release: %d %s", a.status, a.body)
	}
	if j, _ := f.st.GetJob(ctx, f.waiting.ID); j.Held {
		t.Fatal("release not applied")
	}
	if a := alice.post(path+"/prerequisites/dataset", url.Values{"csrf": {alice.csrf(path)}, "ready": {"true"}}); a.status != http.StatusSeeOther {
		t.Fatalf("prerequisite: %d %s", a.status, a.body)
	}
	if j, _ := f.st.GetJob(ctx, f.waiting.ID); len(j.Prerequisites) != 1 || !j.Prerequisites[0].Ready {
		t.Fatalf("prerequisite not marked ready: %+v", j.Prerequisites)
	}
	if a := alice.post(path+"/amend", url.Values{"csrf": {alice.csrf(path)}, "gpus": {"1"}}); a.status != http.StatusSeeOther {
		t.Fatalf("amend: %d %s", a.status, a.body)
	}
	if j, _ := f.st.GetJob(ctx, f.waiting.ID); j.Request.GPUs != 1 {
		t.Fatalf("amend not applied: %d GPUs", j.Request.GPUs)
	}
	if a := alice.post(path+"/amend", url.Values{"csrf": {alice.csrf(path)}, "gpus": {"two"}}); a.status != http.StatusBadRequest || !strings.Contains(a.body, `data-testid="error-field">gpus<`) {
		t.Fatalf("bad amend: %d, want 400 naming gpus", a.status)
	}
	if a := alice.post(path+"/explode", url.Values{"csrf": {alice.csrf(path)}}); a.status != http.StatusNotFound {
		t.Errorf("unknown action: %d, want 404", a.status)
	}
	if a := alice.post(path+"/cancel", url.Values{"csrf": {alice.csrf(path)}}); a.status != http.StatusSeeOther {
		t.Fatalf("cancel: %d %s", a.status, a.body)
	}
}

// TestGovernancePages: the preemption list and detail (five steps, loss),
// the reclaims with keep for the owner and confirm for operators (a keep
// reaches the reclaim's workflow), experiments (none: the no-data
// message) and policies (operators only, as the API).
func TestGovernancePages(t *testing.T) {
	t.Parallel()
	f := newFixture(t, Options{TemporalUI: "http://temporal.test:8233"})
	alice := f.signedIn(t, tokAlice)
	l := alice.get("/ui/preemptions")
	mustContain(t, "preemptions", l, `data-preemption="`+f.preemption.ID+`"`, "would_preempt", `data-refresh="/ui/fragment/preemptions?"`)
	d := alice.get("/ui/preemptions/" + f.preemption.ID)
	if d.status != http.StatusOK {
		t.Fatalf("preemption: %d %s", d.status, d.body)
	}
	mustContain(t, "preemption", d, `data-testid="preemption-timeline"`, `data-step="notify" data-done="false"`, `data-step="verify resume"`,
		`data-testid="effective-loss"`, "estimated 75 GPU-s")
	if a := f.signedIn(t, tokBob).get("/ui/preemptions/" + f.preemption.ID); a.status != http.StatusForbidden && a.status != http.StatusNotFound {
		t.Errorf("bob's view of vision's preemption: %d, want the API's refusal", a.status)
	}
	r := alice.get("/ui/reclaims")
	mustContain(t, "alice's reclaims", r, `data-reclaim="`+f.reclaim.ID+`"`, `data-testid="keep-button"`, "run failed")
	mustNotContain(t, "alice's reclaims", r, `data-testid="confirm-button"`)
	mustContain(t, "ops reclaims", f.signedIn(t, tokOps).get("/ui/reclaims"), `data-testid="confirm-button"`)
	mustNotContain(t, "bob's reclaims", f.signedIn(t, tokBob).get("/ui/reclaims"), f.reclaim.ID)
	if a := alice.post("/ui/reclaims/"+f.reclaim.ID+"/keep", url.Values{"csrf": {alice.csrf("/ui/reclaims")}, "reason": {"still needed"}}); a.status != http.StatusSeeOther {
		t.Fatalf("keep: %d %s", a.status, a.body)
	}
	f.wf.mu.Lock()
	decisions := append([]string(nil), f.wf.decisions...)
	f.wf.mu.Unlock()
	if len(decisions) != 1 || !strings.HasSuffix(decisions[0], " alice") {
		t.Errorf("reclaim decisions %v, want one keep by alice", decisions)
	}
	mustContain(t, "experiments", alice.get("/ui/experiments"), `data-testid="no-experiments"`)
	if a := alice.get("/ui/experiments/x-none"); a.status < 400 {
		t.Errorf("unknown experiment: %d", a.status)
	}
	if a := alice.get("/ui/policies"); a.status != http.StatusForbidden {
		t.Errorf("policies as a submitter: %d, want the API's 403", a.status)
	}
	if a := f.signedIn(t, tokOps).get("/ui/policies"); a.status != http.StatusOK {
		t.Errorf("policies as an operator: %d %s", a.status, a.body)
	}
	if a := alice.get("/ui/nowhere"); a.status != http.StatusNotFound {
		t.Errorf("unknown page: %d", a.status)
	}
	st := alice.get("/ui/static/refresh.js")
	if st.status != http.StatusOK || !strings.Contains(st.body, "data-refresh") {
		t.Errorf("refresh.js: %d", st.status)
	}
	if csp := st.header.Get("Content-Security-Policy"); !strings.Contains(csp, "script-src 'self'") {
		t.Errorf("CSP %q", csp)
	}
}

// TestPoliciesDiff: with a version applied over the stored default, the
// policies page lists both, newest (active) first, and shows their grouped
// diff by default and for ?diff=FROM..TO.
func TestPoliciesDiff(t *testing.T) {
	t.Parallel()
	f := newFixture(t, Options{})
	ctx := context.Background()
	p := policy.Default()
	if err := f.st.SavePolicyVersion(ctx, p.Hash(), p.Canonical()); err != nil {
		t.Fatal(err)
	}
	if err := f.st.ActivatePolicyVersion(ctx, p.Hash(), "serve", "loaded from policy.yaml"); err != nil {
		t.Fatal(err)
	}
	body, _ := json.Marshal(api.PolicyApply{Policy: "version: gpugov.policy/v1\naging: {cap_points: 4500}\n", Reason: "longer waits age further"})
	req := httptest.NewRequest(http.MethodPost, "/v1/policies", bytes.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+tokAdmin)
	rec := httptest.NewRecorder()
	f.handler.ServeHTTP(rec, req)
	if rec.Code != http.StatusOK {
		t.Fatalf("apply: %d %s", rec.Code, rec.Body)
	}
	var applied api.PolicyApplied
	if err := json.Unmarshal(rec.Body.Bytes(), &applied); err != nil {
		t.Fatal(err)
	}
	ops := f.signedIn(t, tokOps)
	a := ops.get("/ui/policies")
	mustContain(t, "policies", a, `data-hash="`+applied.Hash+`"`, `data-hash="`+p.Hash()+`"`, `data-testid="policy-diff"`, "aging.cap_points", "4500")
	if strings.Index(a.body, applied.Hash) > strings.Index(a.body, `data-hash="`+p.Hash()) {
		t.Error("the active version is not listed first")
	}
	mustContain(t, "explicit diff", ops.get("/ui/policies?diff="+p.Hash()+".."+applied.Hash), "aging.cap_points")
	if a := ops.get("/ui/policies?diff=zz..yy"); a.status != http.StatusUnprocessableEntity && a.status != http.StatusBadRequest {
		t.Errorf("bad diff: %d, want the API's 4xx", a.status)
	}
}

// adminPost sends a JSON body to the API as the admin and decodes the 2xx answer into out.
func (f *fixture) adminPost(t *testing.T, path string, body, out any) {
	t.Helper()
	data, _ := json.Marshal(body)
	req := httptest.NewRequest(http.MethodPost, path, bytes.NewReader(data))
	req.Header.Set("Authorization", "Bearer "+tokAdmin)
	rec := httptest.NewRecorder()
	f.handler.ServeHTTP(rec, req)
	if rec.Code < 200 || rec.Code > 299 {
		t.Fatalf("POST %s: %d %s", path, rec.Code, rec.Body)
	}
	if err := json.Unmarshal(rec.Body.Bytes(), out); err != nil {
		t.Fatal(err)
	}
}

// TestExperimentPages: an experiment created through the API and taken
// through the store steps its workflow takes (baseline, switch, verdict)
// shows in the list, and its page has the timeline, the rollback checks
// with their values, the before/after chart and the verdict; a submitter
// reads it too (experiments are read-only to submitters).
func TestExperimentPages(t *testing.T) {
	t.Parallel()
	f := newFixture(t, Options{TemporalUI: "http://temporal.test:8233"})
	ctx := context.Background()
	p := policy.Default()
	if err := f.st.SavePolicyVersion(ctx, p.Hash(), p.Canonical()); err != nil {
		t.Fatal(err)
	}
	if err := f.st.ActivatePolicyVersion(ctx, p.Hash(), "serve", "test baseline"); err != nil {
		t.Fatal(err)
	}
	var x api.Experiment
	f.adminPost(t, "/v1/experiments", map[string]any{
		"name": "aging-step-200", "hypothesis": "faster aging shortens the standard tier's longest wait",
		"candidate": map[string]any{"policy": "version: gpugov.policy/v1\naging: {enabled: true, step_points: 200}\n"},
		"scope":     map[string]any{"pools": []string{"a100-east"}},
		"window_s":  3600,
		"expected":  map[string]any{"metric": "longest_wait_s", "tier": "standard", "direction": "decrease", "change": 0.3},
		"rollback":  []any{map[string]any{"name": "standard P95", "metric": "wait_p95_s", "tier": "standard", "above_baseline_factor": 1.2}},
	}, &x)
	now := time.Now().UTC()
	if _, err := f.st.RecordExperimentBaseline(ctx, x.ID, &experiment.Measurement{Window: queuereport.Window{From: now.Add(-time.Hour), To: now}}, now); err != nil {
		t.Fatal(err)
	}
	if _, err := f.st.SwitchExperiment(ctx, x.ID, now); err != nil {
		t.Fatal(err)
	}
	v := func(f float64) *float64 { return &f }
	out := &experiment.Outcome{Verdict: vocab.VerdictKept, Reason: "standard tier longest_wait_s 100 s → 60 s (−40 %): met",
		Checks: []experiment.ConditionResult{{Condition: experiment.Condition{Name: "standard P95", Metric: "wait_p95_s"},
			Value: v(30), Baseline: v(28), Threshold: v(33.6), Text: "standard P95: 30 s ≤ 33.6 s"}},
		Rows: []experiment.Row{{Metric: "longest_wait_s", Target: experiment.Target{Tier: "standard"}, Before: v(100), After: v(60)}}}
	if _, err := f.st.FinishExperiment(ctx, x.ID, out, now.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	alice := f.signedIn(t, tokAlice)
	mustContain(t, "experiments", alice.get("/ui/experiments"), `data-experiment="`+x.ID+`"`, "kept")
	a := alice.get("/ui/experiments/" + x.ID)
	if a.status != http.StatusOK {
		t.Fatalf("experiment: %d %s", a.status, a.body)
	}
	mustContain(t, "experiment", a, `data-testid="experiment-verdict">kept<`, `<svg class="chart" data-testid="experiment-timeline"`,
		`data-testid="experiment-checks"`, "standard P95: 30 s ≤ 33.6 s", "33.60", `<svg class="chart" data-testid="experiment-chart"`,
		"longest_wait_s (standard)", `data-testid="temporal-link"`)
}
