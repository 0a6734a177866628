package service

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"

	"github.com/gpugov/gpugov/api"
	apiclient "github.com/gpugov/gpugov/api/client"
	"github.com/gpugov/gpugov/internal/telemetry"
	"github.com/gpugov/gpugov/internal/temporalx"
	"github.com/gpugov/gpugov/internal/temporalx/temporaltest"
	"github.com/gpugov/gpugov/internal/vocab"
	"github.com/gpugov/gpugov/store"
	"github.com/gpugov/gpugov/store/storetest"
)

const governanceYAML = "testdata/governance.yaml"

// TestServiceGovernanceFileInvalid: a governance file that is missing or does
// not load fails Start, before any database or Temporal call, with an error
// naming the file.
func TestServiceGovernanceFileInvalid(t *testing.T) {
	tokens, err := api.NewTokens(map[string]api.Principal{"t": {Project: "p", Role: vocab.RoleAdmin}})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	files := map[string]string{
		"bad-stage.yaml":     "pools:\n  alibaba:\n    stage: sometimes\n",
		"unknown-field.yaml": "reclaim:\n  enabeld: true\n",
	}
	paths := []string{filepath.Join(dir, "missing.yaml")}
	for name, content := range files {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		paths = append(paths, p)
	}
	for _, p := range paths {
		// Unreachable database and Temporal: Start must fail on the file first.
		svc, err := Start(context.Background(), Config{DatabaseURL: "postgres://127.0.0.1:1/none", TemporalAddress: "127.0.0.1:1",
			APIAddr: "127.0.0.1:0", Tokens: tokens, GovernanceFile: p, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
		if err == nil {
			svc.Close(context.Background())
			t.Errorf("%s: Start succeeded", p)
		} else if !strings.Contains(err.Error(), p) || !strings.Contains(err.Error(), "governance") {
			t.Errorf("%s: %v; want a governance error naming the file", p, err)
		}
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
// server and checks what serve promises: the inventory imported and default
// queues created, the governance file's stages and low-risk queues applied
// (and applied and audited again when the file changes), the scheduler and
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
	govFile := filepath.Join(t.TempDir(), "governance.yaml")
	govData, err := os.ReadFile(governanceYAML)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(govFile, govData, 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	svc, err := Start(ctx, Config{DatabaseURL: dbURL, TemporalAddress: dev.HostPort, APIAddr: "127.0.0.1:0", Tokens: tokens,
		Inventory: pools, SimSpeed: 1000, GovernanceFile: govFile, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer svc.Close(context.Background())

	qs, err := svc.Store().ListQueues(ctx)
	if err != nil || len(qs) != 4 {
		t.Errorf("queues %v, %v; want the default queue of each tier", qs, err)
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
	// A changed file is applied again and audited (Check is what the watcher's poll runs).
	changed := strings.Replace(string(govData), "stage: trial", "stage: automate", 1)
	if err := os.WriteFile(govFile, []byte(changed), 0o600); err != nil {
		t.Fatal(err)
	}
	svc.governance.Check(ctx)
	checkGovernanceApplied(ctx, t, svc.Store(), vocab.StageAutomate)
	audit, err := svc.Store().AuditFor(ctx, govFile, 0)
	if err != nil || len(audit) == 0 || audit[0].Action != ActionGovernanceConfigChange || audit[0].Actor != GovernanceActor {
		t.Errorf("audit of %s: %+v, %v; want a %s entry", govFile, audit, err, ActionGovernanceConfigChange)
	}
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
// stage and that the standard queue is low-risk, as testdata/governance.yaml
// makes it (the default queues make only experiment low-risk).
func checkGovernanceApplied(ctx context.Context, t *testing.T, st *store.Store, stage vocab.AutomationStage) {
	t.Helper()
	snap, err := st.LoadSnapshot(ctx, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range snap.Pools {
		if p.Name == "alibaba" && p.Stage != stage {
			t.Errorf("pool alibaba in stage %s, want the governance file's %s", p.Stage, stage)
		}
	}
	for _, q := range snap.Queues {
		if q.Name == "standard" && !q.LowRisk {
			t.Error("queue standard is not low-risk; the governance file makes it so")
		}
	}
}
