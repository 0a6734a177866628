package store_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/gpugov/gpugov/internal/scheduling"
	"github.com/gpugov/gpugov/internal/vocab"
	"github.com/gpugov/gpugov/store"
)

// agentNode is node name of pool p with the given GPUs (A100s, healthy unless
// listed in sick).
func agentNode(name string, uuids []string, sick ...string) scheduling.Node {
	n := scheduling.Node{Name: name, CPUMilli: 32000, MemoryMiB: 256000, Schedulable: true}
	for _, u := range uuids {
		n.GPUs = append(n.GPUs, scheduling.GPU{UUID: u, Model: "A100-SXM4-80GB", MemoryMiB: 81920,
			NVLinkDomain: "nv0", Healthy: !slices.Contains(sick, u)})
	}
	return n
}

func TestUpsertNodeKeepsOtherNodesAndAuditsChanges(t *testing.T) {
	t.Parallel()
	s, _ := newStore(t)
	ctx := context.Background()
	pool := testPool("p", 2, 2)
	pool.Stage = vocab.StageTrial
	if err := s.UpsertInventory(ctx, []scheduling.Pool{pool}); err != nil {
		t.Fatal(err)
	}
	// Node p-n0000 reports: GPU 0 unhealthy, GPU 1 gone, a new GPU 2.
	reported := agentNode("p-n0000", []string{"GPU-p-0000-0", "GPU-new"}, "GPU-p-0000-0")
	change, err := s.UpsertNode(ctx, "p", reported, "agent@p-n0000")
	if err != nil {
		t.Fatal(err)
	}
	if change.NodeCreated || change.PoolCreated || !change.HostChanged ||
		!slices.Equal(change.Added, []string{"GPU-new"}) || !slices.Equal(change.Removed, []string{"GPU-p-0000-1"}) ||
		!slices.Equal(change.BecameUnhealthy, []string{"GPU-p-0000-0"}) || len(change.Retained) != 0 {
		t.Fatalf("change = %+v", change)
	}
	inv, err := s.GetInventory(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(inv) != 1 || inv[0].Stage != vocab.StageTrial || len(inv[0].Nodes) != 2 {
		t.Fatalf("inventory = %+v, want pool p (trial) with both nodes", inv)
	}
	n0, n1 := inv[0].Nodes[0], inv[0].Nodes[1]
	if len(n0.GPUs) != 2 || n0.GPUs[0].UUID != "GPU-p-0000-0" || n0.GPUs[0].Healthy || n0.GPUs[1].UUID != "GPU-new" {
		t.Errorf("reported node = %+v", n0)
	}
	if len(n1.GPUs) != 2 || n1.Name != "p-n0001" {
		t.Errorf("other node changed: %+v", n1)
	}
	audit, err := s.AuditFor(ctx, "node/p-n0000", 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(audit) != 1 || audit[0].Action != store.AuditInventoryChange || audit[0].Actor != "agent@p-n0000" ||
		audit[0].Evidence["removed"] == nil {
		t.Fatalf("audit = %+v", audit)
	}

	// The same report again changes and audits nothing, and rewrites no GPU.
	version := queryInt(t, s, `SELECT version FROM inventory_version`)
	again, err := s.UpsertNode(ctx, "p", reported, "agent@p-n0000")
	if err != nil {
		t.Fatal(err)
	}
	if again.Changed() {
		t.Fatalf("repeat report changed %+v", again)
	}
	if v := queryInt(t, s, `SELECT version FROM inventory_version`); v != version {
		t.Errorf("inventory version moved %d -> %d on an unchanged report", version, v)
	}
	if n := queryInt(t, s, `SELECT count(*) FROM audit_log WHERE subject = 'node/p-n0000'`); n != 1 {
		t.Errorf("%d audit entries after a repeat, want 1", n)
	}
}

func TestUpsertNodeCreatesPoolAndRetainsAllocatedGPU(t *testing.T) {
	t.Parallel()
	s, _ := newStore(t)
	ctx := context.Background()
	first, err := s.UpsertNode(ctx, "fresh", agentNode("gpu-01", []string{"GPU-a", "GPU-b"}), "agent")
	if err != nil {
		t.Fatal(err)
	}
	if !first.PoolCreated || !first.NodeCreated || !slices.Equal(first.Added, []string{"GPU-a", "GPU-b"}) {
		t.Fatalf("first report = %+v", first)
	}
	job := submit(t, s, "vision", "fresh", 1, 0)
	res := &scheduling.Result{PolicyVersion: "v1", At: t0,
		Placements: []scheduling.Placement{place(job.ID, "fresh", "gpu-01", 1000, "GPU-b")}}
	if out, err := s.ApplyCycle(ctx, "c1", res, t0); err != nil || len(out.Placed) != 1 {
		t.Fatalf("apply cycle: %+v %v", out, err)
	}
	// GPU-b falls off the bus while allocated: kept, unhealthy.
	change, err := s.UpsertNode(ctx, "fresh", agentNode("gpu-01", []string{"GPU-a"}), "agent")
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(change.Retained, []string{"GPU-b"}) || len(change.Removed) != 0 ||
		!slices.Equal(change.BecameUnhealthy, []string{"GPU-b"}) {
		t.Fatalf("change = %+v", change)
	}
	if n := queryInt(t, s, `SELECT count(*) FROM gpus WHERE uuid = 'GPU-b' AND NOT healthy`); n != 1 {
		t.Fatalf("allocated GPU-b not kept unhealthy")
	}
	// Reporting the same again is no change: GPU-b stays retained, nothing audited.
	again, err := s.UpsertNode(ctx, "fresh", agentNode("gpu-01", []string{"GPU-a"}), "agent")
	if err != nil {
		t.Fatal(err)
	}
	if again.Changed() || !slices.Equal(again.Retained, []string{"GPU-b"}) {
		t.Fatalf("repeat = %+v, want no change with GPU-b retained", again)
	}
	// A node moving to another pool is recorded as such.
	moved, err := s.UpsertNode(ctx, "other", agentNode("gpu-01", []string{"GPU-a"}), "agent")
	if err != nil {
		t.Fatal(err)
	}
	if moved.PreviousPool != "fresh" || !moved.PoolCreated {
		t.Fatalf("move = %+v", moved)
	}
}

func TestUpsertNodeRejectsDuplicateGPUs(t *testing.T) {
	t.Parallel()
	s, _ := newStore(t)
	_, err := s.UpsertNode(context.Background(), "p", agentNode("n", []string{"GPU-x", "GPU-x"}), "agent")
	if err == nil {
		t.Fatal("duplicate UUIDs accepted")
	}
	if n := queryInt(t, s, `SELECT count(*) FROM nodes`); n != 0 {
		t.Fatalf("rejected report stored %d nodes", n)
	}
}

func TestGPUSamples(t *testing.T) {
	t.Parallel()
	s, _ := newStore(t)
	ctx := context.Background()
	if _, err := s.UpsertNode(ctx, "p", agentNode("n1", []string{"GPU-a", "GPU-b"}), "agent"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.UpsertNode(ctx, "p", agentNode("n2", []string{"GPU-z"}), "agent"); err != nil {
		t.Fatal(err)
	}
	samples := []store.GPUSample{
		{GPUUUID: "GPU-a", At: t0, GPUPercent: 97, MemoryUsedMiB: 70000},
		{GPUUUID: "GPU-a", At: t0.Add(30 * time.Second), GPUPercent: 0, MemoryUsedMiB: 0},
		{GPUUUID: "GPU-b", At: t0, GPUPercent: 3, MemoryUsedMiB: 512},
	}
	n, err := s.InsertGPUSamples(ctx, "n1", samples)
	if err != nil || n != 3 {
		t.Fatalf("insert: %d %v", n, err)
	}
	if n, err := s.InsertGPUSamples(ctx, "n1", samples); err != nil || n != 0 {
		t.Fatalf("retried insert: %d %v, want 0 new", n, err)
	}
	// n1's agent may not write evidence about n2's GPU, nor about an unknown one.
	_, err = s.InsertGPUSamples(ctx, "n1", []store.GPUSample{
		{GPUUUID: "GPU-a", At: t0.Add(time.Minute)}, {GPUUUID: "GPU-z", At: t0}, {GPUUUID: "GPU-gone", At: t0}})
	var unknown *store.UnknownGPUError
	if !errors.As(err, &unknown) || !errors.Is(err, store.ErrNotFound) || !slices.Equal(unknown.UUIDs, []string{"GPU-gone", "GPU-z"}) {
		t.Fatalf("err = %v, want unknown GPU-gone and GPU-z", err)
	}
	got, err := s.GPUSamples(ctx, []string{"GPU-a"}, t0.Add(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].GPUPercent != 0 || !got[0].At.Equal(t0.Add(30*time.Second)) {
		t.Fatalf("samples since t0+1s = %+v (the rejected batch must not be stored)", got)
	}
	pruned, err := s.PruneGPUSamples(ctx, t0.Add(time.Second), 0)
	if err != nil || pruned != 2 {
		t.Fatalf("prune: %d %v, want 2", pruned, err)
	}
}

// TestPruneGPUSamplesDeletesOnlyOld: pruning in batches smaller than the
// old rows deletes every sample taken before the cutoff, of every GPU, and
// keeps the sample taken at the cutoff and all later ones.
func TestPruneGPUSamplesDeletesOnlyOld(t *testing.T) {
	t.Parallel()
	s, _ := newStore(t)
	ctx := context.Background()
	if _, err := s.UpsertNode(ctx, "p", agentNode("n1", []string{"GPU-a", "GPU-b"}), "agent"); err != nil {
		t.Fatal(err)
	}
	var samples []store.GPUSample
	for i := range 10 {
		for _, u := range []string{"GPU-a", "GPU-b"} {
			samples = append(samples, store.GPUSample{GPUUUID: u, At: t0.Add(time.Duration(i) * 30 * time.Second), GPUPercent: i})
		}
	}
	if n, err := s.InsertGPUSamples(ctx, "n1", samples); err != nil || n != 20 {
		t.Fatalf("insert: %d %v", n, err)
	}
	cutoff := t0.Add(150 * time.Second) // samples 0..4 of each GPU are older
	pruned, err := s.PruneGPUSamples(ctx, cutoff, 3)
	if err != nil || pruned != 10 {
		t.Fatalf("prune: %d %v, want 10", pruned, err)
	}
	kept, err := s.GPUSamples(ctx, []string{"GPU-a", "GPU-b"}, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	if len(kept) != 10 {
		t.Fatalf("%d samples kept, want 10: %+v", len(kept), kept)
	}
	for _, sm := range kept {
		if sm.At.Before(cutoff) || sm.GPUPercent < 5 {
			t.Errorf("kept %+v, taken before the cutoff %s", sm, cutoff)
		}
	}
	if kept[0].GPUUUID != "GPU-a" || !kept[0].At.Equal(cutoff) {
		t.Errorf("first kept sample %+v, want GPU-a's at the cutoff", kept[0])
	}
	if pruned, err := s.PruneGPUSamples(ctx, cutoff, 3); err != nil || pruned != 0 {
		t.Fatalf("second prune: %d %v, want 0", pruned, err)
	}
}

func TestGetRunSpec(t *testing.T) {
	t.Parallel()
	s, _ := newStore(t)
	ctx := context.Background()
	if _, err := s.UpsertNode(ctx, "p", agentNode("n1", []string{"GPU-a"}), "agent"); err != nil {
		t.Fatal(err)
	}
	job, _, err := s.CreateJob(ctx, &store.NewJob{
		Project: "vision", Queue: "train", Tier: vocab.TierStandard, SubmitTime: t0,
		Request:  scheduling.ResourceRequest{GPUs: 1, Pool: "p"},
		Recovery: scheduling.RecoveryEvidence{Checkpointable: true, CheckpointIntervalSeconds: 60},
		Command:  []string{"python", "train.py"}, Env: map[string]string{"SEED": "7"},
	})
	if err != nil {
		t.Fatal(err)
	}
	out, err := s.ApplyCycle(ctx, "c1", &scheduling.Result{PolicyVersion: "v1", At: t0,
		Placements: []scheduling.Placement{place(job.ID, "p", "n1", 1000, "GPU-a")}}, t0)
	if err != nil {
		t.Fatal(err)
	}
	runID, err := s.MarkRunning(ctx, job.ID, out.Placed[0].AllocationID, 0, t0)
	if err != nil {
		t.Fatal(err)
	}
	cp := scheduling.Checkpoint{At: t0.Add(time.Minute), Step: 60, Location: "/ckpt/step-60"}
	if err := s.RecordCheckpoint(ctx, job.ID, runID, cp); err != nil {
		t.Fatal(err)
	}
	rs, err := s.GetRunSpec(ctx, runID)
	if err != nil {
		t.Fatal(err)
	}
	if rs.JobID != job.ID || rs.Node != "n1" || !slices.Equal(rs.Command, []string{"python", "train.py"}) ||
		rs.Env["SEED"] != "7" || rs.ResumeFrom == nil || *rs.ResumeFrom != cp || rs.Ended {
		t.Fatalf("run spec = %+v", rs)
	}
	if _, err := s.GetRunSpec(ctx, "r-missing"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("missing run: %v", err)
	}
}

// BenchmarkUpsertNodeUnchanged is the steady state of an agent's refresh: an
// 8-GPU node reporting the inventory already stored (every 30 s per node).
func BenchmarkUpsertNodeUnchanged(b *testing.B) {
	s, _ := newStore(b)
	ctx := context.Background()
	node := testPool("p", 1, 8).Nodes[0]
	if _, err := s.UpsertNode(ctx, "p", node, "agent"); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for b.Loop() {
		if _, err := s.UpsertNode(ctx, "p", node, "agent"); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkInsertGPUSamples stores one refresh's samples of an 8-GPU node.
func BenchmarkInsertGPUSamples(b *testing.B) {
	s, _ := newStore(b)
	ctx := context.Background()
	node := testPool("p", 1, 8).Nodes[0]
	if _, err := s.UpsertNode(ctx, "p", node, "agent"); err != nil {
		b.Fatal(err)
	}
	at := t0
	b.ResetTimer()
	for b.Loop() {
		at = at.Add(30 * time.Second)
		samples := make([]store.GPUSample, len(node.GPUs))
		for i, g := range node.GPUs {
			samples[i] = store.GPUSample{GPUUUID: g.UUID, At: at, GPUPercent: 50, MemoryUsedMiB: 4096}
		}
		if _, err := s.InsertGPUSamples(ctx, node.Name, samples); err != nil {
			b.Fatal(err)
		}
	}
}
