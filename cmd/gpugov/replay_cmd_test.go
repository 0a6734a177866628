package main

import (
	"context"
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
