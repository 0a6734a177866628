package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestReplayBadInput: flag and file problems are usage errors (exit code 2)
// found before any API call; a malformed pod file is reported as file:line.
func TestReplayBadInput(t *testing.T) {
	ctx := context.Background()
	api := []string{"--api", "http://127.0.0.1:1", "--token", "t", "--pods", simPods}
	cases := map[string][]string{
		"to before from":  {"--from", "100", "--to", "50"},
		"bad from":        {"--from", "yesterday"},
		"speed 0":         {"--speed", "0"},
		"probability 2":   {"--recovery-probability", "2"},
		"format":          {"--format", "xml"},
		"empty slice":     {"--from", "100000", "--to", "200000"},
		"bad pods file":   {"--pods", simBadPods},
		"bad nodes file":  {"--nodes", simBadNodes},
		"negative wait":   {"--wait", "-1s"},
		"bad API address": {"--api", "ftp://x"},
		"negative pool":   {"--nodes", simNodes, "--pool-gpus", "-1"},
		"pool, no nodes":  {"--pool-gpus", "2"},
		"nodes out alone": {"--write-nodes", "x.csv"},
		// the slice holds a 4-GPU pod; the node list's one node has 2 GPUs
		"pool too small": {"--nodes", simNodes, "--pool-gpus", "2"},
	}
	for name, args := range cases {
		all := append(append([]string{"replay"}, api...), append([]string{"--from", "0", "--to", "1000"}, args...)...)
		_, _, err := runGpugov(ctx, all...)
		if !isUsageError(err) {
			t.Errorf("%s: %v, want a usage error", name, err)
		}
		if name == "bad pods file" && (err == nil || !strings.Contains(err.Error(), simBadPods+":")) {
			t.Errorf("bad pods file: %v, want file:line", err)
		}
	}
}

// TestReplayWriteNodes: --pool-gpus with --write-nodes writes the cut node
// list and exits before any API call (the API address answers nothing).
func TestReplayWriteNodes(t *testing.T) {
	out := filepath.Join(t.TempDir(), "pool.csv")
	_, stderr, err := runGpugov(context.Background(), "replay", "--api", "http://127.0.0.1:1", "--token", "t",
		"--nodes", simNodes, "--pods", simPods, "--from", "0", "--to", "40", "--pool-gpus", "2", "--write-nodes", out)
	if err != nil {
		t.Fatalf("replay --write-nodes: %v\n%s", err, stderr)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if want := "sn,cpu_milli,memory_mib,gpu,model\nnode-0,64000,262144,2,T4\n"; string(b) != want {
		t.Errorf("written node list %q, want %q", b, want)
	}
	if !strings.Contains(stderr, "2 GPUs on 1 nodes") {
		t.Errorf("stderr %q does not state the pool", stderr)
	}
}
