// Package static reads a GPU inventory from a YAML file, for machines without
// NVML (a laptop, CI, a simulation) and for pools whose nodes run no agent.
//
// File format (see testdata/inventory.yaml for a complete example):
//
//	pools:                          # one or more pools
//	  - name: a100-east             # required, unique in the file
//	    nodes:                      # one or more nodes
//	      - name: a100-east-01      # required, unique in the file
//	        cpu_milli: 128000       # optional, host CPU in milli-cores, >= 0 (0 = not tracked)
//	        memory_mib: 1048576     # optional, host memory in MiB, >= 0 (0 = not tracked)
//	        labels:                 # optional node labels that jobs' resources.node_selector match;
//	          network: infiniband   #   string keys and values, 1..253 bytes each, at most 64 labels
//	          storage: local-nvme
//	        gpus:                   # one or more GPUs
//	          - uuid: GPU-…         # required, NVML UUID, unique in the file
//	            model: A100-SXM4-80GB  # required, as in job requests' gpu_models
//	            memory_mib: 81920   # required, device memory in MiB, > 0
//	            nvlink_domain: nvl0 # optional; GPUs of a node with the same value share an NVLink/NVSwitch domain; "" = alone
//	            healthy: true       # optional, default true
//
// Unknown keys are rejected (a misspelt key would otherwise be silently
// ignored). Every problem is reported, each as "FILE:LINE: PATH message", e.g.
// "inventory.yaml:12: pools[0].nodes[3].gpus[1].memory_mib must be > 0".
package static

import (
	"context"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/gpugov/gpugov/internal/inventory"
	"github.com/gpugov/gpugov/internal/scheduling"
)

// Inventory is a validated static inventory file.
type Inventory struct {
	Path  string            // the file it was read from
	Pools []scheduling.Pool // in file order; every pool available and in the observe stage, every node schedulable
}

// Load reads and validates the inventory file at path. It returns an error
// listing every problem found (see the package comment), or the read error.
func Load(path string) (*Inventory, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading inventory file: %w", err)
	}
	return Parse(path, data)
}

// Nodes returns every node of the file as a NodeInventory collected at at, in
// file order. GPUs are indexed in file order within their node; a GPU's NVLink
// peers are the other GPUs of its node with the same non-empty nvlink_domain.
// Nothing is measured: utilisation, memory used and processes are zero/empty and
// Source is inventory.SourceStatic, so no utilisation samples come from it.
func (inv *Inventory) Nodes(at time.Time) []inventory.NodeInventory {
	var out []inventory.NodeInventory
	for _, p := range inv.Pools {
		for _, n := range p.Nodes {
			out = append(out, nodeInventory(p.Name, n, at))
		}
	}
	return out
}

// nodeInventory converts one node of the file.
func nodeInventory(pool string, n scheduling.Node, at time.Time) inventory.NodeInventory {
	gpus := make([]inventory.GPUInfo, len(n.GPUs))
	for i, g := range n.GPUs {
		info := inventory.GPUInfo{
			Index: i, UUID: g.UUID, Model: g.Model, MemoryTotalMiB: g.MemoryMiB,
			NVLinkDomain: g.NVLinkDomain, NVLinkPeers: []string{},
			Healthy: g.Healthy, HealthNotes: []string{}, Processes: []inventory.Process{},
		}
		if !g.Healthy {
			info.HealthNotes = append(info.HealthNotes, "marked unhealthy in the static inventory file")
		}
		for _, other := range n.GPUs {
			if g.NVLinkDomain != "" && other.UUID != g.UUID && other.NVLinkDomain == g.NVLinkDomain {
				info.NVLinkPeers = append(info.NVLinkPeers, other.UUID)
			}
		}
		gpus[i] = info
	}
	return inventory.NodeInventory{
		Node: n.Name, Pool: pool, Source: inventory.SourceStatic,
		CPUMilli: n.CPUMilli, MemoryMiB: n.MemoryMiB, Labels: maps.Clone(n.Labels),
		GPUs: gpus, CollectedAt: at.UTC(),
	}
}

// Source serves the nodes of a static inventory file as an inventory.Source. It
// rereads the file at every collection, so that edits take effect at the next
// refresh without restarting the agent.
type Source struct {
	Path string           // the inventory file
	Node string           // when not "", serve only this node
	Pool string           // when not "", serve only nodes of this pool
	Now  func() time.Time // clock for CollectedAt; time.Now when nil
}

// Collect loads the file and returns the selected nodes. It returns the file's
// validation error, or an error naming the file's nodes when none is selected.
func (s Source) Collect(ctx context.Context) ([]inventory.NodeInventory, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	inv, err := Load(s.Path)
	if err != nil {
		return nil, err
	}
	now := time.Now
	if s.Now != nil {
		now = s.Now
	}
	all := inv.Nodes(now())
	selected := slices.DeleteFunc(slices.Clone(all), func(n inventory.NodeInventory) bool {
		return (s.Node != "" && n.Node != s.Node) || (s.Pool != "" && n.Pool != s.Pool)
	})
	if len(selected) == 0 {
		return nil, s.noneSelected(all)
	}
	return selected, nil
}

// noneSelected explains an empty selection, listing what the file has.
func (s Source) noneSelected(all []inventory.NodeInventory) error {
	var names []string
	for _, n := range all {
		names = append(names, n.Pool+"/"+n.Node)
	}
	var want []string
	if s.Node != "" {
		want = append(want, fmt.Sprintf("node %q", s.Node))
	}
	if s.Pool != "" {
		want = append(want, fmt.Sprintf("pool %q", s.Pool))
	}
	return fmt.Errorf("%s: no %s in the inventory file; it lists (pool/node): %s",
		s.Path, strings.Join(want, " in "), strings.Join(names, ", "))
}
