// Package inventory describes the GPUs of one node as a gpugov node agent reports
// them (docs/design.md §1 "inventory"): each GPU's NVML UUID, model, memory (MiB),
// utilisation, NVLink/NVSwitch domain, health and processes. It converts those
// reports into the scheduling core's pools and nodes, turns them into utilisation
// samples (the evidence for idle reclaim), and runs the agent's refresh loop.
//
// The two ways of reading an inventory live in subpackages: nvmlinv reads the
// local GPUs through NVML (go-nvml, cgo), static reads a YAML file for machines
// without NVML. Both implement Source.
//
// Units: memory in MiB, utilisation in percent (0..100), CPU in milli-cores.
package inventory

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/gpugov/gpugov/internal/scheduling"
	"github.com/gpugov/gpugov/internal/vocab"
)

// Where a NodeInventory came from (NodeInventory.Source).
const (
	SourceNVML   = "nvml"   // read from the node's NVIDIA driver; utilisation is measured
	SourceStatic = "static" // read from a static inventory file; nothing is measured
)

// Names of optional NVML signals; a GPU lists the ones its driver answers with
// NOT_SUPPORTED in GPUInfo.Unsupported instead of failing the whole inventory.
const (
	SignalUtilization  = "utilization"   // DeviceGetUtilizationRates (NOT_SUPPORTED e.g. in MIG mode)
	SignalNVLink       = "nvlink"        // DeviceGetNvLinkState on every link (PCIe GPUs have none)
	SignalRetiredPages = "retired_pages" // DeviceGetRetiredPagesPendingStatus (no ECC page retirement)
	SignalRemappedRows = "remapped_rows" // DeviceGetRemappedRows (Ampere and later only)
	SignalProcesses    = "processes"     // DeviceGetComputeRunningProcesses
)

// UnknownMiB is Process.UsedMemoryMiB when NVML cannot tell a process's memory
// (NVML_VALUE_NOT_AVAILABLE, e.g. without permission to inspect the process).
const UnknownMiB int64 = -1

// Process is one compute process running on a GPU.
type Process struct {
	PID           uint32 `json:"pid"`
	UsedMemoryMiB int64  `json:"used_memory_mib"` // GPU memory the process holds in MiB; UnknownMiB when NVML cannot tell
}

// GPUInfo is one GPU of a node.
type GPUInfo struct {
	Index                    int       `json:"index"`                      // NVML device index on the node
	UUID                     string    `json:"uuid"`                       // NVML UUID, unique across the inventory
	Model                    string    `json:"model"`                      // device name without the "NVIDIA " prefix, e.g. "A100-SXM4-80GB"
	PCIBusID                 string    `json:"pci_bus_id,omitempty"`       // "dddd:bb:dd.f", lower case; empty for static inventories
	MemoryTotalMiB           int64     `json:"memory_total_mib"`           // device memory in MiB
	MemoryUsedMiB            int64     `json:"memory_used_mib"`            // memory in use in MiB at CollectedAt
	UtilizationGPUPercent    int       `json:"utilization_gpu_percent"`    // percent of the last sample period a kernel ran
	UtilizationMemoryPercent int       `json:"utilization_memory_percent"` // percent of the last sample period memory was read or written
	NVLinkDomain             string    `json:"nvlink_domain"`              // NVLink/NVSwitch domain on this node; "" when the GPU is alone
	NVLinkPeers              []string  `json:"nvlink_peers"`               // UUIDs of GPUs reached over NVLink directly or through one NVSwitch
	Healthy                  bool      `json:"healthy"`                    // false keeps the GPU out of every placement
	HealthNotes              []string  `json:"health_notes"`               // why the GPU is unhealthy, and warnings that do not make it so
	Unsupported              []string  `json:"unsupported,omitempty"`      // optional signals (Signal*) the driver does not support on this GPU
	Processes                []Process `json:"processes"`                  // compute processes on the GPU
}

// Supports reports whether the GPU's driver answered the optional signal (one of
// the Signal* names) rather than NOT_SUPPORTED.
func (g GPUInfo) Supports(signal string) bool {
	return !slices.Contains(g.Unsupported, signal)
}

// NodeInventory is everything one node agent reports about its node at one instant.
type NodeInventory struct {
	Node          string `json:"node"`
	Pool          string `json:"pool"`
	Source        string `json:"source"`                   // SourceNVML or SourceStatic
	DriverVersion string `json:"driver_version,omitempty"` // e.g. "550.54.15"; empty for static inventories
	NVMLVersion   string `json:"nvml_version,omitempty"`   // e.g. "12.550.54.15"; empty for static inventories
	CUDAVersion   string `json:"cuda_version,omitempty"`   // highest CUDA version the driver supports, e.g. "12.4"
	CPUMilli      int64  `json:"cpu_milli"`                // allocatable host CPU in milli-cores; 0 means not tracked
	MemoryMiB     int64  `json:"memory_mib"`               // host memory in MiB; 0 means not tracked
	// Labels describe the node's storage, network and other properties
	// (e.g. "network": "infiniband"), from the static inventory or the
	// agent's --label flags; a job's resources.node_selector must match them.
	Labels      map[string]string `json:"labels,omitempty"`
	GPUs        []GPUInfo         `json:"gpus"`
	CollectedAt time.Time         `json:"collected_at"`
}

// UtilizationSample is one measurement of one GPU's use, the evidence the reclaim
// scan reads to classify an allocation as idle (docs/design.md §1 "reclaim class").
type UtilizationSample struct {
	GPUUUID       string    `json:"gpu_uuid"`
	At            time.Time `json:"at"`
	GPUPercent    int       `json:"gpu_percent"`     // NVML utilization.gpu, 0..100
	MemoryUsedMiB int64     `json:"memory_used_mib"` // device memory in use in MiB
}

// Samples returns one UtilizationSample per GPU whose utilisation was measured,
// taken at n.CollectedAt. Static inventories and GPUs that do not support
// utilisation give none: a zero read from them is not evidence of idleness.
func (n NodeInventory) Samples() []UtilizationSample {
	if n.Source != SourceNVML {
		return nil
	}
	var out []UtilizationSample
	for _, g := range n.GPUs {
		if !g.Supports(SignalUtilization) {
			continue
		}
		out = append(out, UtilizationSample{
			GPUUUID:       g.UUID,
			At:            n.CollectedAt,
			GPUPercent:    g.UtilizationGPUPercent,
			MemoryUsedMiB: g.MemoryUsedMiB,
		})
	}
	return out
}

// SchedulingGPU converts the GPU into the scheduling core's GPU.
func (g GPUInfo) SchedulingGPU() scheduling.GPU {
	return scheduling.GPU{
		UUID:         g.UUID,
		Model:        g.Model,
		MemoryMiB:    g.MemoryTotalMiB,
		NVLinkDomain: g.NVLinkDomain,
		Healthy:      g.Healthy,
	}
}

// SchedulingNode converts the node into the scheduling core's Node. The node is
// schedulable: cordoning is an operator decision kept by the service, not
// something the agent observes.
func (n NodeInventory) SchedulingNode() scheduling.Node {
	gpus := make([]scheduling.GPU, len(n.GPUs))
	for i, g := range n.GPUs {
		gpus[i] = g.SchedulingGPU()
	}
	return scheduling.Node{
		Name:        n.Node,
		CPUMilli:    n.CPUMilli,
		MemoryMiB:   n.MemoryMiB,
		Schedulable: true,
		GPUs:        gpus,
		Labels:      maps.Clone(n.Labels),
	}
}

// Limits of node labels: at most MaxLabels per node, each key and value
// 1..MaxLabelLength bytes.
const (
	MaxLabels      = 64
	MaxLabelLength = 253
)

// CheckLabels checks node labels against the limits, keys in sorted order.
// On a problem it returns the key concerned ("" when the number of labels is
// the problem, or the key itself is) and an error saying what is wrong.
func CheckLabels(labels map[string]string) (key string, err error) {
	if len(labels) > MaxLabels {
		return "", fmt.Errorf("%d labels, at most %d allowed", len(labels), MaxLabels)
	}
	for _, k := range slices.Sorted(maps.Keys(labels)) {
		switch v := labels[k]; {
		case k == "" || len(k) > MaxLabelLength:
			return "", fmt.Errorf("label key %q must be 1..%d bytes", k, MaxLabelLength)
		case v == "" || len(v) > MaxLabelLength:
			return k, fmt.Errorf("label value %q must be 1..%d bytes", v, MaxLabelLength)
		}
	}
	return "", nil
}

// Pools groups node inventories by pool into the scheduling core's pools, sorted
// by pool name and, within a pool, by node name so that the result does not
// depend on the order reports arrived in. Each pool is available and in the
// observe stage, the stage in which nothing is preempted or reclaimed; the
// service's configuration sets the real stage and availability.
func Pools(nodes []NodeInventory) []scheduling.Pool {
	byName := map[string]*scheduling.Pool{}
	var names []string
	for _, n := range nodes {
		p, ok := byName[n.Pool]
		if !ok {
			p = &scheduling.Pool{Name: n.Pool, Available: true, Stage: vocab.StageObserve}
			byName[n.Pool] = p
			names = append(names, n.Pool)
		}
		p.Nodes = append(p.Nodes, n.SchedulingNode())
	}
	slices.Sort(names)
	out := make([]scheduling.Pool, 0, len(names))
	for _, name := range names {
		p := byName[name]
		slices.SortStableFunc(p.Nodes, func(a, b scheduling.Node) int { return cmp.Compare(a.Name, b.Name) })
		out = append(out, *p)
	}
	return out
}
