package alibaba

import (
	"os"
	"reflect"
	"testing"
	"time"

	"github.com/gpugov/gpugov/internal/scheduling"
	"github.com/gpugov/gpugov/internal/vocab"
)

func TestPools(t *testing.T) {
	nodes, err := ReadNodes("testdata/nodes_good.csv")
	if err != nil {
		t.Fatal(err)
	}
	pools := Pools(nodes, PoolOptions{Name: "ali", Stage: vocab.StageAutomate})
	if len(pools) != 1 {
		t.Fatalf("got %d pools, want 1", len(pools))
	}
	p := pools[0]
	if p.Name != "ali" || !p.Available || p.Stage != vocab.StageAutomate {
		t.Fatalf("pool header %q %v %q", p.Name, p.Available, p.Stage)
	}
	if len(p.Nodes) != 3 {
		t.Fatalf("got %d nodes, want 3 (the CPU-only node left out)", len(p.Nodes))
	}
	a, b := p.Nodes[0], p.Nodes[1]
	if len(a.GPUs) != 8 || a.GPUs[7].UUID != "GPU-node-a-7" || a.GPUs[0].MemoryMiB != 32768 ||
		a.GPUs[0].NVLinkDomain != "node-a/nvlink" || !a.GPUs[0].Healthy || a.GPUs[0].Model != "V100M32" {
		t.Fatalf("node-a GPUs %+v", a.GPUs)
	}
	if len(b.GPUs) != 2 || b.GPUs[1].NVLinkDomain != "" || b.GPUs[1].MemoryMiB != 15360 {
		t.Fatalf("node-b GPUs %+v", b.GPUs)
	}
	if a.CPUMilli != 96000 || a.MemoryMiB != 786432 || !a.Schedulable {
		t.Fatalf("node-a %+v", a)
	}
	if d := Pools(nodes, PoolOptions{})[0]; d.Name != DefaultPoolName || d.Stage != vocab.StageObserve {
		t.Fatalf("defaults: pool %q stage %q", d.Name, d.Stage)
	}
}

func TestPendingJobs(t *testing.T) {
	pods, _, err := ReadPods("testdata/pods_good.csv", ReadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	epoch := time.Date(2023, 1, 1, 0, 0, 0, 0, time.UTC)
	jobs, cpuOnly := PendingJobs(pods, JobOptions{Pool: "ali", Projects: 3, Epoch: epoch})
	if cpuOnly != 1 || len(jobs) != 4 {
		t.Fatalf("got %d jobs and %d CPU-only, want 4 and 1", len(jobs), cpuOnly)
	}
	j := jobs[1] // pod-1: BE share of one T4/V100M32
	want := scheduling.PendingJob{
		ID: "pod-1", Project: ProjectOf("pod-1", 3), Queue: "experiment", Tier: vocab.TierExperiment,
		Request: scheduling.ResourceRequest{GPUs: 1, GPUMilli: 460, GPUModels: []string{"T4", "V100M32"},
			Pool: "ali", Topology: scheduling.TopologyAny, CPUMilli: 6000, MemoryMiB: 12288},
		SubmitTime: epoch.Add(100 * time.Second), WaitingSince: epoch.Add(100 * time.Second),
	}
	if !reflect.DeepEqual(j, want) {
		t.Fatalf("pod-1 job:\n got %+v\nwant %+v", j, want)
	}
	j3 := jobs[2] // pod-3: 8 GPUs, Guaranteed
	if j3.Tier != vocab.TierKeyProject || j3.Queue != "key-project" ||
		j3.Request.Topology != scheduling.TopologySameNode || j3.Request.TotalMilli() != 8000 {
		t.Fatalf("pod-3 job %+v", j3)
	}
	if jobs[0].Tier != vocab.TierProduction {
		t.Fatalf("LS pod tier %v", jobs[0].Tier)
	}
}

func TestTierOfAndProjectOf(t *testing.T) {
	want := map[QoS]vocab.Tier{QoSLS: vocab.TierProduction, QoSGuaranteed: vocab.TierKeyProject,
		QoSBurstable: vocab.TierStandard, QoSBE: vocab.TierExperiment}
	for q, tier := range want {
		if TierOf(q) != tier {
			t.Errorf("TierOf(%s) = %v, want %v", q, TierOf(q), tier)
		}
	}
	seen := map[string]bool{}
	for _, name := range []string{"openb-pod-0000", "openb-pod-0001", "openb-pod-0002", "openb-pod-0003", "openb-pod-0004", "openb-pod-0005"} {
		p := ProjectOf(name, 4)
		if p != ProjectOf(name, 4) {
			t.Fatal("ProjectOf is not stable")
		}
		seen[p] = true
	}
	if len(seen) < 2 {
		t.Fatalf("6 names hashed into %d project(s)", len(seen))
	}
}

// The real trace lives outside the repository (docs/design.md §9).
const traceDir = "../../../../shared/traces/alibaba-gpu-v2023/"

func TestRealTraceCounts(t *testing.T) {
	nodesPath, podsPath := traceDir+"openb_node_list_gpu_node.csv", traceDir+"openb_pod_list_default.csv"
	if _, err := os.Stat(podsPath); os.IsNotExist(err) {
		if os.Getenv("CI") != "" {
			t.Fatal("trace absent under CI (it must sit beside the repository):", podsPath)
		}
		t.Skip("trace absent:", podsPath)
	}
	nodes, err := ReadNodes(nodesPath)
	if err != nil {
		t.Fatal(err)
	}
	gpus := map[string]int{}
	total := 0
	for _, n := range nodes {
		gpus[n.Model] += n.GPUs
		total += n.GPUs
	}
	if len(nodes) != 1213 || total != 6212 {
		t.Fatalf("%d nodes with %d GPUs, want 1213 and 6212", len(nodes), total)
	}
	wantGPUs := map[string]int{"G2": 4392, "T4": 842, "G3": 312, "P100": 265, "V100M32": 204, "V100M16": 195, "A10": 2}
	if !reflect.DeepEqual(gpus, wantGPUs) {
		t.Fatalf("GPUs by model %v, want %v", gpus, wantGPUs)
	}
	pods, skipped, err := ReadPods(podsPath, ReadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(pods) != 8152 || skipped.Count != 0 {
		t.Fatalf("%d pods, %d skipped; want 8152, 0", len(pods), skipped.Count)
	}
	qos, phase, numGPU := map[QoS]int{}, map[Phase]int{}, map[int]int{}
	for _, p := range pods {
		qos[p.QoS]++
		phase[p.Phase]++
		numGPU[p.NumGPU]++
	}
	checkCounts(t, "qos", qos, map[QoS]int{QoSLS: 4647, QoSBE: 3398, QoSBurstable: 100, QoSGuaranteed: 7})
	checkCounts(t, "phase", phase, map[Phase]int{PhaseRunning: 5193, PhaseFailed: 1870, PhasePending: 897, PhaseSucceeded: 192})
	checkCounts(t, "num_gpu", numGPU, map[int]int{0: 1088, 1: 6989, 2: 16, 4: 15, 8: 44})
	if got := len(Pools(nodes, PoolOptions{})[0].Nodes); got != 1213 {
		t.Fatalf("pool has %d nodes, want 1213", got)
	}
}

func checkCounts[K comparable](t *testing.T, what string, got, want map[K]int) {
	t.Helper()
	if !reflect.DeepEqual(got, want) {
		t.Errorf("%s counts %v, want %v", what, got, want)
	}
}
