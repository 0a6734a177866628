package service

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"

	"github.com/gpugov/gpugov/api"
	"github.com/gpugov/gpugov/internal/apiclient"
	"github.com/gpugov/gpugov/internal/temporalx"
	"github.com/gpugov/gpugov/internal/temporalx/temporaltest"
	"github.com/gpugov/gpugov/store/storetest"
)

func TestStartValidates(t *testing.T) {
	tokens, err := api.NewTokens(map[string]api.Principal{"t": {Project: "p", Role: api.RoleAdmin}})
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
// queues created, the scheduler workflow running, /readyz and /metrics
// served, a submitted job run to success by the workers (restarted once),
// and an idempotent graceful Close.
func TestServiceLifecycle(t *testing.T) {
	dbURL := storetest.NewDatabase(t)
	dev := temporaltest.Start(t)
	tokens, err := api.NewTokens(map[string]api.Principal{"admin": {Project: "platform", Role: api.RoleAdmin}})
	if err != nil {
		t.Fatal(err)
	}
	pools, err := LoadInventoryFile(nodesCSV, FormatAuto, "")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	svc, err := Start(ctx, Config{DatabaseURL: dbURL, TemporalAddress: dev.HostPort, APIAddr: "127.0.0.1:0", Tokens: tokens,
		Inventory: pools, SimSpeed: 1000, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer svc.Close(context.Background())

	qs, err := svc.Store().ListQueues(ctx)
	if err != nil || len(qs) != 4 {
		t.Errorf("queues %v, %v; want the default queue of each tier", qs, err)
	}
	desc, err := svc.Temporal().DescribeWorkflowExecution(ctx, temporalx.SchedulerWorkflowID(temporalx.DefaultShard), "")
	if err != nil || desc.GetWorkflowExecutionInfo().GetStatus() != enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING {
		t.Errorf("scheduler workflow: %v, %v; want running", desc.GetWorkflowExecutionInfo().GetStatus(), err)
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
	for _, m := range []string{"gpugov_placements_total", "gpugov_job_wait_seconds", "gpugov_scheduling_cycle_duration_seconds"} {
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
