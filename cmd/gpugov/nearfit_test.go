package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/gpugov/gpugov/internal/scheduling"
	"github.com/gpugov/gpugov/store"
)

// TestWhyShowsSuggestionsAndReleases runs two real scheduling cycles (store
// snapshot → Plan → ApplyCycle) on a 2-GPU node: a job that runs with a
// declared run time, one behind it (capacity_busy) and one asking for more
// GPUs on one node than the node has (no_matching_capacity). why and get
// show the expected release of the first and the suggestion for the last.
func TestWhyShowsSuggestionsAndReleases(t *testing.T) {
	env := newCLIEnv(t)
	ctx := context.Background()
	pool := scheduling.Pool{Name: "a100-east", Available: true, Nodes: []scheduling.Node{{
		Name: "node-1", CPUMilli: 64000, MemoryMiB: 512000, Schedulable: true,
		GPUs: []scheduling.GPU{
			{UUID: "GPU-aaaa", Model: "A100-SXM4-80GB", MemoryMiB: 81920, NVLinkDomain: "nv0", Healthy: true},
			{UUID: "GPU-bbbb", Model: "A100-SXM4-80GB", MemoryMiB: 81920, NVLinkDomain: "nv0", Healthy: true},
		},
	}}}
	if err := env.store.UpsertInventory(ctx, []scheduling.Pool{pool}); err != nil {
		t.Fatal(err)
	}
	runner := env.submitCLI(t, jobYAML) // 2 GPUs, run_seconds 3600
	busy := env.submitCLI(t, jobYAML)
	tooBig := env.submitCLI(t, strings.Replace(jobYAML, "gpus: 2", "gpus: 4", 1))
	policy := scheduling.DefaultPolicy()
	cycle := func(id string, at time.Time) *store.CycleOutcome {
		t.Helper()
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
	start := time.Now().UTC().Truncate(time.Second)
	placed := cycle("c1", start)
	if len(placed.Placed) != 1 || placed.Placed[0].JobID != runner {
		t.Fatalf("first cycle placed %+v, want %s", placed.Placed, runner)
	}
	if _, err := env.store.MarkRunning(ctx, runner, placed.Placed[0].AllocationID, 0, start); err != nil {
		t.Fatal(err)
	}
	cycle("c2", start.Add(time.Second))
	displayLocation = time.UTC
	clientNow = func() time.Time { return start.Add(2 * time.Second) }
	t.Cleanup(func() { displayLocation, clientNow = time.Local, time.Now })

	out, _, err := env.run(t, "why", busy)
	if err != nil {
		t.Fatal(err)
	}
	wantRelease := "expected release: job " + runner + " frees 2000 milli-GPU, expected end ~" +
		formatClock(start.Add(time.Hour)) + " (declared run time)\n"
	if !strings.Contains(out, "capacity_busy") || !strings.Contains(out, wantRelease) {
		t.Fatalf("why %s:\n%s\nwant a line %q", busy, out, wantRelease)
	}
	out, _, err = env.run(t, "why", tooBig)
	if err != nil {
		t.Fatal(err)
	}
	wantFit := "would change it: fits when its GPUs are free with gpus ≤ 2 on one node: 2 matching GPUs, 0 free (amend gpus: 2)\n"
	if !strings.Contains(out, "no_matching_capacity") || !strings.Contains(out, wantFit) {
		t.Fatalf("why %s:\n%s\nwant a line %q", tooBig, out, wantFit)
	}
	t.Logf("gpugov why %s:\n%s", tooBig, out)
	out, _, err = env.run(t, "get", tooBig)
	if err != nil || !strings.Contains(out, "WOULD FIT") || !strings.Contains(out, "fits when its GPUs are free with gpus ≤ 2") {
		t.Fatalf("get %s: %v\n%s", tooBig, err, out)
	}
	out, _, err = env.run(t, "get", busy)
	if err != nil || !strings.Contains(out, "RELEASE") || !strings.Contains(out, "job "+runner+" frees 2000 milli-GPU") {
		t.Fatalf("get %s: %v\n%s", busy, err, out)
	}
}
