package inventory_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"

	"github.com/gpugov/gpugov/internal/inventory"
	"github.com/gpugov/gpugov/internal/inventory/nvmlinv"
	"github.com/gpugov/gpugov/internal/inventory/nvmlinv/nvmltest"
	"github.com/gpugov/gpugov/internal/inventory/static"
	"github.com/gpugov/gpugov/internal/scheduling"
	"github.com/gpugov/gpugov/internal/vocab"
)

var at = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

func mockCollector(s *server.Server) *nvmlinv.Collector {
	return &nvmlinv.Collector{Lib: s, Node: "dgx-01", Pool: "a100-east", Now: func() time.Time { return at }}
}

func TestPoolsGroupsAndSorts(t *testing.T) {
	gpu := func(uuid string, healthy bool) inventory.GPUInfo {
		return inventory.GPUInfo{UUID: uuid, Model: "A100-SXM4-80GB", MemoryTotalMiB: 81920, NVLinkDomain: "nvlink-0", Healthy: healthy}
	}
	nodes := []inventory.NodeInventory{
		{Node: "b2", Pool: "b", GPUs: []inventory.GPUInfo{gpu("G3", true)}},
		{Node: "a1", Pool: "a", CPUMilli: 64000, MemoryMiB: 1024, GPUs: []inventory.GPUInfo{gpu("G1", true), gpu("G2", false)}},
		{Node: "b1", Pool: "b", GPUs: []inventory.GPUInfo{gpu("G4", true)}},
	}
	got := inventory.Pools(nodes)
	want := []scheduling.Pool{
		{Name: "a", Available: true, Stage: vocab.StageObserve, Nodes: []scheduling.Node{{
			Name: "a1", CPUMilli: 64000, MemoryMiB: 1024, Schedulable: true, GPUs: []scheduling.GPU{
				{UUID: "G1", Model: "A100-SXM4-80GB", MemoryMiB: 81920, NVLinkDomain: "nvlink-0", Healthy: true},
				{UUID: "G2", Model: "A100-SXM4-80GB", MemoryMiB: 81920, NVLinkDomain: "nvlink-0", Healthy: false},
			}}}},
		{Name: "b", Available: true, Stage: vocab.StageObserve, Nodes: []scheduling.Node{
			{Name: "b1", Schedulable: true, GPUs: []scheduling.GPU{{UUID: "G4", Model: "A100-SXM4-80GB", MemoryMiB: 81920, NVLinkDomain: "nvlink-0", Healthy: true}}},
			{Name: "b2", Schedulable: true, GPUs: []scheduling.GPU{{UUID: "G3", Model: "A100-SXM4-80GB", MemoryMiB: 81920, NVLinkDomain: "nvlink-0", Healthy: true}}},
		}},
	}
	if gotJSON, wantJSON := mustJSON(t, got), mustJSON(t, want); gotJSON != wantJSON {
		t.Errorf("Pools =\n%s\nwant\n%s", gotJSON, wantJSON)
	}
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestSamplesFromNVMLInventory(t *testing.T) {
	inv, err := mockCollector(nvmltest.NewDGXA100(nvmltest.NVSwitchAllToAll)).CollectNode(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	samples := inv.Samples()
	if len(samples) != nvmltest.GPUCount {
		t.Fatalf("got %d samples, want %d", len(samples), nvmltest.GPUCount)
	}
	for i, s := range samples {
		want := inventory.UtilizationSample{GPUUUID: nvmltest.UUID(i), At: at,
			GPUPercent: int(nvmltest.UtilizationGPU(i)), MemoryUsedMiB: nvmltest.ProcessMemoryMiB(i) * int64(i%2)}
		if s != want {
			t.Errorf("sample %d = %+v, want %+v", i, s, want)
		}
	}
}

// TestProbeJSONShape runs the probe against the DGX A100 mock and checks the JSON
// field names the service and operators read.
func TestProbeJSONShape(t *testing.T) {
	src := mockCollector(nvmltest.NewDGXA100(nvmltest.Split2x4))
	var out bytes.Buffer
	if err := inventory.Probe(context.Background(), src, &out); err != nil {
		t.Fatalf("Probe: %v", err)
	}
	var raw []map[string]any
	if err := json.Unmarshal(out.Bytes(), &raw); err != nil {
		t.Fatalf("probe output is not a JSON array of objects: %v\n%s", err, out.String())
	}
	if len(raw) != 1 {
		t.Fatalf("probe printed %d nodes, want 1", len(raw))
	}
	wantNodeKeys := []string{"collected_at", "cpu_milli", "cuda_version", "driver_version", "gpus", "memory_mib",
		"node", "nvml_version", "pool", "source"}
	if got := slices.Sorted(maps.Keys(raw[0])); !slices.Equal(got, wantNodeKeys) {
		t.Errorf("node keys = %q, want %q", got, wantNodeKeys)
	}
	gpus, _ := raw[0]["gpus"].([]any)
	if len(gpus) != nvmltest.GPUCount {
		t.Fatalf("gpus = %d entries, want %d", len(gpus), nvmltest.GPUCount)
	}
	gpu, _ := gpus[1].(map[string]any)
	wantGPUKeys := []string{"health_notes", "healthy", "index", "memory_total_mib", "memory_used_mib", "model",
		"nvlink_domain", "nvlink_peers", "pci_bus_id", "processes", "utilization_gpu_percent", "utilization_memory_percent", "uuid"}
	if got := slices.Sorted(maps.Keys(gpu)); !slices.Equal(got, wantGPUKeys) {
		t.Errorf("gpu keys = %q, want %q", got, wantGPUKeys)
	}
	if gpu["uuid"] != nvmltest.UUID(1) || gpu["nvlink_domain"] != "nvlink-0" || gpu["memory_total_mib"] != 40960.0 {
		t.Errorf("gpu 1 = %v", gpu)
	}
	procs, _ := gpu["processes"].([]any)
	if len(procs) != 1 || procs[0].(map[string]any)["pid"] != float64(nvmltest.ProcessPID) {
		t.Errorf("gpu 1 processes = %v", gpu["processes"])
	}
	if raw[0]["collected_at"] != "2026-11-30T12:00:00Z" || raw[0]["cuda_version"] != "12.4" {
		t.Errorf("collected_at %v cuda %v", raw[0]["collected_at"], raw[0]["cuda_version"])
	}

	// The JSON decodes back into exactly what was collected.
	var decoded []inventory.NodeInventory
	if err := json.Unmarshal(out.Bytes(), &decoded); err != nil {
		t.Fatal(err)
	}
	want, err := src.Collect(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if mustJSON(t, decoded) != mustJSON(t, want) {
		t.Errorf("decoded probe output differs from the collected inventory")
	}
}

func TestProbeWithoutNVML(t *testing.T) {
	s := nvmltest.NewDGXA100(nvmltest.NVSwitchAllToAll)
	s.InitFunc = func() nvml.Return { return nvml.ERROR_LIBRARY_NOT_FOUND }
	var out bytes.Buffer
	err := inventory.Probe(context.Background(), mockCollector(s), &out)
	if !errors.Is(err, nvmlinv.ErrUnavailable) || !strings.Contains(err.Error(), "--inventory-file FILE") {
		t.Errorf("err = %v, want the no-NVML explanation", err)
	}
	if out.Len() != 0 {
		t.Errorf("probe printed %q on failure", out.String())
	}
}

func TestProbeStaticFile(t *testing.T) {
	var out bytes.Buffer
	src := static.Source{Path: "static/testdata/inventory.yaml", Node: "t4-west-01"}
	if err := inventory.Probe(context.Background(), src, &out); err != nil {
		t.Fatal(err)
	}
	var nodes []inventory.NodeInventory
	if err := json.Unmarshal(out.Bytes(), &nodes); err != nil {
		t.Fatal(err)
	}
	if len(nodes) != 1 || nodes[0].Source != inventory.SourceStatic || len(nodes[0].GPUs) != 2 || nodes[0].GPUs[0].Model != "T4" {
		t.Errorf("static probe = %+v", nodes)
	}
}

// recorder is a Reporter that records what it is given and can fail on demand.
type recorder struct {
	mu      sync.Mutex
	reports []inventory.NodeInventory
	samples [][]inventory.UtilizationSample
	fail    error
	got     chan struct{}
}

func newRecorder() *recorder { return &recorder{got: make(chan struct{}, 100)} }

func (r *recorder) Report(_ context.Context, inv inventory.NodeInventory) error {
	r.mu.Lock()
	r.reports = append(r.reports, inv)
	r.mu.Unlock()
	r.got <- struct{}{}
	return r.fail
}

func (r *recorder) ReportSamples(_ context.Context, s []inventory.UtilizationSample) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.samples = append(r.samples, s)
	return r.fail
}

// runUntil runs the agent until the reporter got n reports, then stops it and
// returns Run's result.
func runUntil(t *testing.T, a *inventory.Agent, rec *recorder, n int) error {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	for range n {
		select {
		case <-rec.got:
		case err := <-done:
			cancel()
			return err
		case <-time.After(10 * time.Second):
			cancel()
			t.Fatalf("no report within 10s")
		}
	}
	cancel()
	return <-done
}

func bufferLogger() (*slog.Logger, *bytes.Buffer) {
	var buf bytes.Buffer
	return slog.New(slog.NewTextHandler(&syncWriter{w: &buf}, &slog.HandlerOptions{Level: slog.LevelDebug})), &buf
}

// syncWriter serialises writes of the agent goroutine and reads of the test.
type syncWriter struct {
	mu sync.Mutex
	w  *bytes.Buffer
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}

func TestAgentRefreshesAndReports(t *testing.T) {
	s := nvmltest.NewDGXA100(nvmltest.NVSwitchAllToAll)
	rec := newRecorder()
	logger, _ := bufferLogger()
	a := &inventory.Agent{Source: mockCollector(s), Reporter: rec, Refresh: 5 * time.Millisecond, Logger: logger}
	if err := runUntil(t, a, rec, 3); err != nil {
		t.Fatalf("Run = %v, want nil after cancel", err)
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(rec.reports) < 3 || len(rec.samples) < 3 {
		t.Fatalf("%d reports, %d sample batches; want >= 3 each", len(rec.reports), len(rec.samples))
	}
	if len(rec.reports[0].GPUs) != nvmltest.GPUCount || len(rec.samples[0]) != nvmltest.GPUCount {
		t.Errorf("first report has %d GPUs and %d samples", len(rec.reports[0].GPUs), len(rec.samples[0]))
	}
	if n, m := len(s.InitCalls()), len(s.ShutdownCalls()); n != m || n < 3 {
		t.Errorf("Init %d, Shutdown %d calls", n, m)
	}
}

func TestAgentFirstCollectionErrorStopsIt(t *testing.T) {
	s := nvmltest.NewDGXA100(nvmltest.NVSwitchAllToAll)
	s.InitFunc = func() nvml.Return { return nvml.ERROR_LIBRARY_NOT_FOUND }
	rec := newRecorder()
	logger, _ := bufferLogger()
	a := &inventory.Agent{Source: mockCollector(s), Reporter: rec, Refresh: time.Millisecond, Logger: logger}
	err := a.Run(context.Background())
	if !errors.Is(err, nvmlinv.ErrUnavailable) {
		t.Errorf("Run = %v, want ErrUnavailable", err)
	}
	if len(rec.reports) != 0 {
		t.Errorf("reported %d inventories", len(rec.reports))
	}
}

func TestAgentRetriesLaterErrors(t *testing.T) {
	s := nvmltest.NewDGXA100(nvmltest.NVSwitchAllToAll)
	var mu sync.Mutex
	inits := 0
	s.InitFunc = func() nvml.Return {
		mu.Lock()
		defer mu.Unlock()
		inits++
		if inits == 2 { // the second refresh fails, e.g. during a GPU reset
			return nvml.ERROR_UNKNOWN
		}
		return nvml.SUCCESS
	}
	rec := newRecorder()
	rec.fail = errors.New("service unavailable")
	logger, logs := bufferLogger()
	a := &inventory.Agent{Source: mockCollector(s), Reporter: rec, Refresh: 5 * time.Millisecond, Logger: logger}
	if err := runUntil(t, a, rec, 2); err != nil {
		t.Fatalf("Run = %v, want nil", err)
	}
	text := logs.String()
	for _, want := range []string{"inventory refresh failed", "nvml Init(): ERROR_UNKNOWN", "reporting inventory failed",
		"reporting utilization samples failed", "service unavailable"} {
		if !strings.Contains(text, want) {
			t.Errorf("logs lack %q:\n%s", want, text)
		}
	}
}

func TestAgentStaticSourceSendsNoSamples(t *testing.T) {
	rec := newRecorder()
	logger, _ := bufferLogger()
	a := &inventory.Agent{Source: static.Source{Path: "static/testdata/inventory.yaml"}, Reporter: rec,
		Refresh: 5 * time.Millisecond, Logger: logger}
	if err := runUntil(t, a, rec, 3); err != nil {
		t.Fatal(err)
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(rec.samples) != 0 {
		t.Errorf("static source sent %d sample batches", len(rec.samples))
	}
	if rec.reports[0].Node != "a100-east-01" || rec.reports[2].Node != "t4-west-01" {
		t.Errorf("first refresh reported %q, %q", rec.reports[0].Node, rec.reports[2].Node)
	}
}

func TestAgentRejectsZeroRefresh(t *testing.T) {
	a := &inventory.Agent{Source: static.Source{Path: "static/testdata/inventory.yaml"}, Reporter: newRecorder()}
	if err := a.Run(context.Background()); err == nil || !strings.Contains(err.Error(), "refresh interval must be > 0") {
		t.Errorf("Run = %v", err)
	}
}

func TestLogReporter(t *testing.T) {
	logger, logs := bufferLogger()
	inv, err := mockCollector(nvmltest.NewDGXA100(nvmltest.NVSwitchAllToAll)).CollectNode(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	inv.GPUs[2].Healthy = false
	r := inventory.LogReporter{Logger: logger}
	if err := r.Report(context.Background(), inv); err != nil {
		t.Fatal(err)
	}
	if err := r.ReportSamples(context.Background(), inv.Samples()); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"msg=inventory node=dgx-01 pool=a100-east source=nvml gpus=8 unhealthy_gpus=1",
		"msg=gpu node=dgx-01 index=7 uuid=" + nvmltest.UUID(7), `msg="utilization samples" count=8`,
		"msg=utilization gpu=" + nvmltest.UUID(3)} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("logs lack %q:\n%s", want, logs.String())
		}
	}
}
