package main

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/gpugov/gpugov/internal/scheduling"
	"github.com/gpugov/gpugov/internal/vocab"
)

// TestHoldReleaseCancelCommands holds, releases and cancels a job through the
// CLI against the real API and store, checks each change is stored and
// audited, and that bad calls are usage errors (exit code 2).
func TestHoldReleaseCancelCommands(t *testing.T) {
	env := newCLIEnv(t)
	id := env.submitCLI(t, jobYAML)

	out, stderr, err := env.run(t, "hold", id, "--reason", "data not staged yet")
	if err != nil || !strings.Contains(out, "held") {
		t.Fatalf("hold: %q %v (%s)", out, err, stderr)
	}
	if j, _ := env.snapshot(t, id); !j.Held {
		t.Fatal("hold: the stored job is not held")
	}
	if out, stderr, err = env.run(t, "release", id); err != nil || strings.Contains(out, "held") {
		t.Fatalf("release: %q %v (%s)", out, err, stderr)
	}
	if j, _ := env.snapshot(t, id); j.Held {
		t.Fatal("release: the stored job is still held")
	}
	if out, stderr, err = env.run(t, "cancel", id, "--reason", "wrong dataset", "--format", "json"); err != nil ||
		!strings.Contains(out, `"state": "cancelled"`) {
		t.Fatalf("cancel: %q %v (%s)", out, err, stderr)
	}
	j, audit := env.snapshot(t, id)
	if j.State != vocab.JobCancelled {
		t.Fatalf("cancel: stored state %s", j.State)
	}
	var actions []string
	for _, a := range audit {
		actions = append(actions, a.Action)
	}
	for _, want := range []string{"hold", "release", "cancel"} {
		if !strings.Contains(strings.Join(actions, " "), want) {
			t.Errorf("audit %v lacks %s", actions, want)
		}
	}

	var ue usageError
	for _, args := range [][]string{
		{"hold"},                 // no job
		{"release", id, "extra"}, // too many
		{"cancel", "j-missing"},  // 404 from the API
		{"hold", id},             // a cancelled job cannot be held: 409
		{"cancel", id, "--format", "yaml"},
	} {
		if _, _, err := env.run(t, args...); !errors.As(err, &ue) {
			t.Errorf("gpugov %v: error %v, want a usage error", args, err)
		}
	}
}

// TestActionsOnAFinishedJob: cancel, hold and release of a job that
// succeeded are refused alike, the API's 409: exit code 2, and a message
// that names the job's state.
func TestActionsOnAFinishedJob(t *testing.T) {
	env := newCLIEnv(t)
	ctx := context.Background()
	env.addA100Pool(t, "", "GPU-aaaa", "GPU-bbbb")
	id := env.submitCLI(t, jobYAML)
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
	if err := env.store.FinishRun(ctx, id, runID, vocab.RunSucceeded, "exit 0", start.Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	var msgs []string
	for _, c := range []struct{ verb, done string }{{"cancel", "cancelled"}, {"hold", "held"}, {"release", "released"}} {
		_, _, err := env.run(t, c.verb, id)
		var ue usageError
		if !errors.As(err, &ue) {
			t.Fatalf("gpugov %s of a succeeded job: %v, want a usage error (exit 2)", c.verb, err)
		}
		msg, ok := strings.CutSuffix(err.Error(), " "+c.done)
		if !ok {
			t.Errorf("gpugov %s: %q does not end with %q", c.verb, err, c.done)
		}
		msgs = append(msgs, msg)
	}
	if !strings.Contains(msgs[0], "job is succeeded") || msgs[0] != msgs[1] || msgs[1] != msgs[2] {
		t.Errorf("refusals differ or do not name the state:\n%s", strings.Join(msgs, "\n"))
	}
}
