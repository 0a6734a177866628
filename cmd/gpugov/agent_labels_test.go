package main

import (
	"context"
	"errors"
	"maps"
	"strings"
	"testing"
)

// TestParseLabelFlags checks --label parsing: good flags give the labels, bad
// ones a usage error (exit code 2) naming --label.
func TestParseLabelFlags(t *testing.T) {
	got, err := parseLabelFlags([]string{"network=infiniband", "storage=local-nvme", "rack = r12"})
	if want := map[string]string{"network": "infiniband", "storage": "local-nvme", "rack": "r12"}; err != nil || !maps.Equal(got, want) {
		t.Fatalf("parseLabelFlags = %v, %v; want %v", got, err, want)
	}
	if got, err := parseLabelFlags(nil); got != nil || err != nil {
		t.Fatalf("no flags: %v, %v", got, err)
	}
	if got, err := parseLabelFlags([]string{"url=http://x?a=b"}); err != nil || got["url"] != "http://x?a=b" {
		t.Fatalf("a value with '=': %v, %v", got, err)
	}
	for _, bad := range [][]string{
		{"infiniband"}, {"=infiniband"}, {"network="}, {" = "},
		{"network=infiniband", "network=ethernet"},
		{"k=" + strings.Repeat("v", 254)},
	} {
		_, err := parseLabelFlags(bad)
		var ue usageError
		if !errors.As(err, &ue) || !strings.Contains(err.Error(), "--label") {
			t.Errorf("parseLabelFlags(%q) = %v, want a usage error naming --label", bad, err)
		}
	}
}

// TestAgentLabelFlag runs `gpugov agent --probe` on the static example: the
// --label flags are added to every served node (overriding the file's label
// of the same key), and a bad flag is a usage error.
func TestAgentLabelFlag(t *testing.T) {
	file := "../../internal/inventory/static/testdata/inventory.yaml"
	out, _, err := runGpugov(context.Background(), "agent", "--probe", "--executor", "none",
		"--inventory-file", file, "--pool", "a100-east", "--label", "network=roce", "--label", "zone=z1")
	if err != nil {
		t.Fatalf("agent --probe --label: %v", err)
	}
	nodes := probeNodes(t, out)
	if len(nodes) != 2 {
		t.Fatalf("probe printed %d nodes, want the 2 of a100-east", len(nodes))
	}
	want := map[string]string{"network": "roce", "storage": "local-nvme", "zone": "z1"}
	if !maps.Equal(nodes[0].Labels, want) {
		t.Errorf("%s labels = %v, want %v", nodes[0].Node, nodes[0].Labels, want)
	}
	if want := map[string]string{"network": "roce", "zone": "z1"}; !maps.Equal(nodes[1].Labels, want) {
		t.Errorf("%s labels = %v, want %v", nodes[1].Node, nodes[1].Labels, want)
	}
	_, _, err = runGpugov(context.Background(), "agent", "--probe", "--executor", "none",
		"--inventory-file", file, "--label", "infiniband")
	var ue usageError
	if !errors.As(err, &ue) || !strings.Contains(err.Error(), `--label "infiniband"`) {
		t.Fatalf("bad --label: err = %v, want a usage error (exit code 2) naming --label", err)
	}
}
