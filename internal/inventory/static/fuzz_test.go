package static

import (
	"os"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/gpugov/gpugov/internal/vocab"
)

// problemLine is one problem of Parse's error: "NAME:LINE: …", or the
// whole-file "NAME: the file is empty …".
var problemLine = regexp.MustCompile(`^fuzz\.yaml(:[1-9][0-9]*: \S|: the file is empty)`)

// FuzzStaticInventory fuzzes the static inventory file parser. Properties:
// no panic; every problem of a rejection names the file and its line; an
// accepted inventory is inside vocab's bounds and round-trips (written back
// as an inventory file, it parses into the same pools).
func FuzzStaticInventory(f *testing.F) {
	if b, err := os.ReadFile("testdata/inventory.yaml"); err == nil {
		f.Add(b)
	}
	for _, s := range []string{
		"pools: [{name: p, nodes: [{name: n, gpus: [{uuid: GPU-1, model: T4, memory_mib: 16384}]}]}]\n",
		"pools: [{name: p, nodes: [{name: n, cpu_milli: 9223372036854775807, memory_mib: 9223372036854775807, gpus: [{uuid: GPU-1, model: T4, memory_mib: 9223372036854775807}]}]}]\n",
		"pools: [{name: p, nodes: [{name: n, labels: {a: '1', b: 2}, gpus: [{uuid: GPU-1, model: T4, memory_mib: 0, healthy: maybe}]}]}]\n",
		"pools: [{name: p, nodes: [{name: 'a b', gpus: [{uuid: 'GPU 1,2', model: T4, memory_mib: 1}]}]}]\n",
		"pools:\n- &p {name: p, nodes: []}\n- *p\n", "pools: 3\n", "", "\x00", "pools: [\n", "a: b\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		inv, err := Parse("fuzz.yaml", data)
		if err != nil {
			for _, line := range strings.Split(err.Error(), "\n") {
				if !problemLine.MatchString(line) {
					t.Fatalf("problem without the file and its line: %q", line)
				}
			}
			return
		}
		for _, p := range inv.Pools {
			for _, n := range p.Nodes {
				if n.CPUMilli > vocab.MaxCPUMilli || n.MemoryMiB > vocab.MaxMemoryMiB || len(n.GPUs) > vocab.MaxGPUsPerNode {
					t.Fatalf("accepted node %s is out of bounds: cpu %d, memory %d, %d GPUs", n.Name, n.CPUMilli, n.MemoryMiB, len(n.GPUs))
				}
				for _, g := range n.GPUs {
					if g.MemoryMiB > vocab.MaxGPUMemoryMiB {
						t.Fatalf("accepted GPU %s has %d MiB", g.UUID, g.MemoryMiB)
					}
				}
			}
		}
		out, err := yaml.Marshal(fileOf(inv))
		if err != nil {
			t.Fatal(err)
		}
		again, err := Parse("fuzz.yaml", out)
		if err != nil {
			t.Fatalf("an accepted inventory, written back, is rejected: %v\n%s", err, out)
		}
		if !reflect.DeepEqual(again.Pools, inv.Pools) {
			t.Fatalf("round trip changed the inventory:\n%+v\n%+v", inv.Pools, again.Pools)
		}
	})
}

// fileOf is inv as the YAML document of an inventory file (every field
// written, so that defaults do not matter).
func fileOf(inv *Inventory) map[string]any {
	pools := []any{}
	for _, p := range inv.Pools {
		nodes := []any{}
		for _, n := range p.Nodes {
			gpus := []any{}
			for _, g := range n.GPUs {
				gpus = append(gpus, map[string]any{"uuid": g.UUID, "model": g.Model, "memory_mib": g.MemoryMiB,
					"nvlink_domain": g.NVLinkDomain, "healthy": g.Healthy})
			}
			node := map[string]any{"name": n.Name, "cpu_milli": n.CPUMilli, "memory_mib": n.MemoryMiB, "gpus": gpus}
			if n.Labels != nil {
				node["labels"] = n.Labels
			}
			nodes = append(nodes, node)
		}
		pools = append(pools, map[string]any{"name": p.Name, "nodes": nodes})
	}
	return map[string]any{"pools": pools}
}
