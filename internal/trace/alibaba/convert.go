package alibaba

import (
	"fmt"
	"hash/fnv"
	"time"

	"github.com/gpugov/gpugov/internal/scheduling"
	"github.com/gpugov/gpugov/internal/vocab"
)

// DefaultPoolName is the pool the trace's nodes form when PoolOptions.Name is empty.
const DefaultPoolName = "alibaba"

// ModelMemoryMiB is the device memory in MiB assumed for each trace model. The
// trace does not give memory; the public models use their vendor's figure
// (T4 16 GB is reported by NVML as 15360 MiB). G1, G2 and G3 are undisclosed:
// G1 is ASSUMED to be a 32 GiB (V100-class) part and G2/G3 80 GiB (A100/H800-
// class) parts, because they sit in 8-GPU nodes like Alibaba's newest training
// machines. No pod of the trace asks for GPU memory, so these values only
// matter to requests written by hand.
var ModelMemoryMiB = map[string]int64{
	"T4":      15360,
	"P100":    16384,
	"V100M16": 16384,
	"V100M32": 32768,
	"A10":     24576,
	"G1":      32768, // assumption
	"G2":      81920, // assumption
	"G3":      81920, // assumption
}

// nvlinkModels are the models whose 8-GPU nodes are treated as one NVLink
// domain: V100 SXM2 boards (DGX-1 style hybrid cube mesh) and the G-models,
// assumed to be SXM boards like other 8-GPU training nodes. T4, P100 and A10
// nodes here are PCIe machines with at most 4 GPUs, so their GPUs are alone in
// their domains.
var nvlinkModels = []string{"V100M16", "V100M32", "G1", "G2", "G3"}

// PoolOptions tunes Pools.
type PoolOptions struct {
	Name  string                // pool name; DefaultPoolName when empty
	Stage vocab.AutomationStage // automation stage; StageObserve when empty
}

// GPUUUID returns the synthetic, stable UUID of the i-th GPU (0-based) of node
// sn: "GPU-<sn>-<i>". The trace has no NVML UUIDs.
func GPUUUID(sn string, i int) string { return fmt.Sprintf("GPU-%s-%d", sn, i) }

// NVLinkDomain returns the NVLink domain name given to the GPUs of n:
// "<sn>/nvlink" for 8-GPU nodes of an NVLink model (see nvlinkModels), ""
// (every GPU alone) otherwise.
func NVLinkDomain(n NodeRow) string {
	if n.GPUs == 8 && contains(nvlinkModels, n.Model) {
		return n.SN + "/nvlink"
	}
	return ""
}

// Pools turns a node list into one available pool holding every node that has
// GPUs (CPU-only nodes cannot host a GPU job and are left out). Each node keeps
// its CPU and memory capacity and is schedulable; its GPUs are healthy, named
// by GPUUUID, sized by ModelMemoryMiB and placed in NVLinkDomain.
func Pools(nodes []NodeRow, opts PoolOptions) []scheduling.Pool {
	pool := scheduling.Pool{Name: opts.Name, Available: true, Stage: opts.Stage}
	if pool.Name == "" {
		pool.Name = DefaultPoolName
	}
	if pool.Stage == "" {
		pool.Stage = vocab.StageObserve
	}
	for _, n := range nodes {
		if n.GPUs == 0 {
			continue
		}
		node := scheduling.Node{Name: n.SN, CPUMilli: n.CPUMilli, MemoryMiB: n.MemoryMiB, Schedulable: true}
		domain := NVLinkDomain(n)
		for i := 0; i < n.GPUs; i++ {
			node.GPUs = append(node.GPUs, scheduling.GPU{
				UUID: GPUUUID(n.SN, i), Model: n.Model, MemoryMiB: ModelMemoryMiB[n.Model],
				NVLinkDomain: domain, Healthy: true,
			})
		}
		pool.Nodes = append(pool.Nodes, node)
	}
	return []scheduling.Pool{pool}
}

// DefaultProjects is how many projects JobOptions spreads pods over when
// Projects is 0.
const DefaultProjects = 8

// Epoch is the instant trace time 0 maps to when JobOptions.Epoch is zero.
var Epoch = time.Unix(0, 0).UTC()

// JobOptions tunes PendingJob.
type JobOptions struct {
	Pool     string    // pool every request names; DefaultPoolName when empty
	Projects int       // number of synthetic projects; DefaultProjects when 0
	Epoch    time.Time // instant of trace time 0; Epoch when zero
}

func (o JobOptions) withDefaults() JobOptions {
	if o.Pool == "" {
		o.Pool = DefaultPoolName
	}
	if o.Projects <= 0 {
		o.Projects = DefaultProjects
	}
	if o.Epoch.IsZero() {
		o.Epoch = Epoch
	}
	return o
}

// TierOf maps a QoS class to its tier (docs/design.md §9): LS → production,
// Guaranteed → key-project, Burstable → standard, BE → experiment.
func TierOf(q QoS) vocab.Tier {
	switch q {
	case QoSLS:
		return vocab.TierProduction
	case QoSGuaranteed:
		return vocab.TierKeyProject
	case QoSBurstable:
		return vocab.TierStandard
	}
	return vocab.TierExperiment
}

// ProjectOf returns the synthetic project of a pod: "project-NN" with NN the
// 32-bit FNV-1a hash of the pod name modulo n. The trace has no tenant column;
// hashing the name spreads pods evenly and gives the same project on every run.
func ProjectOf(name string, n int) string {
	h := fnv.New32a()
	h.Write([]byte(name))
	return fmt.Sprintf("project-%02d", h.Sum32()%uint32(n))
}

// At returns the instant of trace second s under the options' epoch.
func (o JobOptions) At(s int64) time.Time {
	return o.withDefaults().Epoch.Add(time.Duration(s) * time.Second)
}

// PendingJob converts a pod to the job it submits at creation_time, and false
// for a CPU-only pod (num_gpu 0): those need no GPU and are left out of GPU
// scheduling. The job's ID is the pod name; its queue is named after its tier
// (TierOf); its project is ProjectOf; its request is num_gpu GPUs of gpu_milli
// each (gpu_milli is kept only below 1000 with one GPU), restricted to
// gpu_spec's models, with the pod's CPU and memory, and topology same-node for
// more than one GPU (a Kubernetes pod runs on one node). Recovery evidence,
// protection and prerequisites are not in the trace and are left empty.
func PendingJob(p PodRow, opts JobOptions) (scheduling.PendingJob, bool) {
	if p.NumGPU == 0 {
		return scheduling.PendingJob{}, false
	}
	o := opts.withDefaults()
	tier := TierOf(p.QoS)
	req := scheduling.ResourceRequest{
		GPUs: p.NumGPU, GPUMilli: p.GPUMilli, Pool: o.Pool, Topology: scheduling.TopologyAny,
		CPUMilli: p.CPUMilli, MemoryMiB: p.MemoryMiB,
	}
	if len(p.GPUSpec) > 0 {
		req.GPUModels = append([]string(nil), p.GPUSpec...)
	}
	if p.NumGPU > 1 {
		req.Topology = scheduling.TopologySameNode
	}
	submit := o.At(p.CreationTime)
	return scheduling.PendingJob{
		ID: p.Name, Project: ProjectOf(p.Name, o.Projects), Queue: tier.String(), Tier: tier,
		Request: req, SubmitTime: submit, WaitingSince: submit,
	}, true
}

// PendingJobs converts every GPU pod with PendingJob, in file order, and
// returns how many CPU-only pods were left out.
func PendingJobs(pods []PodRow, opts JobOptions) (jobs []scheduling.PendingJob, cpuOnly int) {
	for _, p := range pods {
		j, ok := PendingJob(p, opts)
		if !ok {
			cpuOnly++
			continue
		}
		jobs = append(jobs, j)
	}
	return jobs, cpuOnly
}
