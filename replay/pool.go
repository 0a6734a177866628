package replay

import (
	"cmp"
	"fmt"
	"slices"

	"github.com/gpugov/gpugov/internal/trace/alibaba"
)

// The contended replay `make run` starts by default (deploy/dev/run.sh passes
// these as gpugov replay's --from, --to, --speed, --pool-gpus and
// --max-run-seconds).
const (
	// ContendedFrom and ContendedTo bound the six hours of
	// openb_pod_list_default.csv with the most GPU-pod arrivals (221 pods:
	// 112 LS, 109 BE, all of one GPU or a share of one), trace hours
	// 3567–3573, found by sliding a six-hour window over whole hours of the
	// creation times; it overlaps the busiest day's last five hours.
	ContendedFrom int64 = 3567 * 3600
	ContendedTo   int64 = 3573 * 3600
	// ContendedSpeed submits those six hours in 216 s: slow enough that a
	// job lifecycle through the service (seconds on a loaded 2-core
	// machine) is a few trace-minutes, not the hour it is at DefaultSpeed,
	// and that the window's half-hour experiment runs (18 s real) outlast a
	// preemption's path from the plan to the victim's notice.
	ContendedSpeed = 100
	// ContendedPoolGPUs is the contended pool's size: internal/simulation
	// replays the window on 6 GPUs with production waits up to 199 s and 14
	// preemptions of checkpointable experiment jobs, on 8 GPUs with waits up
	// to 89 s and 4 preemptions (runs capped at ContendedMaxRunS; the
	// replay's own latency adds to that).
	ContendedPoolGPUs = 6
	// ContendedMaxRunS caps run_seconds: an hour of trace time, 36 s of real
	// time at ContendedSpeed, so that the pool drains within a minute or
	// two of the last submission; some of the window's pods run for weeks.
	ContendedMaxRunS = 3600
)

// Sizing is a pool cut from the trace's nodes for a slice: the nodes chosen,
// their GPUs and what the whole node list holds.
type Sizing struct {
	Nodes        []alibaba.NodeRow
	GPUs         int // GPUs of Nodes
	ClusterNodes int // GPU nodes of the whole node list
	ClusterGPUs  int // their GPUs
	// Covering are the nodes added first so that every pod of the slice fits
	// some node (its GPU count and models); the rest fill the pool in the
	// node list's order.
	Covering int
}

// String states the sizing for the replay's header.
func (s Sizing) String() string {
	return fmt.Sprintf("%d GPUs on %d nodes, a subset of the trace's %d GPU nodes (%d GPUs): %d node(s) so that the slice's largest "+
		"pods fit, then the node list's order (--pool-gpus, replay.SizePool)", s.GPUs, len(s.Nodes), s.ClusterNodes, s.ClusterGPUs, s.Covering)
}

// SizePool cuts a pool of exactly gpus GPUs from nodes (the trace's node list,
// in file order) for pods (the slice). A node holds a pod when it has the
// pod's GPUs, of one of its gpu_spec models (any model when empty), and its
// CPU and memory. First, for each pod, most GPUs first (file order among
// equals), that no chosen node holds, the node of the list with the fewest
// GPUs that holds it (the first of those); then the remaining nodes in file
// order that hold alone every pod that may use their GPUs (a node of 8 cores
// under pods of 11.3 would add GPUs nobody can use), each taken when its
// GPUs still fit in gpus. Nodes without GPUs are never taken. It returns an
// error when gpus ≤ 0, when no node holds some pod, when covering the pods
// takes more than gpus GPUs, or when the nodes so chosen do not reach gpus
// exactly.
func SizePool(nodes []alibaba.NodeRow, pods []alibaba.PodRow, gpus int) (Sizing, error) {
	var s Sizing
	if gpus <= 0 {
		return s, fmt.Errorf("pool size %d: want a positive number of GPUs", gpus)
	}
	var gpuNodes []alibaba.NodeRow
	for _, n := range nodes {
		if n.GPUs > 0 {
			gpuNodes = append(gpuNodes, n)
			s.ClusterGPUs += n.GPUs
		}
	}
	s.ClusterNodes = len(gpuNodes)
	taken := make([]bool, len(gpuNodes))
	usable := func(n alibaba.NodeRow, p alibaba.PodRow) bool { // the pod may use the node's GPUs
		return p.NumGPU > 0 && n.GPUs >= p.NumGPU && (len(p.GPUSpec) == 0 || slices.Contains(p.GPUSpec, n.Model))
	}
	holds := func(n alibaba.NodeRow, p alibaba.PodRow) bool { // and fits it alone, CPU and memory included
		return usable(n, p) && n.CPUMilli >= p.CPUMilli && n.MemoryMiB >= p.MemoryMiB
	}
	// fitsAll: every pod that may use the node's GPUs fits it alone, so
	// that a filling node adds capacity, not a place only some pods fit.
	fitsAll := func(n alibaba.NodeRow) bool {
		return !slices.ContainsFunc(pods, func(p alibaba.PodRow) bool { return usable(n, p) && !holds(n, p) })
	}
	byGPUs := slices.Clone(pods)
	slices.SortStableFunc(byGPUs, func(a, b alibaba.PodRow) int { return cmp.Compare(b.NumGPU, a.NumGPU) })
	for _, p := range byGPUs {
		if p.NumGPU <= 0 || slices.ContainsFunc(s.Nodes, func(n alibaba.NodeRow) bool { return holds(n, p) }) {
			continue
		}
		best := -1
		for i, n := range gpuNodes {
			if !taken[i] && holds(n, p) && (best < 0 || n.GPUs < gpuNodes[best].GPUs) {
				best = i
			}
		}
		if best < 0 {
			return s, fmt.Errorf("no node of the list holds pod %s (%d GPUs, models %v)", p.Name, p.NumGPU, p.GPUSpec)
		}
		taken[best] = true
		s.Nodes = append(s.Nodes, gpuNodes[best])
		s.GPUs += gpuNodes[best].GPUs
		s.Covering++
	}
	if s.GPUs > gpus {
		return s, fmt.Errorf("pool size %d GPUs: the slice's largest pods need %d GPUs on %d nodes", gpus, s.GPUs, len(s.Nodes))
	}
	for i, n := range gpuNodes {
		if !taken[i] && s.GPUs+n.GPUs <= gpus && fitsAll(n) {
			taken[i] = true
			s.Nodes = append(s.Nodes, n)
			s.GPUs += n.GPUs
		}
	}
	if s.GPUs != gpus {
		return s, fmt.Errorf("pool size %d GPUs: the node list's nodes reach only %d", gpus, s.GPUs)
	}
	return s, nil
}

// PeakDemand is the most milli-GPU the submissions would hold at once were
// each started on arrival and run for its run_seconds (a never-scheduled
// pod: until its cancellation), in trace seconds: the demand a pool must
// meet for nobody to wait. Divided by 1000 it compares with a pool's GPUs.
func PeakDemand(subs []Submission) int64 {
	type edge struct {
		at    int64 // trace second
		milli int64 // + at arrival, − at the end
	}
	edges := make([]edge, 0, 2*len(subs))
	for _, s := range subs {
		milli := int64(s.Pod.NumGPU) * int64(s.Pod.GPUMilli)
		end := s.Pod.CreationTime + int64(s.Spec.RunSeconds)
		if s.CancelAt > 0 {
			end = min(end, s.Pod.DeletionTime)
		}
		edges = append(edges, edge{s.Pod.CreationTime, milli}, edge{max(end, s.Pod.CreationTime+1), -milli})
	}
	slices.SortFunc(edges, func(a, b edge) int { return cmp.Or(cmp.Compare(a.at, b.at), cmp.Compare(a.milli, b.milli)) })
	var cur, peak int64
	for _, e := range edges {
		cur += e.milli
		peak = max(peak, cur)
	}
	return peak
}
