package main

import (
	"errors"
	"strings"
	"testing"

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
