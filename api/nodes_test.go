package api

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpugov/gpugov/internal/inventory"
	"github.com/gpugov/gpugov/internal/scheduling"
	"github.com/gpugov/gpugov/internal/vocab"
	"github.com/gpugov/gpugov/store"
)

// tokAgent is a node agent's token in the node tests.
const tokAgent = "tok-agent"

// newNodeTestEnv is newTestEnv whose server also knows tokAgent (role agent).
func newNodeTestEnv(t *testing.T) *testEnv {
	t.Helper()
	env := newTestEnv(t)
	toks, err := NewTokens(map[string]Principal{
		tokAlice: {Name: "alice", Project: "vision", Role: vocab.RoleSubmitter},
		tokOps:   {Name: "olga", Project: "platform", Role: vocab.RoleOperator},
		tokAgent: {Name: "agent-node-1", Project: "platform", Role: vocab.RoleAgent, Node: "node-1"},
	})
	if err != nil {
		t.Fatal(err)
	}
	env.server = New(StoreFrom(env.store), env.wf, toks, WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	return env
}

// nodeReport is node-1 of testPools as its agent reports it, with GPU-aaaa
// unhealthy, GPU-bbbb gone and a new GPU-cccc.
func nodeReport() inventory.NodeInventory {
	gpu := func(i int, uuid string, healthy bool) inventory.GPUInfo {
		return inventory.GPUInfo{Index: i, UUID: uuid, Model: "A100-SXM4-80GB", MemoryTotalMiB: 81920,
			MemoryUsedMiB: 1024, UtilizationGPUPercent: 40, NVLinkDomain: "nv0", Healthy: healthy}
	}
	return inventory.NodeInventory{
		Node: "node-1", Pool: "a100-east", Source: inventory.SourceNVML, CPUMilli: 64000, MemoryMiB: 512000,
		// Sent out of index order: the store must keep NVML's order.
		GPUs:        []inventory.GPUInfo{gpu(1, "GPU-cccc", true), gpu(0, "GPU-aaaa", false)},
		CollectedAt: time.Now().UTC(),
	}
}

func TestReportInventoryUpsertsNodeAndAuditsChanges(t *testing.T) {
	t.Parallel()
	env := newNodeTestEnv(t)
	r := env.do(http.MethodPost, "/v1/nodes/node-1/inventory", tokAgent, nodeReport())
	if r.status != http.StatusOK {
		t.Fatalf("report: %d %s", r.status, r.body)
	}
	var res NodeReportResult
	r.decode(t, &res)
	if !res.Changed || res.GPUs != 2 || !slices.Equal(res.Added, []string{"GPU-cccc"}) ||
		!slices.Equal(res.Removed, []string{"GPU-bbbb"}) || !slices.Equal(res.BecameUnhealthy, []string{"GPU-aaaa"}) {
		t.Fatalf("result = %+v", res)
	}
	var inv Inventory
	env.do(http.MethodGet, "/v1/inventory", tokOps, nil).decode(t, &inv)
	gpus := inv.Pools[0].Nodes[0].GPUs
	if len(gpus) != 2 || gpus[0].UUID != "GPU-aaaa" || gpus[0].Healthy || gpus[1].UUID != "GPU-cccc" {
		t.Fatalf("stored GPUs = %+v", gpus)
	}
	audit, err := env.store.AuditFor(context.Background(), "node/node-1", 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(audit) != 1 || audit[0].Actor != "agent-node-1" || audit[0].Action != store.AuditInventoryChange {
		t.Fatalf("audit = %+v", audit)
	}
	// The next refresh reports the same: nothing changes, nothing is audited.
	r = env.do(http.MethodPost, "/v1/nodes/node-1/inventory", tokAgent, nodeReport())
	r.decode(t, &res)
	if r.status != http.StatusOK || res.Changed {
		t.Fatalf("repeat: %d %s", r.status, r.body)
	}
	if n := env.counts()["audit_log"]; n != 1 {
		t.Fatalf("%d audit entries after a repeat, want 1", n)
	}
}

func TestReportInventoryRejectsBadReportsNamingFields(t *testing.T) {
	t.Parallel()
	env := newNodeTestEnv(t)
	before := env.counts()
	cases := []struct {
		name   string
		path   string
		mutate func(*inventory.NodeInventory)
		status int
		field  string
	}{
		// An operator's token: the agent's may report for node-1 only (403).
		{"node differs from path", "/v1/nodes/node-2/inventory", func(*inventory.NodeInventory) {}, 422, "node"},
		{"bad node name", "/v1/nodes/-x/inventory", func(*inventory.NodeInventory) {}, 422, "name"},
		{"no pool", "", func(n *inventory.NodeInventory) { n.Pool = "" }, 422, "pool"},
		{"unknown source", "", func(n *inventory.NodeInventory) { n.Source = "guess" }, 422, "source"},
		{"comma in UUID", "", func(n *inventory.NodeInventory) { n.GPUs[1].UUID = "GPU-a,GPU-b" }, 422, "gpus[1].uuid"},
		{"duplicate UUID", "", func(n *inventory.NodeInventory) { n.GPUs[1].UUID = n.GPUs[0].UUID }, 422, "gpus[1].uuid"},
		{"duplicate index", "", func(n *inventory.NodeInventory) { n.GPUs[1].Index = 1 }, 422, "gpus[1].index"},
		{"zero memory", "", func(n *inventory.NodeInventory) { n.GPUs[0].MemoryTotalMiB = 0 }, 422, "gpus[0].memory_total_mib"},
		{"utilisation over 100", "", func(n *inventory.NodeInventory) { n.GPUs[0].UtilizationGPUPercent = 101 }, 422, "gpus[0].utilization_gpu_percent"},
		{"negative host memory", "", func(n *inventory.NodeInventory) { n.MemoryMiB = -1 }, 422, "memory_mib"},
		{"empty label value", "", func(n *inventory.NodeInventory) { n.Labels = map[string]string{"network": ""} }, 422, "labels.network"},
		{"empty label key", "", func(n *inventory.NodeInventory) { n.Labels = map[string]string{"": "x"} }, 422, "labels"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rep := nodeReport()
			tc.mutate(&rep)
			path, token := tc.path, tokOps
			if path == "" {
				path, token = "/v1/nodes/node-1/inventory", tokAgent
			}
			r := env.do(http.MethodPost, path, token, rep)
			if r.status != tc.status || r.apiError(t).Field != tc.field {
				t.Fatalf("%d %s, want %d naming %s", r.status, r.body, tc.status, tc.field)
			}
		})
	}
	r := env.do(http.MethodPost, "/v1/nodes/node-1/inventory", tokAgent,
		`{"node":"node-1","pool":"a100-east","source":"nvml","gpus":[{"uuid":"GPU-x","modle":"A100"}]}`)
	if r.status != http.StatusBadRequest || r.apiError(t).Field != "gpus[0].modle" {
		t.Fatalf("unknown field: %d %s", r.status, r.body)
	}
	if after := env.counts(); after["audit_log"] != before["audit_log"] {
		t.Fatalf("rejected reports were audited: %v -> %v", before, after)
	}
	var inv Inventory
	env.do(http.MethodGet, "/v1/inventory", tokOps, nil).decode(t, &inv)
	if g := inv.Pools[0].Nodes[0].GPUs; len(g) != 2 || g[1].UUID != "GPU-bbbb" || !g[0].Healthy {
		t.Fatalf("a rejected report changed the inventory: %+v", g)
	}
}

func TestNodeRoutesAuthorization(t *testing.T) {
	t.Parallel()
	env := newNodeTestEnv(t)
	if r := env.do(http.MethodPost, "/v1/nodes/node-1/inventory", "", nodeReport()); r.status != http.StatusUnauthorized {
		t.Fatalf("no token: %d", r.status)
	}
	if r := env.do(http.MethodPost, "/v1/nodes/node-1/inventory", tokAlice, nodeReport()); r.status != http.StatusForbidden {
		t.Fatalf("submitter: %d %s", r.status, r.body)
	}
	if r := env.do(http.MethodPost, "/v1/nodes/node-1/inventory", tokOps, nodeReport()); r.status != http.StatusOK {
		t.Fatalf("operator: %d %s", r.status, r.body)
	}
	// An agent token is good for nothing but the node-agent routes.
	for _, req := range [][2]string{{http.MethodGet, "/v1/jobs"}, {http.MethodPost, "/v1/jobs"}, {http.MethodGet, "/v1/inventory"}} {
		if r := env.do(req[0], req[1], tokAgent, validSpec()); r.status != http.StatusForbidden {
			t.Errorf("agent token on %s %s: %d %s", req[0], req[1], r.status, r.body)
		}
	}
	if n := env.counts()["jobs"]; n != 0 {
		t.Fatalf("an agent token created %d jobs", n)
	}
}

func TestReportSamples(t *testing.T) {
	t.Parallel()
	env := newNodeTestEnv(t)
	at := time.Now().UTC().Truncate(time.Second)
	samples := SamplesReport{Samples: []inventory.UtilizationSample{
		{GPUUUID: "GPU-aaaa", At: at, GPUPercent: 0, MemoryUsedMiB: 0},
		{GPUUUID: "GPU-bbbb", At: at, GPUPercent: 88, MemoryUsedMiB: 60000},
	}}
	var res SamplesResult
	r := env.do(http.MethodPost, "/v1/nodes/node-1/samples", tokAgent, samples)
	r.decode(t, &res)
	if r.status != http.StatusOK || res.Received != 2 || res.Stored != 2 {
		t.Fatalf("report: %d %s", r.status, r.body)
	}
	r = env.do(http.MethodPost, "/v1/nodes/node-1/samples", tokAgent, samples)
	r.decode(t, &res)
	if r.status != http.StatusOK || res.Stored != 0 {
		t.Fatalf("retried report: %d %s, want 0 stored", r.status, r.body)
	}
	got, err := env.store.GPUSamples(context.Background(), []string{"GPU-bbbb"}, at.Add(-time.Minute))
	if err != nil || len(got) != 1 || got[0].GPUPercent != 88 || got[0].MemoryUsedMiB != 60000 {
		t.Fatalf("stored samples = %+v, %v", got, err)
	}
	bad := []struct {
		name   string
		sample inventory.UtilizationSample
		field  string
	}{
		{"GPU of no node", inventory.UtilizationSample{GPUUUID: "GPU-zzzz", At: at}, "samples[1].gpu_uuid"},
		{"percent over 100", inventory.UtilizationSample{GPUUUID: "GPU-aaaa", At: at, GPUPercent: 140}, "samples[1].gpu_percent"},
		{"far future", inventory.UtilizationSample{GPUUUID: "GPU-aaaa", At: at.Add(time.Hour)}, "samples[1].at"},
		{"no time", inventory.UtilizationSample{GPUUUID: "GPU-aaaa"}, "samples[1].at"},
		{"negative memory", inventory.UtilizationSample{GPUUUID: "GPU-aaaa", At: at, MemoryUsedMiB: -5}, "samples[1].memory_used_mib"},
	}
	for _, tc := range bad {
		t.Run(tc.name, func(t *testing.T) {
			rep := SamplesReport{Samples: []inventory.UtilizationSample{
				{GPUUUID: "GPU-aaaa", At: at.Add(time.Second)}, tc.sample}}
			r := env.do(http.MethodPost, "/v1/nodes/node-1/samples", tokAgent, rep)
			if r.status != http.StatusUnprocessableEntity || r.apiError(t).Field != tc.field {
				t.Fatalf("%d %s, want 422 naming %s", r.status, r.body, tc.field)
			}
		})
	}
	if r := env.do(http.MethodPost, "/v1/nodes/node-1/samples", tokAgent, SamplesReport{}); r.status != 422 || r.apiError(t).Field != "samples" {
		t.Fatalf("empty report: %d %s", r.status, r.body)
	}
	// Nothing of the rejected batches was stored (the valid first sample included).
	if got, _ := env.store.GPUSamples(context.Background(), []string{"GPU-aaaa"}, at.Add(time.Millisecond)); len(got) != 0 {
		t.Fatalf("rejected batches stored %+v", got)
	}
}

func TestRunSpecAndCheckpoints(t *testing.T) {
	t.Parallel()
	env := newNodeTestEnv(t)
	ctx := context.Background()
	spec := validSpec()
	spec["resources"] = map[string]any{"gpus": 1, "pool": "a100-east"}
	spec["command"] = []string{"python", "train.py", "--epochs", "3"}
	spec["env"] = map[string]string{"SEED": "7"}
	job := env.mustSubmit(tokAlice, spec)
	out, err := env.store.ApplyCycle(ctx, "c1", &scheduling.Result{PolicyVersion: "v1", At: time.Now(),
		Placements: []scheduling.Placement{{JobID: job.ID, Pool: "a100-east", Node: "node-1", Rank: 1,
			GPUs: []scheduling.GPUShare{{UUID: "GPU-aaaa", Milli: 1000}}}}}, time.Now())
	if err != nil || len(out.Placed) != 1 {
		t.Fatalf("apply cycle: %+v %v", out, err)
	}
	runID, err := env.store.MarkRunning(ctx, job.ID, out.Placed[0].AllocationID, 0, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	var rs RunSpec
	r := env.do(http.MethodGet, "/v1/nodes/node-1/runs/"+runID, tokAgent, nil)
	r.decode(t, &rs)
	if r.status != http.StatusOK || rs.JobID != job.ID || !slices.Equal(rs.Command, []string{"python", "train.py", "--epochs", "3"}) ||
		rs.Env["SEED"] != "7" || rs.ResumeFrom != nil || rs.Ended {
		t.Fatalf("run spec: %d %s", r.status, r.body)
	}
	if r := env.do(http.MethodGet, "/v1/nodes/node-2/runs/"+runID, tokAgent, nil); r.status != http.StatusForbidden {
		t.Fatalf("node-1's agent asking as node-2: %d %s, want 403", r.status, r.body)
	}
	if r := env.do(http.MethodGet, "/v1/nodes/node-2/runs/"+runID, tokOps, nil); r.status != http.StatusNotFound {
		t.Fatalf("run asked for another node: %d %s", r.status, r.body)
	}
	if r := env.do(http.MethodGet, "/v1/nodes/node-1/runs/r-nope", tokAgent, nil); r.status != http.StatusNotFound {
		t.Fatalf("unknown run: %d %s", r.status, r.body)
	}

	cpPath := "/v1/jobs/" + job.ID + "/runs/" + runID + "/checkpoints"
	cp := Checkpoint{At: time.Now().UTC().Truncate(time.Microsecond), Step: 120, Location: "/ckpt/" + job.ID + "/step-120"}
	if r := env.do(http.MethodPost, cpPath, tokAgent, cp); r.status != http.StatusOK {
		t.Fatalf("record checkpoint: %d %s", r.status, r.body)
	}
	older := Checkpoint{At: cp.At, Step: 60, Location: "/ckpt/old"}
	if r := env.do(http.MethodPost, cpPath, tokAgent, older); r.status != http.StatusConflict || r.apiError(t).Code != CodeStale {
		t.Fatalf("late older checkpoint: %d %s, want 409 stale", r.status, r.body)
	}
	if r := env.do(http.MethodPost, cpPath, tokAgent, cp); r.status != http.StatusOK {
		t.Fatalf("the same checkpoint again: %d %s", r.status, r.body)
	}
	var got Job
	env.do(http.MethodGet, "/v1/jobs/"+job.ID, tokAlice, nil).decode(t, &got)
	if lc := got.Recovery.LastCheckpoint; lc == nil || lc.Step != 120 || lc.Location != cp.Location {
		t.Fatalf("job's last checkpoint = %+v, want step 120", lc)
	}
	env.do(http.MethodGet, "/v1/nodes/node-1/runs/"+runID, tokAgent, nil).decode(t, &rs)
	if rs.ResumeFrom == nil || rs.ResumeFrom.Step != 120 {
		t.Fatalf("resume_from = %+v, want the recorded checkpoint", rs.ResumeFrom)
	}
	if r := env.do(http.MethodPost, cpPath, tokAgent, Checkpoint{At: cp.At, Step: 130}); r.status != 422 || r.apiError(t).Field != "location" {
		t.Fatalf("checkpoint without location: %d %s", r.status, r.body)
	}
	if r := env.do(http.MethodPost, "/v1/jobs/"+job.ID+"/runs/r-nope/checkpoints", tokAgent, cp); r.status != http.StatusNotFound {
		t.Fatalf("checkpoint of unknown run: %d %s", r.status, r.body)
	}
	if r := env.do(http.MethodPost, cpPath, tokAlice, cp); r.status != http.StatusForbidden {
		t.Fatalf("submitter recording a checkpoint: %d %s", r.status, r.body)
	}
}

// An agent reports its own node's GPUs: node-2's agent listing node-1's
// GPU-aaaa would move it (and its sample evidence) to node-2. It is a 409
// naming the GPU, and nothing stored changes.
func TestAgentCannotClaimAnotherNodesGPU(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t)
	const tokAgent2 = "agent-2-token"
	toks, err := NewTokens(map[string]Principal{
		tokOps:    {Name: "olga", Project: "platform", Role: vocab.RoleOperator},
		tokAgent2: {Name: "agent-node-2", Project: "platform", Role: vocab.RoleAgent, Node: "node-2"},
	})
	if err != nil {
		t.Fatal(err)
	}
	env.server = New(StoreFrom(env.store), env.wf, toks, WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	rep := nodeReport()
	rep.Node = "node-2"
	rep.GPUs = []inventory.GPUInfo{rep.GPUs[1]} // GPU-aaaa, node-1's
	r := env.do(http.MethodPost, "/v1/nodes/node-2/inventory", tokAgent2, rep)
	if r.status != http.StatusConflict || !strings.Contains(string(r.body), `"gpus[0].uuid"`) || !strings.Contains(string(r.body), "node-1") {
		t.Fatalf("claim: %d %s, want a 409 naming gpus[0].uuid and node-1", r.status, r.body)
	}
	var inv Inventory
	env.do(http.MethodGet, "/v1/inventory", tokOps, nil).decode(t, &inv)
	if len(inv.Pools) != 1 || len(inv.Pools[0].Nodes) != 1 || inv.Pools[0].Nodes[0].Name != "node-1" || len(inv.Pools[0].Nodes[0].GPUs) != 2 {
		t.Fatalf("inventory after the refused claim: %+v", inv)
	}
	// Its own new GPU is fine.
	rep.GPUs[0].UUID = "GPU-dddd"
	if r := env.do(http.MethodPost, "/v1/nodes/node-2/inventory", tokAgent2, rep); r.status != http.StatusOK {
		t.Fatalf("own GPU: %d %s", r.status, r.body)
	}
}
