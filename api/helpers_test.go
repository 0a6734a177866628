package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/gpugov/gpugov/internal/scheduling"
	"github.com/gpugov/gpugov/internal/temporalx"
	"github.com/gpugov/gpugov/internal/vocab"
	"github.com/gpugov/gpugov/store"
	"github.com/gpugov/gpugov/store/storetest"
)

// recordingWorkflows is the one fake of these tests: it stands for Temporal,
// which the API reaches only through the Workflows interface and which is
// tested against a real dev server in workflows/ (client_test.go). It
// records calls and can be told to fail, which a real Temporal
// server cannot be made to do on cue (needed for the 202 paths).
type recordingWorkflows struct {
	mu        sync.Mutex
	started   []string
	attrs     []temporalx.JobAttributes
	cancelled []string
	notified  int
	startErr  error
	cancelErr error
	drills    []string // preemption IDs of the drills started
	drillErr  error
	// startHook, when set, runs at the start of every StartJob, outside the
	// lock (a test blocks a start there to hold it in flight).
	startHook func(jobID string)
	// cancelHook, when set, runs at the start of every CancelJob, outside
	// the lock (a test makes the signal slow there).
	cancelHook func(jobID string)
}

func (w *recordingWorkflows) StartJob(_ context.Context, jobID string, attrs temporalx.JobAttributes) error {
	w.mu.Lock()
	hook := w.startHook
	w.mu.Unlock()
	if hook != nil {
		hook(jobID)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.startErr != nil {
		return w.startErr
	}
	w.started = append(w.started, jobID)
	w.attrs = append(w.attrs, attrs)
	return nil
}

func (w *recordingWorkflows) CancelJob(_ context.Context, jobID string, _ temporalx.JobAttributes, _, _ string) error {
	w.mu.Lock()
	hook := w.cancelHook
	w.mu.Unlock()
	if hook != nil {
		hook(jobID)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.cancelErr != nil {
		return w.cancelErr
	}
	w.cancelled = append(w.cancelled, jobID)
	return nil
}

func (w *recordingWorkflows) NotifySubmitted(context.Context, string) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.notified++
	return nil
}

func (w *recordingWorkflows) StartDrill(_ context.Context, preemptionID, _, _, _ string) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.drillErr != nil {
		return w.drillErr
	}
	w.drills = append(w.drills, preemptionID)
	return nil
}

func (w *recordingWorkflows) startedJobs() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]string(nil), w.started...)
}

// Test tokens: two submitters of different projects, an operator and an admin.
const (
	tokAlice = "tok-alice" // submitter, project vision
	tokBob   = "tok-bob"   // submitter, project speech
	tokOps   = "tok-ops"   // operator, project platform
	tokAdmin = "tok-admin" // admin, project platform
)

func testTokens(t testing.TB) Tokens {
	t.Helper()
	toks, err := NewTokens(map[string]Principal{
		tokAlice: {Name: "alice", Project: "vision", Role: vocab.RoleSubmitter},
		tokBob:   {Name: "bob", Project: "speech", Role: vocab.RoleSubmitter},
		tokOps:   {Name: "olga", Project: "platform", Role: vocab.RoleOperator},
		tokAdmin: {Name: "root", Project: "platform", Role: vocab.RoleAdmin},
	})
	if err != nil {
		t.Fatal(err)
	}
	return toks
}

// testQueues are the queues every test database holds.
var testQueues = []scheduling.Queue{
	{Name: "train", Tier: vocab.TierStandard, ServiceShare: 1, MaxWait: 2 * time.Hour},
	{Name: "inference", Tier: vocab.TierProduction, ServiceShare: 2, Protected: true},
	{Name: "delivery", Tier: vocab.TierKeyProject, ServiceShare: 1, MaxWait: 30 * time.Minute},
}

// testPools is a small inventory: one node with two A100s in one NVLink domain.
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

// testEnv is a real store on a fresh PostgreSQL database behind the API.
type testEnv struct {
	t      testing.TB
	url    string
	store  *store.Store
	wf     *recordingWorkflows
	server *Server
}

// newTestEnv creates a migrated database with testQueues and testPools and an
// API server on it.
func newTestEnv(t testing.TB, opts ...Option) *testEnv {
	t.Helper()
	url := storetest.NewDatabase(t)
	return newTestEnvAt(t, url, opts...)
}

// newTestEnvAt is newTestEnv on an existing database URL.
func newTestEnvAt(t testing.TB, url string, opts ...Option) *testEnv {
	t.Helper()
	st := storetest.OpenStore(t, url, storetest.Fixture{Pools: testPools, Queues: testQueues})
	wf := &recordingWorkflows{}
	opts = append([]Option{WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil)))}, opts...)
	return &testEnv{t: t, url: url, store: st, wf: wf, server: New(StoreFrom(st), wf, testTokens(t), opts...)}
}

// response is one recorded answer.
type response struct {
	status int
	header http.Header
	body   []byte
}

// decode unmarshals the body into v, failing the test on error.
func (r response) decode(t testing.TB, v any) {
	t.Helper()
	if err := json.Unmarshal(r.body, v); err != nil {
		t.Fatalf("decode %s: %v", r.body, err)
	}
}

// apiError returns the error object of a non-2xx answer.
func (r response) apiError(t testing.TB) ErrorBody {
	t.Helper()
	var e ErrorResponse
	r.decode(t, &e)
	if e.Error.Code == "" {
		t.Fatalf("no error object in %d answer: %s", r.status, r.body)
	}
	return e.Error
}

// do sends one request to the server. body may be nil, a string (sent as is)
// or any value (sent as JSON). headers alternate name, value.
func (e *testEnv) do(method, path, token string, body any, headers ...string) response {
	e.t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = bytes.NewBufferString(b)
	default:
		data, err := json.Marshal(b)
		if err != nil {
			e.t.Fatal(err)
		}
		rd = bytes.NewReader(data)
	}
	req := httptest.NewRequest(method, path, rd)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	rec := httptest.NewRecorder()
	e.server.Handler().ServeHTTP(rec, req)
	return response{status: rec.Code, header: rec.Header(), body: rec.Body.Bytes()}
}

// submit posts spec with token and optional idempotency key and returns the answer.
func (e *testEnv) submit(token string, spec any, key string) response {
	e.t.Helper()
	if key == "" {
		return e.do(http.MethodPost, "/v1/jobs", token, spec)
	}
	return e.do(http.MethodPost, "/v1/jobs", token, spec, IdempotencyKeyHeader, key)
}

// mustSubmit submits and requires a 201, returning the job.
func (e *testEnv) mustSubmit(token string, spec any) Job {
	e.t.Helper()
	r := e.submit(token, spec, "")
	if r.status != http.StatusCreated {
		e.t.Fatalf("submit: %d %s", r.status, r.body)
	}
	var j Job
	r.decode(e.t, &j)
	return j
}

// counts returns the number of rows of the tables a request may change.
func (e *testEnv) counts() map[string]int {
	e.t.Helper()
	out := map[string]int{}
	for _, table := range []string{"jobs", "audit_log", "wait_events"} {
		var n int
		// A refused request writes nothing but its access_denied entry.
		q := "SELECT count(*) FROM " + table
		if table == "audit_log" {
			q += " WHERE action <> '" + store.AuditAccessDenied + "'"
		}
		if err := e.store.Pool().QueryRow(context.Background(), q).Scan(&n); err != nil {
			e.t.Fatalf("count %s: %v", table, err)
		}
		out[table] = n
	}
	return out
}

// validSpec returns a JSON-ready valid job spec: 2 GPUs of ≥ 40 GiB on one node,
// simulated for an hour, checkpointable every 10 minutes.
func validSpec() map[string]any {
	return map[string]any{
		"queue": "train",
		"resources": map[string]any{
			"gpus": 2, "gpu_memory_mib": 40960, "pool": "a100-east", "topology": "same-node",
		},
		"run_seconds":   3600,
		"recovery":      map[string]any{"checkpointable": true, "checkpoint_interval_s": 600},
		"prerequisites": []any{map[string]any{"name": "image", "ready": true}},
	}
}

// tcpProxy forwards a local port to PostgreSQL so that a test can make the
// database unreachable (close the proxy) without touching the real server.
type tcpProxy struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	conns  []net.Conn
	closed bool
}

func newTCPProxy(t testing.TB, target string) *tcpProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &tcpProxy{ln: ln, target: target}
	go p.serve()
	t.Cleanup(p.Close)
	return p
}

func (p *tcpProxy) addr() string { return p.ln.Addr().String() }

func (p *tcpProxy) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		u, err := net.Dial("tcp", p.target)
		if err != nil {
			c.Close()
			continue
		}
		if !p.track(c, u) {
			return
		}
		go func() { _, _ = io.Copy(u, c); u.Close() }()
		go func() { _, _ = io.Copy(c, u); c.Close() }()
	}
}

func (p *tcpProxy) track(cs ...net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		for _, c := range cs {
			c.Close()
		}
		return false
	}
	p.conns = append(p.conns, cs...)
	return true
}

// Close stops accepting (new connections are refused) and cuts every open one.
func (p *tcpProxy) Close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return
	}
	p.closed = true
	_ = p.ln.Close()
	for _, c := range p.conns {
		_ = c.Close()
	}
}

// errTemporalDown is what the recording fake returns when told to fail.
var errTemporalDown = errors.New("temporal: connection refused")

// proxiedURL returns dbURL with its host and port replaced by addr.
func proxiedURL(dbURL, addr string) string {
	host, port, _ := net.SplitHostPort(addr)
	if u, err := url.Parse(dbURL); err == nil && u.Scheme != "" {
		u.Host = addr
		return u.String()
	}
	return dbURL + " host=" + host + " port=" + port // key=value DSN: later keys win
}
