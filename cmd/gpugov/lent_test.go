package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/gpugov/gpugov/internal/scheduling"
	"github.com/gpugov/gpugov/internal/vocab"
	"github.com/gpugov/gpugov/store"
	"github.com/gpugov/gpugov/store/storetest"
)

// `gpugov why` on a lender's job says that its quota is lent out, to whom,
// and when it comes back (docs/design.md §5): nlp borrows vision's quota in
// a full pool, and the real planner's cycle proposes the reclaim.
func TestWhyShowsLentOutQuota(t *testing.T) {
	env := newCLIEnv(t)
	ctx := context.Background()
	node := scheduling.Node{Name: "node-1", CPUMilli: 64000, MemoryMiB: 512000, Schedulable: true}
	for _, u := range []string{"GPU-aaaa", "GPU-bbbb", "GPU-cccc", "GPU-dddd"} {
		node.GPUs = append(node.GPUs, scheduling.GPU{UUID: u, Model: "A100-SXM4-80GB", MemoryMiB: 81920, NVLinkDomain: "nv0", Healthy: true})
	}
	pool := scheduling.Pool{Name: "a100-east", Available: true, Stage: vocab.StageAutomate, Nodes: []scheduling.Node{node}}
	if err := env.store.UpsertInventory(ctx, []scheduling.Pool{pool}); err != nil {
		t.Fatal(err)
	}
	if err := env.store.UpsertQuotas(ctx, []scheduling.Quota{
		{Project: "vision", Pool: "a100-east", NominalMilli: 2000},
		{Project: "nlp", Pool: "a100-east", NominalMilli: 2000, BorrowingLimitMilli: 2000},
	}); err != nil {
		t.Fatal(err)
	}
	policy := scheduling.DefaultPolicy()
	policy.Preemption.RequireVerifiedResume = false
	start := time.Now().UTC().Truncate(time.Second).Add(-time.Minute)
	cycle := func(id string, at time.Time) *store.CycleOutcome {
		snap, err := env.store.LoadSnapshot(ctx, at)
		if err != nil {
			t.Fatal(err)
		}
		out, err := env.store.ApplyCycle(ctx, id, scheduling.Plan(snap, &policy, at), at)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	for range 2 {
		storetest.Submit(t, env.store, &store.NewJob{Project: "nlp", Queue: "train", Tier: vocab.TierStandard,
			SubmitTime: start, RunSeconds: 3600, Recovery: scheduling.RecoveryEvidence{Checkpointable: true, CheckpointIntervalSeconds: 60},
			Request: scheduling.ResourceRequest{GPUs: 2, Pool: "a100-east"}})
	}
	placed := cycle("c-borrow", start)
	if len(placed.Placed) != 2 {
		t.Fatalf("nlp's jobs placed: %+v", placed)
	}
	for _, p := range placed.Placed {
		if _, err := env.store.MarkRunning(ctx, p.JobID, p.AllocationID, 0, start); err != nil {
			t.Fatal(err)
		}
	}
	out, _, err := env.run(t, "submit", "-f", writeFile(t, jobYAML))
	if err != nil {
		t.Fatal(err)
	}
	id := strings.TrimSpace(out)
	now := start.Add(30 * time.Second)
	if got := cycle("c-lend", now); len(got.Preemptions) != 1 || got.Preemptions[0].ForJobID != id {
		t.Fatalf("cycle: %+v, want one preemption for %s", got, id)
	}
	out, _, err = env.run(t, "why", id)
	if err != nil {
		t.Fatal(err)
	}
	back := now.Add(120 * time.Second).Format(time.RFC3339)
	if !strings.Contains(out, "quota of project vision is lent out to nlp (2000 milli-GPU); it comes back by "+back) {
		t.Fatalf("why:\n%s\nwant the lent-out quota and its return by %s", out, back)
	}
	t.Logf("gpugov why %s:\n%s", id, out)
}
