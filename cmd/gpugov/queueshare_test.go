package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/gpugov/gpugov/internal/scheduling"
	"github.com/gpugov/gpugov/internal/vocab"
)

// `gpugov why` explains both queue shares from a real cycle (store
// snapshot → Plan → ApplyCycle): a job served first because its queue is
// below its min_share, and a job its queue's max_share holds back.
func TestWhyExplainsQueueShares(t *testing.T) {
	env := newCLIEnv(t)
	ctx := context.Background()
	pool := scheduling.Pool{Name: "a100-east", Available: true, Stage: vocab.StageAutomate, Nodes: []scheduling.Node{{
		Name: "node-1", CPUMilli: 64000, MemoryMiB: 512000, Schedulable: true,
		GPUs: []scheduling.GPU{
			{UUID: "GPU-aaaa", Model: "A100-SXM4-80GB", MemoryMiB: 81920, NVLinkDomain: "nv0", Healthy: true},
			{UUID: "GPU-bbbb", Model: "A100-SXM4-80GB", MemoryMiB: 81920, NVLinkDomain: "nv0", Healthy: true},
		},
	}}}
	if err := env.store.UpsertInventory(ctx, []scheduling.Pool{pool}); err != nil {
		t.Fatal(err)
	}
	setQueue := func(minShare, maxShare float64) {
		t.Helper()
		if err := env.store.UpsertQueues(ctx, []scheduling.Queue{{Name: "train", Tier: vocab.TierStandard, ServiceShare: 1,
			MinShare: minShare, MaxShare: maxShare}}); err != nil {
			t.Fatal(err)
		}
	}
	cycle := func(id string) {
		t.Helper()
		now := time.Now().UTC()
		snap, err := env.store.LoadSnapshot(ctx, now)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := env.store.ApplyCycle(ctx, id, scheduling.Plan(snap, nil, now), now); err != nil {
			t.Fatal(err)
		}
	}
	submit := func() string {
		t.Helper()
		out, _, err := env.run(t, "submit", "-f", writeFile(t, jobYAML))
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(out)
	}
	why := func(id string) string {
		t.Helper()
		out, _, err := env.run(t, "why", id)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	setQueue(0.5, 0)
	first := submit()
	cycle("c-min")
	if out, want := why(first), "served before queues at or above their min_share (not before production): queue train below its min_share 0.5 of pool a100-east: 1 of 2 GPUs guaranteed, 0 in use"; !strings.Contains(out, want) {
		t.Errorf("why of the boosted job:\n%s\nlacks %q", out, want)
	}
	setQueue(0, 0.5)
	second := submit()
	cycle("c-cap")
	out := why(second)
	for _, want := range []string{"quota_exhausted", "queue train at its max_share 0.5 of pool a100-east: 1 of 2 GPUs",
		"the request alone is larger than the cap", "waiting will not help"} {
		if !strings.Contains(out, want) {
			t.Errorf("why of the capped job:\n%s\nlacks %q", out, want)
		}
	}
}
