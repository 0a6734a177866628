package inventory

import (
	"context"
	"errors"
	"maps"
	"testing"
)

// fixedSource returns its nodes, or err.
type fixedSource struct {
	nodes []NodeInventory
	err   error
}

func (s fixedSource) Collect(context.Context) ([]NodeInventory, error) { return s.nodes, s.err }

// TestLabelledSource checks that the labels are added to every node, override
// a node's own label of the same key, do not alias between nodes, and that the
// wrapped source's error passes through.
func TestLabelledSource(t *testing.T) {
	own := map[string]string{"network": "ethernet", "storage": "local-nvme"}
	src := LabelledSource{
		Source: fixedSource{nodes: []NodeInventory{{Node: "a", Labels: own}, {Node: "b"}}},
		Labels: map[string]string{"network": "infiniband", "zone": "z1"},
	}
	nodes, err := src.Collect(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if want := map[string]string{"network": "infiniband", "storage": "local-nvme", "zone": "z1"}; !maps.Equal(nodes[0].Labels, want) {
		t.Errorf("a labels = %v, want %v", nodes[0].Labels, want)
	}
	if want := map[string]string{"network": "infiniband", "zone": "z1"}; !maps.Equal(nodes[1].Labels, want) {
		t.Errorf("b labels = %v, want %v", nodes[1].Labels, want)
	}
	if own["network"] != "ethernet" {
		t.Error("the source's own label map was modified")
	}
	nodes[1].Labels["zone"] = "z2"
	if src.Labels["zone"] != "z1" {
		t.Error("a node's labels alias the flags' map")
	}
	boom := errors.New("boom")
	if _, err := (LabelledSource{Source: fixedSource{err: boom}, Labels: src.Labels}).Collect(context.Background()); !errors.Is(err, boom) {
		t.Errorf("err = %v, want the source's", err)
	}
}

// TestCheckLabels checks the label limits and the key reported.
func TestCheckLabels(t *testing.T) {
	if k, err := CheckLabels(map[string]string{"network": "infiniband"}); k != "" || err != nil {
		t.Fatalf("valid labels: %q, %v", k, err)
	}
	many := map[string]string{}
	for i := range MaxLabels + 1 {
		many[string(rune('a'+i%26))+string(rune('a'+i/26))] = "v"
	}
	for _, tc := range []struct {
		labels map[string]string
		key    string
	}{
		{map[string]string{"network": ""}, "network"},
		{map[string]string{"": "x"}, ""},
		{many, ""},
	} {
		if k, err := CheckLabels(tc.labels); err == nil || k != tc.key {
			t.Errorf("CheckLabels(%v) = %q, %v; want an error on key %q", tc.labels, k, err, tc.key)
		}
	}
}
