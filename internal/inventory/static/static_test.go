package static_test

import (
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpugov/gpugov/internal/inventory"
	"github.com/gpugov/gpugov/internal/inventory/static"
	"github.com/gpugov/gpugov/internal/scheduling"
	"github.com/gpugov/gpugov/internal/vocab"
)

const example = "testdata/inventory.yaml"

var at = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

func TestLoadExample(t *testing.T) {
	inv, err := static.Load(example)
	if err != nil {
		t.Fatalf("Load(%s): %v", example, err)
	}
	if len(inv.Pools) != 2 || inv.Pools[0].Name != "a100-east" || inv.Pools[1].Name != "t4-west" {
		t.Fatalf("pools = %+v", inv.Pools)
	}
	east := inv.Pools[0]
	if !east.Available || east.Stage != vocab.StageObserve || len(east.Nodes) != 2 {
		t.Errorf("a100-east: available %v stage %q nodes %d", east.Available, east.Stage, len(east.Nodes))
	}
	dgx := east.Nodes[0]
	if dgx.Name != "a100-east-01" || dgx.CPUMilli != 256000 || dgx.MemoryMiB != 2097152 || !dgx.Schedulable || len(dgx.GPUs) != 8 {
		t.Errorf("a100-east-01 = %+v", dgx)
	}
	want0 := scheduling.GPU{UUID: "GPU-a1000001-0000-4000-8000-000000000000", Model: "A100-SXM4-80GB",
		MemoryMiB: 81920, NVLinkDomain: "nvl0", Healthy: true}
	if dgx.GPUs[0] != want0 {
		t.Errorf("GPU 0 = %+v, want %+v", dgx.GPUs[0], want0)
	}
	if dgx.GPUs[7].Healthy {
		t.Errorf("GPU 7 is marked healthy: false in the file but loaded healthy")
	}
	if want := map[string]string{"network": "infiniband", "storage": "local-nvme"}; !maps.Equal(dgx.Labels, want) {
		t.Errorf("a100-east-01 labels = %v, want %v", dgx.Labels, want)
	}
	if l := east.Nodes[1].Labels; !maps.Equal(l, map[string]string{"network": "ethernet"}) {
		t.Errorf("a100-east-02 labels = %v", l)
	}
	if l := inv.Pools[1].Nodes[0].Labels; l != nil {
		t.Errorf("t4-west-01 has no labels in the file but got %v", l)
	}
	if n := east.Nodes[1]; n.CPUMilli != 0 || n.MemoryMiB != 0 || n.GPUs[2].NVLinkDomain != "bridge1" {
		t.Errorf("a100-east-02 = %+v", n)
	}
	if g := inv.Pools[1].Nodes[0].GPUs[1]; g.NVLinkDomain != "" || g.MemoryMiB != 15360 || g.Model != "T4" {
		t.Errorf("t4 GPU = %+v", g)
	}
}

func TestNodes(t *testing.T) {
	inv, err := static.Load(example)
	if err != nil {
		t.Fatal(err)
	}
	nodes := inv.Nodes(at)
	if len(nodes) != 3 {
		t.Fatalf("got %d nodes, want 3", len(nodes))
	}
	dgx := nodes[0]
	if dgx.Node != "a100-east-01" || dgx.Pool != "a100-east" || dgx.Source != inventory.SourceStatic || !dgx.CollectedAt.Equal(at) {
		t.Errorf("node = %q pool %q source %q at %v", dgx.Node, dgx.Pool, dgx.Source, dgx.CollectedAt)
	}
	if peers := dgx.GPUs[0].NVLinkPeers; len(peers) != 7 || slices.Contains(peers, dgx.GPUs[0].UUID) {
		t.Errorf("DGX GPU 0 peers = %q, want the 7 others", peers)
	}
	if g := dgx.GPUs[7]; g.Healthy || len(g.HealthNotes) != 1 || g.Index != 7 {
		t.Errorf("GPU 7 = %+v", g)
	}
	bridge := nodes[1].GPUs[2]
	if want := []string{"GPU-a1000002-0000-4000-8000-000000000003"}; !slices.Equal(bridge.NVLinkPeers, want) {
		t.Errorf("bridge1 peers = %q, want %q", bridge.NVLinkPeers, want)
	}
	if peers := nodes[2].GPUs[0].NVLinkPeers; len(peers) != 0 {
		t.Errorf("T4 peers = %q, want none", peers)
	}
	if dgx.Labels["network"] != "infiniband" || nodes[2].Labels != nil {
		t.Errorf("node labels = %v, %v", dgx.Labels, nodes[2].Labels)
	}
	if s := dgx.Samples(); s != nil {
		t.Errorf("static inventory gave utilisation samples: %+v", s)
	}
	// Converting the node inventories back gives the file's pools.
	if got := inventory.Pools(nodes); !reflect.DeepEqual(got, inv.Pools) {
		t.Errorf("inventory.Pools(Nodes()) = %+v\nwant %+v", got, inv.Pools)
	}
}

// gpuDoc returns an inventory with one pool, two nodes, and GPU lines gpus for
// the first node; its GPU list starts on line 6.
func gpuDoc(gpus string) string {
	return `pools:
  - name: p
    nodes:
      - name: n1
        gpus:
` + gpus + `      - name: n2
        gpus:
          - {uuid: GPU-n2, model: T4, memory_mib: 15360}
`
}

// labelDoc returns an inventory whose only node has labels (YAML flow text)
// on line 5.
func labelDoc(labels string) string {
	return "pools:\n  - name: p\n    nodes:\n      - name: n1\n        labels: " + labels +
		"\n        gpus: [{uuid: G1, model: T4, memory_mib: 1}]\n"
}

func TestParseErrors(t *testing.T) {
	tests := []struct {
		name string
		doc  string
		want string
	}{
		{"memory zero", gpuDoc("          - {uuid: GPU-a, model: T4, memory_mib: 15360}\n          - {uuid: GPU-b, model: T4, memory_mib: 0}\n"),
			"bad.yaml:7: pools[0].nodes[0].gpus[1].memory_mib must be > 0, got 0"},
		{"memory not a number", gpuDoc("          - {uuid: GPU-a, model: T4, memory_mib: 16GB}\n"),
			`bad.yaml:6: pools[0].nodes[0].gpus[0].memory_mib must be an integer, got "16GB"`},
		{"memory quoted", gpuDoc("          - {uuid: GPU-a, model: T4, memory_mib: \"15360\"}\n"),
			`bad.yaml:6: pools[0].nodes[0].gpus[0].memory_mib must be an integer, got "15360"`},
		{"memory missing", gpuDoc("          - uuid: GPU-a\n            model: T4\n"),
			"bad.yaml:6: pools[0].nodes[0].gpus[0].memory_mib is missing"},
		{"uuid missing", gpuDoc("          - model: T4\n            memory_mib: 15360\n"),
			"bad.yaml:6: pools[0].nodes[0].gpus[0].uuid is missing"},
		{"model empty", gpuDoc("          - uuid: GPU-a\n            model: \"\"\n            memory_mib: 15360\n"),
			"bad.yaml:7: pools[0].nodes[0].gpus[0].model must not be empty"},
		{"duplicate uuid", gpuDoc("          - {uuid: GPU-n2, model: T4, memory_mib: 15360}\n"),
			`bad.yaml:9: pools[0].nodes[1].gpus[0].uuid "GPU-n2" is a duplicate of pools[0].nodes[0].gpus[0].uuid (line 6)`},
		{"unknown key", gpuDoc("          - {uuid: GPU-a, model: T4, memory_gb: 16}\n"),
			`bad.yaml:6: pools[0].nodes[0].gpus[0] has unknown key "memory_gb" (want one of [uuid model memory_mib nvlink_domain healthy])` +
				"\nbad.yaml:6: pools[0].nodes[0].gpus[0].memory_mib is missing"},
		{"healthy not a boolean", gpuDoc("          - {uuid: GPU-a, model: T4, memory_mib: 1, healthy: maybe}\n"),
			`bad.yaml:6: pools[0].nodes[0].gpus[0].healthy must be true or false, got "maybe"`},
		{"nvlink domain not a string", gpuDoc("          - {uuid: GPU-a, model: T4, memory_mib: 1, nvlink_domain: [a]}\n"),
			"bad.yaml:6: pools[0].nodes[0].gpus[0].nvlink_domain must be a string"},
		{"gpu not a mapping", gpuDoc("          - GPU-a\n"),
			"bad.yaml:6: pools[0].nodes[0].gpus[0] must be a mapping with keys [uuid model memory_mib nvlink_domain healthy]"},
		{"gpus empty", gpuDoc("          []\n"), "bad.yaml:6: pools[0].nodes[0].gpus must be a list of at least one item"},
		{"gpus missing", "pools:\n  - name: p\n    nodes:\n      - name: n1\n",
			"bad.yaml:4: pools[0].nodes[0].gpus is missing (want a list of at least one item)"},
		{"node cpu negative", "pools:\n  - name: p\n    nodes:\n      - name: n1\n        cpu_milli: -1\n        gpus: [{uuid: G, model: T4, memory_mib: 1}]\n",
			"bad.yaml:5: pools[0].nodes[0].cpu_milli must be >= 0, got -1"},
		{"duplicate node", "pools:\n  - name: p\n    nodes:\n      - name: n1\n        gpus: [{uuid: G1, model: T4, memory_mib: 1}]\n  - name: q\n    nodes:\n      - name: n1\n        gpus: [{uuid: G2, model: T4, memory_mib: 1}]\n",
			`bad.yaml:8: pools[1].nodes[0].name "n1" is a duplicate of pools[0].nodes[0].name (line 4)`},
		{"duplicate pool", "pools:\n  - name: p\n    nodes: [{name: n1, gpus: [{uuid: G1, model: T4, memory_mib: 1}]}]\n  - name: p\n    nodes: [{name: n2, gpus: [{uuid: G2, model: T4, memory_mib: 1}]}]\n",
			`bad.yaml:4: pools[1].name "p" is a duplicate of pools[0].name (line 2)`},
		{"pool name missing", "pools:\n  - nodes: [{name: n1, gpus: [{uuid: G1, model: T4, memory_mib: 1}]}]\n",
			"bad.yaml:2: pools[0].name is missing"},
		{"nodes empty", "pools:\n  - name: p\n    nodes: []\n", "bad.yaml:3: pools[0].nodes must be a list of at least one item"},
		{"pools missing", "pool:\n  - name: p\n",
			`bad.yaml:1: (top level) has unknown key "pool" (want one of [pools])` + "\nbad.yaml:1: pools is missing (want a list of at least one item)"},
		{"top level a list", "- name: p\n", "bad.yaml:1: (top level) must be a mapping with keys [pools]"},
		{"syntax error", "pools:\n  - name: p\n\tnodes: []\n", "bad.yaml:2: found a tab character that violates indentation"}, // the line is yaml.v3's
		{"empty file", "", "bad.yaml: the file is empty; want a mapping with a pools list"},
		{"labels not a mapping", labelDoc("[infiniband]"), "bad.yaml:5: pools[0].nodes[0].labels must be a mapping of label names to string values, e.g. {network: infiniband}"},
		{"label value not a string", labelDoc("{network: infiniband, nvme: true}"),
			`bad.yaml:5: pools[0].nodes[0].labels.nvme must be a string (quote values such as "true" or "10"), got "true"`},
		{"label value empty", labelDoc("{network: ''}"), `bad.yaml:5: pools[0].nodes[0].labels.network label value "" must be 1..253 bytes`},
		{"label value a list", labelDoc("{network: [a, b]}"), `bad.yaml:5: pools[0].nodes[0].labels.network must be a string (quote values such as "true" or "10"), got ""`},
		{"label key duplicate", labelDoc("{network: a, network: b}"), "bad.yaml:5: pools[0].nodes[0].labels.network is listed twice"},
		{"several problems", gpuDoc("          - {uuid: GPU-a, model: T4, memory_mib: -5}\n          - {uuid: '', model: T4, memory_mib: 1}\n"),
			"bad.yaml:6: pools[0].nodes[0].gpus[0].memory_mib must be > 0, got -5\nbad.yaml:7: pools[0].nodes[0].gpus[1].uuid must not be empty"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			inv, err := static.Parse("bad.yaml", []byte(tt.doc))
			if err == nil {
				t.Fatalf("Parse accepted:\n%s\ngot %+v", tt.doc, inv)
			}
			if err.Error() != tt.want {
				t.Errorf("err =\n%s\nwant\n%s\ndoc:\n%s", err, tt.want, tt.doc)
			}
		})
	}
}

func TestAliasesAreFollowed(t *testing.T) {
	doc := "pools:\n  - name: p\n    nodes:\n      - name: n1\n        gpus:\n          - {uuid: G1, model: &m A100-SXM4-80GB, memory_mib: &mem 81920}\n          - {uuid: G2, model: *m, memory_mib: *mem}\n"
	inv, err := static.Parse("alias.yaml", []byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	if g := inv.Pools[0].Nodes[0].GPUs[1]; g.Model != "A100-SXM4-80GB" || g.MemoryMiB != 81920 {
		t.Errorf("aliased GPU = %+v", g)
	}
}

func TestSourceSelection(t *testing.T) {
	tests := []struct {
		name, node, pool string
		want             []string
		wantErr          string
	}{
		{name: "all nodes", want: []string{"a100-east-01", "a100-east-02", "t4-west-01"}},
		{name: "one node", node: "a100-east-02", want: []string{"a100-east-02"}},
		{name: "one pool", pool: "a100-east", want: []string{"a100-east-01", "a100-east-02"}},
		{name: "node in another pool", node: "t4-west-01", pool: "a100-east",
			wantErr: `testdata/inventory.yaml: no node "t4-west-01" in pool "a100-east" in the inventory file; ` +
				"it lists (pool/node): a100-east/a100-east-01, a100-east/a100-east-02, t4-west/t4-west-01"},
		{name: "unknown node", node: "gpu-07",
			wantErr: `testdata/inventory.yaml: no node "gpu-07" in the inventory file; ` +
				"it lists (pool/node): a100-east/a100-east-01, a100-east/a100-east-02, t4-west/t4-west-01"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			src := static.Source{Path: example, Node: tt.node, Pool: tt.pool, Now: func() time.Time { return at }}
			nodes, err := src.Collect(context.Background())
			if tt.wantErr != "" {
				if err == nil || err.Error() != tt.wantErr {
					t.Fatalf("err = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, n := range nodes {
				got = append(got, n.Node)
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("nodes = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestSourceRereadsTheFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "inventory.yaml")
	write := func(healthy string) {
		doc := "pools:\n  - name: p\n    nodes:\n      - name: n1\n        gpus: [{uuid: G1, model: T4, memory_mib: 15360, healthy: " + healthy + "}]\n"
		if err := os.WriteFile(path, []byte(doc), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	src := static.Source{Path: path}
	write("true")
	first, err := src.Collect(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	write("false")
	second, err := src.Collect(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if !first[0].GPUs[0].Healthy || second[0].GPUs[0].Healthy {
		t.Errorf("healthy before/after the edit = %v/%v, want true/false", first[0].GPUs[0].Healthy, second[0].GPUs[0].Healthy)
	}

	write("[")
	if _, err := src.Collect(context.Background()); err == nil || !strings.HasPrefix(err.Error(), path+":") {
		t.Errorf("broken file: err = %v, want one naming %s", err, path)
	}
	if _, err := (static.Source{Path: filepath.Join(t.TempDir(), "missing.yaml")}).Collect(context.Background()); err == nil ||
		!strings.Contains(err.Error(), "reading inventory file") {
		t.Errorf("missing file: err = %v", err)
	}
}

// BenchmarkParse measures loading a static inventory the size of the Alibaba
// trace's cluster (1,213 nodes; here 6 GPUs each, 7,278 GPUs).
func BenchmarkParse(b *testing.B) {
	var doc strings.Builder
	doc.WriteString("pools:\n  - name: big\n    nodes:\n")
	for n := range 1213 {
		fmt.Fprintf(&doc, "      - name: node-%d\n        cpu_milli: 96000\n        memory_mib: 786432\n        gpus:\n", n)
		for g := range 6 {
			fmt.Fprintf(&doc, "          - {uuid: GPU-%d-%d, model: A100-SXM4-80GB, memory_mib: 81920, nvlink_domain: nvl0}\n", n, g)
		}
	}
	data := []byte(doc.String())
	for b.Loop() {
		if _, err := static.Parse("big.yaml", data); err != nil {
			b.Fatal(err)
		}
	}
}
