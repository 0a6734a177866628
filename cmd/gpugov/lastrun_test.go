package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/gpugov/gpugov/internal/scheduling"
	"github.com/gpugov/gpugov/internal/vocab"
)

// `gpugov why` and `gpugov get` on a job whose run failed say when it
// started and ended and why the run failed.
func TestWhyAndGetShowTheLastRun(t *testing.T) {
	env := newCLIEnv(t)
	ctx := context.Background()
	env.addA100Pool(t, "", "GPU-aaaa", "GPU-bbbb")
	out, _, err := env.run(t, "submit", "-f", writeFile(t, jobYAML))
	if err != nil {
		t.Fatal(err)
	}
	id := strings.TrimSpace(out)
	start := time.Now().UTC().Truncate(time.Second)
	placed, err := env.store.ApplyCycle(ctx, "c-run", &scheduling.Result{PolicyVersion: "test", At: start,
		Placements: []scheduling.Placement{{JobID: id, Pool: "a100-east", Node: "node-1", Rank: 1,
			GPUs: []scheduling.GPUShare{{UUID: "GPU-aaaa", Milli: 1000}, {UUID: "GPU-bbbb", Milli: 1000}}}}}, start)
	if err != nil || len(placed.Placed) != 1 {
		t.Fatalf("placement: %+v, %v", placed, err)
	}
	runID, err := env.store.MarkRunning(ctx, id, placed.Placed[0].AllocationID, 0, start)
	if err != nil {
		t.Fatal(err)
	}
	end := start.Add(5 * time.Minute)
	if err := env.store.FinishRun(ctx, id, runID, vocab.RunFailed, "node failure: no agent on node node-1", end); err != nil {
		t.Fatal(err)
	}
	displayLocation = time.UTC
	t.Cleanup(func() { displayLocation = time.Local })

	out, _, err = env.run(t, "why", id)
	if err != nil {
		t.Fatal(err)
	}
	want := id + " is failed (final); it no longer waits\nlast run: #1 " + runID + ", failed at " +
		end.Format("15:04") + ": node failure: no agent on node node-1\n"
	if out != want {
		t.Fatalf("why:\n got %q\nwant %q", out, want)
	}
	out, _, err = env.run(t, "get", id)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"STARTED", "ENDED", "LAST RUN", "#1 " + runID + ", failed at", "node failure"} {
		if !strings.Contains(out, s) {
			t.Errorf("get output lacks %q:\n%s", s, out)
		}
	}
}
