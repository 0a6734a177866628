// Tests of the node agent's HTTP reporter (internal/inventory/httpreport) against
// this API on a real store: they live here, beside the server side of the
// contract, so that nothing under internal/ imports api or store.
package api_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"
	"time"

	"github.com/gpugov/gpugov/api"
	"github.com/gpugov/gpugov/internal/inventory"
	"github.com/gpugov/gpugov/internal/inventory/httpreport"
	"github.com/gpugov/gpugov/internal/inventory/nvmlinv"
	"github.com/gpugov/gpugov/internal/inventory/nvmlinv/nvmltest"
	"github.com/gpugov/gpugov/internal/scheduling"
	"github.com/gpugov/gpugov/internal/vocab"
	"github.com/gpugov/gpugov/store"
	"github.com/gpugov/gpugov/store/storetest"
)

// Tokens of the test API.
const (
	tokAgent     = "tok-agent"
	tokSubmitter = "tok-alice"
)

// service is the real API on a real store, served over HTTP.
type service struct {
	store *store.Store
	url   string
}

func newService(t *testing.T) *service {
	t.Helper()
	st, _ := storetest.NewStore(t, storetest.Fixture{Queues: []scheduling.Queue{storetest.TrainQueue}})
	toks, err := api.NewTokens(map[string]api.Principal{
		tokAgent:     {Name: "agent-dgx-01", Project: "platform", Role: vocab.RoleAgent, Node: "dgx-01"},
		tokSubmitter: {Name: "alice", Project: "vision", Role: vocab.RoleSubmitter},
	})
	if err != nil {
		t.Fatal(err)
	}
	// The node-agent routes never start workflows, so no Temporal is needed.
	srv := httptest.NewServer(api.New(api.StoreFrom(st), nil, toks,
		api.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil)))).Handler())
	t.Cleanup(srv.Close)
	return &service{store: st, url: srv.URL}
}

func newClient(t *testing.T, url, token string) *httpreport.Client {
	t.Helper()
	c, err := httpreport.New(url, token)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// dgxCollector reads a go-nvml mock DGX A100 (8 × A100-SXM4-40GB) as node
// dgx-01 of pool a100-east: real NVML cannot run here.
func dgxCollector() *nvmlinv.Collector {
	return &nvmlinv.Collector{Lib: nvmltest.NewDGXA100(nvmltest.NVSwitchAllToAll), Node: "dgx-01", Pool: "a100-east",
		CPUMilli: 256000, MemoryMiB: 2 << 20, Now: func() time.Time { return time.Now().UTC().Truncate(time.Microsecond) }}
}

func TestAgentLoopReportsInventoryAndSamples(t *testing.T) {
	t.Parallel()
	svc := newService(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	agent := &inventory.Agent{Source: dgxCollector(), Reporter: newClient(t, svc.url, tokAgent), Refresh: time.Hour,
		Logger: slog.New(slog.NewTextHandler(t.Output(), nil))}
	done := make(chan error, 1)
	go func() { done <- agent.Run(ctx) }()

	// The first refresh happens at once; wait until its samples are stored.
	uuid3 := nvmltest.UUID(3)
	var samples []store.GPUSample
	for deadline := time.Now().Add(30 * time.Second); len(samples) == 0; {
		if time.Now().After(deadline) {
			t.Fatal("no samples stored within 30 s")
		}
		time.Sleep(20 * time.Millisecond)
		var err error
		if samples, err = svc.store.GPUSamples(ctx, []string{uuid3}, time.Time{}); err != nil {
			t.Fatal(err)
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("agent: %v", err)
	}
	if s := samples[0]; s.GPUPercent != int(nvmltest.UtilizationGPU(3)) || s.MemoryUsedMiB <= 0 {
		t.Errorf("sample of GPU 3 = %+v, want %d%% and memory in use", s, nvmltest.UtilizationGPU(3))
	}
	inv, err := svc.store.GetInventory(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(inv) != 1 || inv[0].Name != "a100-east" || len(inv[0].Nodes) != 1 || len(inv[0].Nodes[0].GPUs) != nvmltest.GPUCount {
		t.Fatalf("stored inventory = %+v, want a100-east/dgx-01 with %d GPUs", inv, nvmltest.GPUCount)
	}
	n := inv[0].Nodes[0]
	if n.Name != "dgx-01" || n.CPUMilli != 256000 || n.GPUs[0].UUID != nvmltest.UUID(0) || n.GPUs[0].Model != "A100-SXM4-40GB" ||
		n.GPUs[0].NVLinkDomain == "" {
		t.Errorf("stored node = %+v", n)
	}
	audit, err := svc.store.AuditFor(context.Background(), "node/dgx-01", 0)
	if err != nil || len(audit) != 1 || audit[0].Actor != "agent-dgx-01" {
		t.Fatalf("audit = %+v, %v", audit, err)
	}
}

func TestReporterErrors(t *testing.T) {
	t.Parallel()
	svc := newService(t)
	ctx := context.Background()
	c := newClient(t, svc.url, tokAgent)
	inv, err := dgxCollector().CollectNode(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// Samples of GPUs no accepted report named are not sent.
	err = c.ReportSamples(ctx, inv.Samples())
	if err == nil {
		t.Fatal("samples before any inventory report were accepted")
	}
	if n, _ := svc.store.GPUSamples(ctx, []string{nvmltest.UUID(0)}, time.Time{}); len(n) != 0 {
		t.Fatalf("samples stored: %+v", n)
	}
	// A report the API rejects comes back as an *APIError naming the field.
	bad := inv
	bad.GPUs = slices.Clone(inv.GPUs)
	bad.GPUs[2].MemoryTotalMiB = 0
	var apiErr *httpreport.APIError
	if err := c.Report(ctx, bad); !errors.As(err, &apiErr) || apiErr.Status != http.StatusUnprocessableEntity ||
		apiErr.Field != "gpus[2].memory_total_mib" {
		t.Fatalf("bad report: %v", err)
	}
	if err := c.ReportSamples(ctx, inv.Samples()); err == nil {
		t.Fatal("samples after a rejected report were sent")
	}
	// A submitter's token may not report; an unknown token is not known.
	if err := newClient(t, svc.url, tokSubmitter).Report(ctx, inv); !errors.As(err, &apiErr) || apiErr.Status != http.StatusForbidden {
		t.Fatalf("submitter token: %v", err)
	}
	if err := newClient(t, svc.url, "nope").Report(ctx, inv); !errors.As(err, &apiErr) || apiErr.Status != http.StatusUnauthorized {
		t.Fatalf("unknown token: %v", err)
	}
	if _, err := httpreport.New("gpugov:8080", tokAgent); err == nil {
		t.Fatal("a URL without scheme was accepted")
	}
}

func TestRunSpecAndCheckpointRecording(t *testing.T) {
	t.Parallel()
	svc := newService(t)
	ctx := context.Background()
	c := newClient(t, svc.url, tokAgent)
	inv, err := dgxCollector().CollectNode(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Report(ctx, inv); err != nil {
		t.Fatal(err)
	}
	job, _, err := svc.store.CreateJob(ctx, &store.NewJob{
		Project: "vision", Queue: "train", Tier: vocab.TierStandard,
		Request:  scheduling.ResourceRequest{GPUs: 1, Pool: "a100-east"},
		Recovery: scheduling.RecoveryEvidence{Checkpointable: true, CheckpointIntervalSeconds: 60},
		Command:  []string{"python", "train.py"}, Env: map[string]string{"SEED": "1"},
	})
	if err != nil {
		t.Fatal(err)
	}
	out, err := svc.store.ApplyCycle(ctx, "c1", &scheduling.Result{PolicyVersion: "v1", At: time.Now(),
		Placements: []scheduling.Placement{{JobID: job.ID, Pool: "a100-east", Node: "dgx-01", Rank: 1,
			GPUs: []scheduling.GPUShare{{UUID: nvmltest.UUID(0), Milli: 1000}}}}}, time.Now())
	if err != nil || len(out.Placed) != 1 {
		t.Fatalf("apply cycle: %+v %v", out, err)
	}
	runID, err := svc.store.MarkRunning(ctx, job.ID, out.Placed[0].AllocationID, 0, time.Now())
	if err != nil {
		t.Fatal(err)
	}

	rs, err := c.RunSpec(ctx, "dgx-01", runID)
	if err != nil {
		t.Fatal(err)
	}
	if rs.JobID != job.ID || !slices.Equal(rs.Command, []string{"python", "train.py"}) || rs.Env["SEED"] != "1" || rs.ResumeFrom != nil || rs.Ended {
		t.Fatalf("run spec = %+v", rs)
	}
	var denied *httpreport.APIError
	if _, err := c.RunSpec(ctx, "dgx-02", runID); !errors.As(err, &denied) || denied.Status != http.StatusForbidden {
		t.Fatalf("dgx-01's agent asking as dgx-02: %v, want a 403", err)
	}

	cp := scheduling.Checkpoint{At: time.Now().UTC().Truncate(time.Microsecond), Step: 300, Location: "/ckpt/step-300"}
	if err := c.RecordCheckpoint(ctx, job.ID, runID, cp); err != nil {
		t.Fatal(err)
	}
	stored, err := svc.store.GetJob(ctx, job.ID)
	if err != nil {
		t.Fatal(err)
	}
	if lc := stored.Recovery.LastCheckpoint; lc == nil || *lc != cp {
		t.Fatalf("job's last checkpoint = %+v, want %+v", lc, cp)
	}
	if rs, err = c.RunSpec(ctx, "dgx-01", runID); err != nil || rs.ResumeFrom == nil || *rs.ResumeFrom != cp {
		t.Fatalf("resume_from after recording = %+v, %v", rs, err)
	}
	var apiErr *httpreport.APIError
	if err := c.RecordCheckpoint(ctx, job.ID, "r-unknown", cp); !errors.As(err, &apiErr) || apiErr.Status != http.StatusNotFound {
		t.Fatalf("checkpoint of an unknown run: %v", err)
	}
}
