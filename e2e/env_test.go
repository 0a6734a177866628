package e2e

import (
	"bytes"
	"context"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/gpugov/gpugov/api"
	apiclient "github.com/gpugov/gpugov/api/client"
	"github.com/gpugov/gpugov/internal/policy"
	"github.com/gpugov/gpugov/internal/scheduling"
	"github.com/gpugov/gpugov/internal/temporalx/temporaltest"
	"github.com/gpugov/gpugov/internal/trace/alibaba"
	"github.com/gpugov/gpugov/internal/vocab"
	"github.com/gpugov/gpugov/service"
	"github.com/gpugov/gpugov/store"
	"github.com/gpugov/gpugov/store/storetest"
)

// adminToken is the bearer token of the tests' admin principal.
const adminToken = "e2e-admin"

// drillToken is the bearer token of a submitter of project drill.
const drillToken = "e2e-drill"

// inCI reports whether the tests run in CI, where missing parts are failures.
func inCI() bool { return os.Getenv("CI") == "true" }

// requireTemporal skips the test under -short (it needs the dev server and
// PostgreSQL), and fails it in CI, and skips it elsewhere, when the Temporal
// CLI is not built.
func requireTemporal(t testing.TB) {
	t.Helper()
	temporaltest.SkipShort(t)
	if bin, ok := temporaltest.Binary(); !ok {
		if inCI() {
			t.Fatalf("Temporal CLI not found (%q) and CI=true: `make temporal` must run before the tests", bin)
		}
		t.Skipf("Temporal CLI not found (%q); run `make temporal`", bin)
	}
}

// temporalBackend is the Temporal server a test's service runs on. The
// scenarios that matter most for production (the replay, the preemption)
// run on both: TestX on the dev server, TestXOnCluster the same body on the
// cluster.
type temporalBackend int

const (
	// onDevServer is the Temporal CLI's dev server, in memory
	// (temporaltest.Start): what `make run` uses.
	onDevServer temporalBackend = iota
	// onCluster is the Temporal server on PostgreSQL with
	// deploy/temporal/cluster.yaml (temporaltest.StartCluster): what `make
	// run-cluster` and the compose stack use.
	onCluster
)

// require skips (or fails, under CI) t when the backend's binaries are
// missing, before a test creates anything.
func (b temporalBackend) require(t testing.TB) {
	t.Helper()
	if b == onDevServer {
		requireTemporal(t)
		return
	}
	temporaltest.SkipShort(t)
	if _, _, ok := temporaltest.ClusterBinaries(); !ok && !inCI() && os.Getenv(temporaltest.RequireClusterEnv) == "" {
		t.Skip("Temporal server on PostgreSQL not built (bin/temporal-server, bin/temporal-sql-tool): " +
			"deploy/dev/ensure-temporal-server.sh builds them; `make test` does it first")
	}
}

// start starts the backend's server for t (stopped by t's cleanup).
func (b temporalBackend) start(t testing.TB) *temporaltest.DevServer {
	t.Helper()
	if b == onCluster {
		return temporaltest.StartCluster(t)
	}
	return temporaltest.Start(t)
}

// traceDir returns the Alibaba trace directory: $GPUGOV_TRACE_DIR, else
// ../shared/traces/alibaba-gpu-v2023 from the repository root. A missing
// trace fails the test in CI and skips it elsewhere.
func traceDir(t testing.TB) string {
	t.Helper()
	dir := os.Getenv("GPUGOV_TRACE_DIR")
	if dir == "" {
		dir = filepath.Join(repoRoot(t), "..", "shared", "traces", "alibaba-gpu-v2023")
	}
	if _, err := os.Stat(filepath.Join(dir, "openb_pod_list_default.csv")); err != nil {
		if inCI() {
			t.Fatalf("Alibaba trace not found in %s and CI=true: %v", dir, err)
		}
		t.Skipf("Alibaba trace not found in %s: %v", dir, err)
	}
	return dir
}

// repoRoot is the directory holding go.mod above the working directory.
func repoRoot(t testing.TB) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("go.mod not found above the working directory")
		}
		dir = parent
	}
}

// traceNodes returns real nodes of the trace's GPU node list: for each
// model, the first count nodes of that model and GPU count in file order.
func traceNodes(t testing.TB, dir string, pick []nodePick) []alibaba.NodeRow {
	t.Helper()
	all, err := alibaba.ReadNodes(filepath.Join(dir, "openb_node_list_gpu_node.csv"))
	if err != nil {
		t.Fatal(err)
	}
	var out []alibaba.NodeRow
	for _, p := range pick {
		n := 0
		for _, nd := range all {
			if n < p.count && nd.Model == p.model && nd.GPUs == p.gpus {
				out = append(out, nd)
				n++
			}
		}
		if n < p.count {
			t.Fatalf("trace has only %d %d-GPU %s nodes, want %d", n, p.gpus, p.model, p.count)
		}
	}
	return out
}

// nodePick selects count nodes of a model with a GPU count.
type nodePick struct {
	model string
	gpus  int
	count int
}

// env is one in-process gpugov with its own database and Temporal server.
type env struct {
	svc    *service.Service
	dev    *temporaltest.DevServer // the Temporal server the service runs on (envOptions.temporal)
	dbURL  string
	db     *pgxpool.Pool // direct connection for the tests' SQL checks
	client *apiclient.Client
	logs   *logBuffer
}

// envOptions adjust the service a test starts.
type envOptions struct {
	pools       []scheduling.Pool
	simSpeed    float64
	dbURL       string // connect the service through this URL (a proxy) instead of the database's own
	afterCommit func(context.Context, *store.CycleOutcome) error
	// policy, when set, is the service's policy (service.Config.Policy).
	policy *policy.Policy
	// drillInterval, when set, is the governance loop's drill pass period
	// (service.Config.DrillInterval).
	drillInterval time.Duration
	// temporal is the Temporal server the service runs on (default: the dev server).
	temporal temporalBackend
	// principals are tokens the service accepts besides the tests' own
	// (adminToken, drillToken, agentToken).
	principals map[string]api.Principal
	// temporalUI is the Temporal UI base URL the console links workflows to
	// (service.Config.TemporalUI); the tests' dev servers run headless, so
	// the links are only checked, never followed.
	temporalUI string
}

// startEnv creates a database, a Temporal server (o.temporal) and the
// service on a free port, all stopped when the test ends (service first).
func startEnv(t testing.TB, o envOptions) *env {
	t.Helper()
	o.temporal.require(t)
	return startEnvOn(t, storetest.NewDatabase(t), o)
}

// startEnvOn is startEnv on an existing test database.
func startEnvOn(t testing.TB, dbURL string, o envOptions) *env {
	t.Helper()
	o.temporal.require(t)
	dev := o.temporal.start(t)
	principals := map[string]api.Principal{
		adminToken: {Name: "e2e-admin", Project: "platform", Role: vocab.RoleAdmin},
		drillToken: {Name: "e2e-drill", Project: "drill", Role: vocab.RoleSubmitter},
		agentToken: {Name: "e2e-agent", Project: "platform", Role: vocab.RoleAgent, Node: "rehearse-1"},
	}
	maps.Copy(principals, o.principals)
	tokens, err := api.NewTokens(principals)
	if err != nil {
		t.Fatal(err)
	}
	logs := &logBuffer{}
	serviceURL := dbURL
	if o.dbURL != "" {
		serviceURL = o.dbURL
	}
	cfg := service.Config{
		DatabaseURL: serviceURL, TemporalAddress: dev.HostPort, APIAddr: "127.0.0.1:0", Tokens: tokens,
		Inventory: o.pools, SimSpeed: o.simSpeed, CycleInterval: time.Second, ReconcileInterval: 2 * time.Second,
		Logger: slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelWarn})),
	}
	cfg.AfterCycleCommit = o.afterCommit
	cfg.Policy = o.policy
	cfg.DrillInterval = o.drillInterval
	cfg.TemporalUI = o.temporalUI
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	svc, err := service.Start(ctx, cfg)
	if err != nil {
		t.Fatalf("start service: %v\n%s", err, logs.String())
	}
	t.Cleanup(func() {
		if err := svc.Close(context.Background()); err != nil {
			t.Errorf("close service: %v", err)
		}
		if t.Failed() {
			t.Logf("service log (warnings and errors):\n%s", logs.tail(8000))
		}
	})
	db, err := pgxpool.New(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(db.Close)
	client, err := apiclient.New("http://"+svc.APIAddr(), adminToken)
	if err != nil {
		t.Fatal(err)
	}
	return &env{svc: svc, dev: dev, dbURL: dbURL, db: db, client: client, logs: logs}
}

// logBuffer collects the service's log lines for failure messages.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// tail returns the last n bytes of the log, cut at a line start.
func (b *logBuffer) tail(n int) string {
	s := b.String()
	if len(s) <= n {
		return s
	}
	s = s[len(s)-n:]
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[i+1:]
	}
	return s
}

// queryInt runs a SQL query returning one integer.
func (e *env) queryInt(t testing.TB, sql string, args ...any) int {
	t.Helper()
	var n int
	if err := e.db.QueryRow(context.Background(), sql, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return n
}

// waitFor polls cond every 200 ms until it holds or timeout passes, and
// fails the test with what (and cond's last message) then.
func waitFor(t testing.TB, timeout time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		ok, msg := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not reached within %s: %s", what, timeout, msg)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
