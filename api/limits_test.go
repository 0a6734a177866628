package api

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/gpugov/gpugov/store"
)

// TestRateLimitPerToken: a token over its burst is 429 with Retry-After
// (whole seconds) while another token is still served; after the wait it
// is served again.
func TestRateLimitPerToken(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t, WithLimits(Limits{RatePerSecond: 0.5, RateBurst: 3}))
	now := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	e.server.now = func() time.Time { return now }
	e.server.limiter.now = e.server.now
	for i := range 3 {
		if r := e.do(http.MethodGet, "/v1/queues", tokAlice, nil); r.status != http.StatusOK {
			t.Fatalf("request %d: %d %s", i, r.status, r.body)
		}
	}
	r := e.do(http.MethodGet, "/v1/queues", tokAlice, nil)
	if r.status != http.StatusTooManyRequests || r.header.Get("Retry-After") != "2" || r.apiError(t).Code != CodeRateLimited ||
		!strings.Contains(r.apiError(t).Message, "0.5 requests/s (burst 3)") {
		t.Fatalf("over the burst: %d Retry-After %q %s", r.status, r.header.Get("Retry-After"), r.body)
	}
	if r := e.do(http.MethodGet, "/v1/queues", tokBob, nil); r.status != http.StatusOK {
		t.Fatalf("another token: %d, want its own bucket", r.status)
	}
	now = now.Add(2 * time.Second)
	if r := e.do(http.MethodGet, "/v1/queues", tokAlice, nil); r.status != http.StatusOK {
		t.Fatalf("after Retry-After: %d %s", r.status, r.body)
	}
	// Unknown tokens share one bucket: the guesses are 429 once it is empty.
	statuses := map[int]int{}
	for i := range 5 {
		statuses[e.do(http.MethodGet, "/v1/queues", "guess-"+strconv.Itoa(i), nil).status]++
	}
	if statuses[http.StatusUnauthorized] != 3 || statuses[http.StatusTooManyRequests] != 2 {
		t.Fatalf("unknown tokens: %v, want 3 × 401 then 429", statuses)
	}
}

// TestBodyAndHeaderLimits: a body over the limit is 413 naming it — by its
// Content-Length, or once read when chunked — and headers over theirs 431,
// on a public route too; nothing is stored.
func TestBodyAndHeaderLimits(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t, WithLimits(Limits{MaxBodyBytes: 1024, MaxHeaderBytes: 2048}))
	before := e.counts()
	big := `{"queue": "train", "x": "` + strings.Repeat("a", 2000) + `"}`
	r := e.do(http.MethodPost, "/v1/jobs", tokAlice, big)
	if r.status != http.StatusRequestEntityTooLarge || !strings.Contains(r.apiError(t).Message, "1024 bytes") {
		t.Fatalf("Content-Length over the limit: %d %s", r.status, r.body)
	}
	req := httptest.NewRequest(http.MethodPost, "/v1/jobs", io.MultiReader(strings.NewReader(big)))
	req.ContentLength = -1 // chunked: only reading finds the size
	req.Header.Set("Authorization", "Bearer "+tokAlice)
	rec := httptest.NewRecorder()
	e.server.Handler().ServeHTTP(rec, req)
	if rec.Code != http.StatusRequestEntityTooLarge || !strings.Contains(rec.Body.String(), "1024 bytes") {
		t.Fatalf("chunked body over the limit: %d %s", rec.Code, rec.Body)
	}
	for _, path := range []string{"/v1/queues", "/healthz"} {
		r := e.do(http.MethodGet, path, tokAlice, nil, "X-Padding", strings.Repeat("p", 3000))
		if r.status != http.StatusRequestHeaderFieldsTooLarge || !strings.Contains(r.apiError(t).Message, "the limit is 2048 bytes") {
			t.Fatalf("%s with large headers: %d %s", path, r.status, r.body)
		}
	}
	if r := e.do(http.MethodGet, "/v1/queues", tokAlice, nil); r.status != http.StatusOK {
		t.Fatalf("a request within the limits: %d", r.status)
	}
	if after := e.counts(); after["jobs"] != before["jobs"] {
		t.Fatalf("refused bodies stored something: %v → %v", before, after)
	}
}

// TestDenialsCoalesced: a flood of denials of one caller and route writes
// one access_denied entry per DenialWindow; the next one carries the count
// suppressed; many callers together are capped by DenialBurst.
func TestDenialsCoalesced(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t)
	now := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	e.server.now = func() time.Time { return now }
	e.server.limiter.now = e.server.now
	count := func(actor string) (int, float64) {
		var n int
		var suppressed float64
		err := e.store.Pool().QueryRow(context.Background(), `SELECT count(*), coalesce(max((evidence->>'suppressed')::float8), 0)
			FROM audit_log WHERE action = $1 AND actor = $2`, store.AuditAccessDenied, actor).Scan(&n, &suppressed)
		if err != nil {
			t.Fatal(err)
		}
		return n, suppressed
	}
	for range 50 {
		if r := e.do(http.MethodGet, "/v1/audit", tokAlice, nil); r.status != http.StatusForbidden {
			t.Fatalf("%d", r.status)
		}
		if r := e.do(http.MethodGet, "/v1/audit", "", nil); r.status != http.StatusUnauthorized {
			t.Fatalf("%d", r.status)
		}
	}
	if n, _ := count("alice"); n != 1 {
		t.Fatalf("alice's 50 denials: %d entries, want 1", n)
	}
	if n, _ := count("anonymous"); n != 1 {
		t.Fatalf("50 anonymous denials: %d entries, want 1", n)
	}
	now = now.Add(DenialWindow)
	e.do(http.MethodGet, "/v1/audit", tokAlice, nil)
	if n, suppressed := count("alice"); n != 2 || suppressed != 49 {
		t.Fatalf("after the window: %d entries, suppressed %g; want 2 and 49", n, suppressed)
	}
	d := newDenialAuditor()
	written := 0
	for i := range 1000 {
		if ok, _ := d.admit(denialKey{actor: "unknown-token", route: "GET /v1/x" + strconv.Itoa(i), status: 401}, false, now); ok {
			written++
		}
	}
	if written != DenialBurst {
		t.Fatalf("1000 distinct callers at once: %d entries, want the burst %d", written, DenialBurst)
	}
	// The budget is spent, but an authenticated denial still gets its entry.
	if ok, _ := d.admit(denialKey{actor: "alice", route: "GET /v1/audit", status: 403}, true, now); !ok {
		t.Fatal("an authenticated denial after an anonymous flood was not written")
	}
}

// TestStoredTokens: a token made as `gpugov token create` does (only its
// digest stored) authenticates through WithTokenLookup until it is
// revoked; an agent's carries its node.
func TestStoredTokens(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t)
	e.server = New(StoreFrom(e.store), e.wf, testTokens(t), WithTokenLookup(StoreTokens(e.store)), WithLogger(e.server.log))
	ctx := context.Background()
	tok, err := NewToken()
	if err != nil {
		t.Fatal(err)
	}
	d := DigestToken(tok)
	row, err := e.store.CreateAPIToken(ctx, store.APIToken{Digest: d[:], Name: "carol", Project: "vision", Role: "submitter"}, "test")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.store.CreateAPIToken(ctx, store.APIToken{Digest: d[:], Name: "again", Project: "vision", Role: "submitter"}, "test"); err == nil {
		t.Fatal("a second row of one digest was stored")
	}
	var stored int
	if err := e.store.Pool().QueryRow(ctx, `SELECT count(*) FROM api_tokens WHERE position($1::bytea in digest) > 0 OR name = $2`,
		[]byte(tok), tok).Scan(&stored); err != nil || stored != 0 {
		t.Fatalf("the token itself is stored: %d %v", stored, err)
	}
	var j Job
	r := e.submit(tok, validSpec(), "")
	if r.status != http.StatusCreated {
		t.Fatalf("submit with a stored token: %d %s", r.status, r.body)
	}
	r.decode(t, &j)
	if j.Project != "vision" {
		t.Fatalf("job of project %s", j.Project)
	}
	if r := e.do(http.MethodGet, "/v1/audit", tok, nil); r.status != http.StatusForbidden {
		t.Fatalf("a stored submitter token reading the audit log: %d", r.status)
	}
	if ok, err := e.store.RevokeAPIToken(ctx, row.ID, "test", "left", time.Now()); !ok || err != nil {
		t.Fatalf("revoke: %v %v", ok, err)
	}
	if ok, err := e.store.RevokeAPIToken(ctx, row.ID, "test", "again", time.Now()); ok || err != nil {
		t.Fatalf("second revoke: %v %v", ok, err)
	}
	if r := e.do(http.MethodGet, "/v1/jobs/"+j.ID, tok, nil); r.status != http.StatusUnauthorized {
		t.Fatalf("a revoked token: %d, want 401", r.status)
	}
	if _, err := e.store.CreateAPIToken(ctx, store.APIToken{Digest: make([]byte, 32), Name: "a", Project: "p", Role: "agent"}, "test"); err == nil {
		t.Fatal("an agent token without a node was stored")
	}
	ts, err := e.store.ListAPITokens(ctx)
	if err != nil || len(ts) != 1 || ts[0].RevokedAt == nil {
		t.Fatalf("list: %+v %v", ts, err)
	}
}

// countingLookup is a TokenLookup that knows no token and counts the lookups.
type countingLookup struct{ n atomic.Int64 }

func (l *countingLookup) LookupToken(context.Context, []byte) (Principal, bool, error) {
	l.n.Add(1)
	return Principal{}, false, nil
}

// TestUnknownTokensLimitedBeforeLookup: a flood of guessed tokens from one
// address costs at most the burst in store lookups; then it is 429 with
// Retry-After before the store is asked. Another address still gets its
// guesses looked up, and a valid token from the flooding address is served.
func TestUnknownTokensLimitedBeforeLookup(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t)
	lookups := &countingLookup{}
	now := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	e.server = New(StoreFrom(e.store), e.wf, testTokens(t), WithTokenLookup(lookups), WithLogger(e.server.log),
		WithLimits(Limits{RatePerSecond: 0.5, RateBurst: 3}))
	e.server.now = func() time.Time { return now }
	e.server.limiter.now, e.server.guesses.now = e.server.now, e.server.now
	from := func(addr, token string) *httptest.ResponseRecorder {
		req := httptest.NewRequest(http.MethodGet, "/v1/queues", nil)
		req.RemoteAddr = addr
		req.Header.Set("Authorization", "Bearer "+token)
		rec := httptest.NewRecorder()
		e.server.Handler().ServeHTTP(rec, req)
		return rec
	}
	statuses := map[int]int{}
	for i := range 50 {
		rec := from("198.51.100.7:4000", "guess-"+strconv.Itoa(i))
		statuses[rec.Code]++
		if rec.Code == http.StatusTooManyRequests && rec.Header().Get("Retry-After") == "" {
			t.Fatalf("429 without Retry-After")
		}
	}
	if statuses[http.StatusUnauthorized] != 3 || statuses[http.StatusTooManyRequests] != 47 || lookups.n.Load() != 3 {
		t.Fatalf("50 guesses from one address: %v, %d lookups; want 3 × 401, 47 × 429 and 3 lookups", statuses, lookups.n.Load())
	}
	if rec := from("198.51.100.7:4001", tokAlice); rec.Code != http.StatusOK {
		t.Fatalf("a valid token from the flooding address: %d %s", rec.Code, rec.Body)
	}
	// The shared unknown-token limiter is spent, but the other address's
	// guess is looked up (and answered 429 by that shared limiter).
	if rec := from("203.0.113.9:5000", "guess-other"); rec.Code != http.StatusTooManyRequests || lookups.n.Load() != 4 {
		t.Fatalf("a guess from another address: %d, %d lookups; want it looked up", rec.Code, lookups.n.Load())
	}
	now = now.Add(2 * time.Second) // one guess back
	if rec := from("198.51.100.7:4000", "guess-later"); lookups.n.Load() != 5 {
		t.Fatalf("after Retry-After: %d, %d lookups; want the guess looked up", rec.Code, lookups.n.Load())
	}
}

// TestAuthenticatedDenialAfterAnonymousFlood: anonymous denials that spent
// the shared budget do not keep a real cross-project 403 out of the audit
// log, and its reason, which echoes the request's project, is cut to
// DenialReasonBytes.
func TestAuthenticatedDenialAfterAnonymousFlood(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t)
	for i := range DenialBurst + 10 {
		if r := e.do(http.MethodGet, "/v1/queues?n="+strconv.Itoa(i), "guess-"+strconv.Itoa(i), nil); r.status != http.StatusUnauthorized && r.status != http.StatusTooManyRequests {
			t.Fatalf("guess %d: %d", i, r.status)
		}
	}
	// Anonymous denials of many routes spend the budget.
	routes := []string{"/v1/jobs", "/v1/queues", "/v1/audit", "/v1/reclaims", "/v1/preemptions", "/v1/notifications", "/v1/experiments", "/v1/policies"}
	for range 10 {
		for _, rt := range routes {
			e.do(http.MethodGet, rt, "", nil)
		}
	}
	if e.server.denials.global.TokensAt(e.server.now()) >= 1 {
		t.Skip("the anonymous requests did not spend the denial budget")
	}
	long := strings.Repeat("p", 2000)
	if r := e.do(http.MethodGet, "/v1/notifications?project="+long, tokAlice, nil); r.status != http.StatusForbidden {
		t.Fatalf("alice reading another project's notifications: %d %s", r.status, r.body)
	}
	var n int
	var reason string
	if err := e.store.Pool().QueryRow(context.Background(), `SELECT count(*), coalesce(max(reason), '') FROM audit_log
		WHERE action = $1 AND actor = 'alice'`, store.AuditAccessDenied).Scan(&n, &reason); err != nil {
		t.Fatal(err)
	}
	if n != 1 {
		t.Fatalf("alice's cross-project 403 after the flood: %d entries, want 1", n)
	}
	if len(reason) > DenialReasonBytes || !strings.HasSuffix(reason, "…") || !strings.Contains(reason, "may not read notifications") {
		t.Fatalf("reason of %d bytes %q: want at most %d, cut with …", len(reason), reason[:min(len(reason), 80)], DenialReasonBytes)
	}
}

// TestCapReason: a reason is cut at a UTF-8 boundary within the cap.
func TestCapReason(t *testing.T) {
	if got := capReason("short", 512); got != "short" {
		t.Fatalf("short: %q", got)
	}
	s := strings.Repeat("é", 400) // 800 bytes
	got := capReason(s, 512)
	if len(got) > 512 || !utf8.ValidString(got) || !strings.HasSuffix(got, "…") {
		t.Fatalf("cut to %d bytes, valid %v", len(got), utf8.ValidString(got))
	}
}
