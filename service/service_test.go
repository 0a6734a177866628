package service

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	enumspb "go.temporal.io/api/enums/v1"

	"github.com/gpugov/gpugov/api"
	apiclient "github.com/gpugov/gpugov/api/client"
	"github.com/gpugov/gpugov/internal/policy"
	"github.com/gpugov/gpugov/internal/telemetry"
	"github.com/gpugov/gpugov/internal/temporalx"
	"github.com/gpugov/gpugov/internal/temporalx/temporaltest"
	"github.com/gpugov/gpugov/internal/vocab"
	"github.com/gpugov/gpugov/store"
	"github.com/gpugov/gpugov/store/storetest"
)

const policyYAML = "testdata/policy.yaml"

// TestServicePolicyFileInvalid: a policy file that is missing or does not
// load fails Start, before any database or Temporal call, with an error
// naming the file (and, for a file that loads badly, the line and field).
func TestServicePolicyFileInvalid(t *testing.T) {
	tokens, err := api.NewTokens(map[string]api.Principal{"t": {Project: "p", Role: vocab.RoleAdmin}})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	files := map[string]string{ // file: the error's expected "file:line: field" after the file name
		"bad-stage.yaml":     "version: gpugov.policy/v1\npools:\n  alibaba:\n    stage: sometimes\n|:4: pools.alibaba.stage: ",
		"unknown-field.yaml": "version: gpugov.policy/v1\nreclaim:\n  enabeld: true\n|:3: reclaim.enabeld: unknown field",
		"no-version.yaml":    "reclaim:\n  enabled: true\n|:1: version: is required",
	}
	want := map[string]string{filepath.Join(dir, "missing.yaml"): "policy file: stat " + filepath.Join(dir, "missing.yaml")}
	for name, content := range files {
		p := filepath.Join(dir, name)
		text, suffix, _ := strings.Cut(content, "|")
		if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		want[p] = p + suffix
	}
	for p, w := range want {
		// Unreachable database and Temporal: Start must fail on the file first.
		svc, err := Start(context.Background(), Config{DatabaseURL: "postgres://127.0.0.1:1/none", TemporalAddress: "127.0.0.1:1",
			APIAddr: "127.0.0.1:0", Tokens: tokens, PolicyFile: p, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
		if err == nil {
			svc.Close(context.Background())
			t.Errorf("%s: Start succeeded", p)
		} else if !strings.Contains(err.Error(), w) {
			t.Errorf("%s: %v; want an error containing %q", p, err, w)
		}
	}
	// A file and an in-code policy at once: which one governs is ambiguous.
	_, err = Start(context.Background(), Config{DatabaseURL: "postgres://127.0.0.1:1/none", TemporalAddress: "127.0.0.1:1",
		APIAddr: "127.0.0.1:0", Tokens: tokens, PolicyFile: policyYAML, Policy: policy.Default(),
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err == nil || !strings.Contains(err.Error(), "both a policy file and a policy") {
		t.Errorf("file and policy: %v; want the ambiguity refused", err)
	}
}

func TestStartValidates(t *testing.T) {
	tokens, err := api.NewTokens(map[string]api.Principal{"t": {Project: "p", Role: vocab.RoleAdmin}})
	if err != nil {
		t.Fatal(err)
	}
	full := Config{DatabaseURL: "postgres://x", TemporalAddress: "x:1", APIAddr: "127.0.0.1:0", Tokens: tokens}
	for name, mutate := range map[string]func(*Config){
		"database URL":       func(c *Config) { c.DatabaseURL = "" },
		"Temporal":           func(c *Config) { c.TemporalAddress = "" },
		"API listen address": func(c *Config) { c.APIAddr = "" },
		"API token":          func(c *Config) { c.Tokens = api.Tokens{} },
	} {
		c := full
		mutate(&c)
		if _, err := Start(context.Background(), c); err == nil || !strings.Contains(err.Error(), name) {
			t.Errorf("without %s: %v", name, err)
		}
	}
}

// TestServiceLifecycle starts the whole service on a real database and dev
// server and checks what serve promises: the inventory imported, the policy
// file's queues, stages and low-risk queues applied and its version stored
// and activated with an audit entry (and, when the file changes, a second
// version stored, activated and applied — its stage widening refused, the
// pool not being ready — and the next scheduling cycle recording the new
// hash), the scheduler and
// reclaim scan workflows running, the queue gauges exported, /readyz and
// /metrics served, a submitted job run to success by the workers (restarted once),
// and an idempotent graceful Close.
func TestServiceLifecycle(t *testing.T) {
	dbURL := storetest.NewDatabase(t)
	dev := temporaltest.Start(t)
	tokens, err := api.NewTokens(map[string]api.Principal{"admin": {Project: "platform", Role: vocab.RoleAdmin}})
	if err != nil {
		t.Fatal(err)
	}
	pools, err := LoadInventoryFile(nodesCSV, FormatAuto, "")
	if err != nil {
		t.Fatal(err)
	}
	policyFile := filepath.Join(t.TempDir(), "policy.yaml")
	policyData, err := os.ReadFile(policyYAML)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(policyFile, policyData, 0o600); err != nil {
		t.Fatal(err)
	}
	first, err := policy.Load(policyFile)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	svc, err := Start(ctx, Config{DatabaseURL: dbURL, TemporalAddress: dev.HostPort, APIAddr: "127.0.0.1:0", Tokens: tokens,
		Inventory: pools, SimSpeed: 1000, PolicyFile: policyFile, CycleInterval: time.Second,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer svc.Close(context.Background())

	qs, err := svc.Store().ListQueues(ctx)
	if err != nil || len(qs) != 4 {
		t.Errorf("queues %v, %v; want the policy file's queue of each tier", qs, err)
	}
	for _, id := range []string{temporalx.SchedulerWorkflowID(temporalx.DefaultShard), temporalx.ReclaimScanWorkflowID} {
		desc, err := svc.Temporal().DescribeWorkflow(ctx, id, "")
		if err != nil {
			t.Errorf("%s workflow: %v; want running", id, err)
		} else if st := desc.RawResponse.GetWorkflowExecutionInfo().GetStatus(); st != enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING {
			t.Errorf("%s workflow: %v; want running", id, st)
		}
	}
	checkGovernanceApplied(ctx, t, svc.Store(), vocab.StageTrial)
	checkPolicyVersion(ctx, t, svc.Store(), dbURL, first.Hash(), policyFile, 1)
	waitCycleWithPolicy(ctx, t, dbURL, first.Hash())
	// A changed file is stored, activated and applied again (Check is what
	// the watcher's poll runs), and the cycles after it run with its hash.
	changed := strings.Replace(string(policyData), "stage: trial", "stage: automate", 1)
	if err := os.WriteFile(policyFile, []byte(changed), 0o600); err != nil {
		t.Fatal(err)
	}
	if !svc.policy.Check(ctx) {
		t.Fatal("the changed policy file was not loaded")
	}
	second := svc.policy.Current()
	if second.Hash() == first.Hash() {
		t.Fatal("the changed policy has the first one's hash")
	}
	// The edit widens the pool's stage, which its readiness does not allow
	// (key-project's protection is not explicit, nothing is proven): the
	// version is in force, the stage stays trial, refused in its history.
	checkGovernanceApplied(ctx, t, svc.Store(), vocab.StageTrial)
	if hist, err := svc.Store().PoolStageHistory(ctx, "alibaba", 2); err != nil || len(hist) != 2 ||
		hist[0].Outcome != vocab.StageChangeRefused || hist[0].To != vocab.StageAutomate || hist[0].Source != StageSourceReload ||
		hist[0].Readiness == nil || !slices.Contains(hist[0].Readiness.Failed, vocab.ReadinessProtection) ||
		hist[1].Outcome != vocab.StageChangeInitial || hist[1].To != vocab.StageTrial {
		t.Errorf("stage history %+v, %v; want the initial trial, then automate refused", hist, err)
	}
	checkPolicyVersion(ctx, t, svc.Store(), dbURL, second.Hash(), policyFile, 2)
	waitCycleWithPolicy(ctx, t, dbURL, second.Hash())
	base := "http://" + svc.APIAddr()
	for path, want := range map[string]int{"/readyz": 200, "/healthz": 200, "/metrics": 200} {
		resp, err := http.Get(base + path)
		if err != nil || resp.StatusCode != want {
			t.Errorf("GET %s: %v %v", path, resp, err)
		} else {
			resp.Body.Close()
		}
	}

	svc.StopWorkers()
	if err := svc.StartWorkers(); err != nil {
		t.Fatal(err)
	}
	if err := svc.StartWorkers(); err != nil { // a no-op while running
		t.Fatal(err)
	}
	c, err := apiclient.New(base, "admin")
	if err != nil {
		t.Fatal(err)
	}
	job, status, err := c.Submit(ctx, &api.JobSpec{Project: "p1", Queue: "production", RunSeconds: 60,
		Resources: api.ResourceSpec{GPUs: 2, Pool: "alibaba", Topology: "same-node"}}, "k1")
	if err != nil || status != http.StatusCreated {
		t.Fatalf("submit: %d %v", status, err)
	}
	for {
		j, err := c.GetJob(ctx, job.ID)
		if err != nil {
			t.Fatal(err)
		}
		if j.State == "succeeded" {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("job still %s", j.State)
		}
		time.Sleep(100 * time.Millisecond)
	}
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, m := range []string{"gpugov_placements_total", "gpugov_job_wait_seconds", "gpugov_scheduling_cycle_duration_seconds",
		telemetry.MetricQueueLongestWait + `{`, telemetry.MetricQueueStarvingJobs + `{`} {
		if !strings.Contains(string(body), m) {
			t.Errorf("/metrics lacks %s after a job ran", m)
		}
	}
	// The report loop exports every pool's readiness: alibaba is not ready
	// (its protection is not explicit for every queue).
	ready := grepLines(string(body), telemetry.MetricPoolReady+"{")
	checks := grepLines(string(body), telemetry.MetricPoolReadinessCheck+"{")
	if !strings.Contains(ready, `pool="alibaba"} 0`) || !strings.Contains(checks, `check="protection_explicit"`) ||
		!strings.Contains(checks, `pool="alibaba"} 0`) {
		t.Errorf("/metrics readiness:\n%s\n%s", ready, checks)
	}

	if err := svc.Close(context.Background()); err != nil {
		t.Errorf("close: %v", err)
	}
	if err := svc.Close(context.Background()); err != nil {
		t.Errorf("second close: %v", err)
	}
	if _, err := http.Get(base + "/healthz"); err == nil {
		t.Error("the API still answers after Close")
	}
}

// checkGovernanceApplied checks the stored stage of the trace pool against
// stage and that the standard queue is low-risk, as testdata/policy.yaml
// makes it (the default queues make only experiment low-risk).
func checkGovernanceApplied(ctx context.Context, t *testing.T, st *store.Store, stage vocab.AutomationStage) {
	t.Helper()
	snap, err := st.LoadSnapshot(ctx, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range snap.Pools {
		if p.Name == "alibaba" && p.Stage != stage {
			t.Errorf("pool alibaba in stage %s, want the policy file's %s", p.Stage, stage)
		}
	}
	for _, q := range snap.Queues {
		if q.Name == "standard" && !q.LowRisk {
			t.Error("queue standard is not low-risk; the policy file makes it so")
		}
	}
}

// checkPolicyVersion checks that hash is the active stored policy version,
// its body the policy's canonical JSON, that versions are stored in all, and
// that its activation is audited with PolicyActor and reason "loaded from
// file".
func checkPolicyVersion(ctx context.Context, t *testing.T, st *store.Store, dbURL, hash, file string, versions int) {
	t.Helper()
	active, err := st.ActivePolicyVersion(ctx)
	if err != nil || active.Hash != hash {
		t.Fatalf("active policy version %+v, %v; want %s", active, err, hash)
	}
	var body map[string]any
	if err := json.Unmarshal(active.Body, &body); err != nil || body["version"] != policy.FormatV1 {
		t.Errorf("stored body %s: %v; want the policy's JSON", active.Body, err)
	}
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var n int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM policy_versions`).Scan(&n); err != nil || n != versions {
		t.Errorf("%d stored policy versions (%v), want %d", n, err, versions)
	}
	audit, err := st.AuditFor(ctx, hash, 0)
	if err != nil || len(audit) != 1 || audit[0].Action != "activate_policy" || audit[0].Actor != PolicyActor ||
		audit[0].Reason != "loaded from "+file {
		t.Errorf("audit of policy %s: %+v, %v; want one activate_policy entry by %s, loaded from %s", hash, audit, err, PolicyActor, file)
	}
}

// waitCycleWithPolicy waits for a scheduling cycle that ran with policy
// version hash (the scheduler runs every second in the test).
func waitCycleWithPolicy(ctx context.Context, t *testing.T, dbURL, hash string) {
	t.Helper()
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	for {
		var n int
		if err := conn.QueryRow(ctx, `SELECT count(*) FROM scheduling_cycles WHERE policy_version = $1`, hash).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n > 0 {
			return
		}
		if ctx.Err() != nil {
			t.Fatalf("no scheduling cycle recorded policy version %s", hash)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// grepLines returns the lines of s that contain sub.
func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
