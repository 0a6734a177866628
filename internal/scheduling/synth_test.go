package scheduling

import (
	"fmt"
	"math/rand"
	"time"

	"github.com/gpugov/gpugov/internal/vocab"
)

// synthModels are the GPU kinds of the synthetic pool: model, memory MiB and
// NVLink domain size.
var synthModels = []struct {
	model  string
	memMiB int64
	domain int
}{
	{"H100", 81920, 8},
	{"A100-80GB", 81920, 4},
	{"A100-40GB", 40960, 4},
	{"A10", 24576, 0},
}

// synthSnapshot builds a random but seeded snapshot: one pool of nodes × 8
// GPUs of mixed models, filled to about busyFrac of its milli-GPU by running
// jobs (whole GPUs and shares; three in four with a declared run time), plus pending jobs of varied shapes, tiers,
// projects and states (held, not ready, preempting, unknown pool).
func synthSnapshot(seed int64, nodes, pending int, busyFrac float64) *Snapshot {
	rng := rand.New(rand.NewSource(seed))
	s := &Snapshot{}
	pool := Pool{Name: "main", Available: true, Stage: vocab.StageAutomate}
	for n := 0; n < nodes; n++ {
		m := synthModels[n%len(synthModels)]
		nd := mkNode(fmt.Sprintf("node-%05d", n), 8, m.model, m.memMiB, m.domain)
		nd.CPUMilli, nd.MemoryMiB = 128000, 1<<20
		if rng.Intn(200) == 0 {
			nd.Schedulable = false
		}
		if rng.Intn(100) == 0 {
			nd.GPUs[rng.Intn(8)].Healthy = false
		}
		pool.Nodes = append(pool.Nodes, nd)
	}
	s.Pools = []Pool{pool, {Name: "drained", Available: false}}
	tiers := []vocab.Tier{vocab.TierExperiment, vocab.TierStandard, vocab.TierStandard, vocab.TierKeyProject, vocab.TierProduction}
	for i := 0; i < 8; i++ {
		s.Queues = append(s.Queues, Queue{Name: fmt.Sprintf("q%d", i), Tier: tiers[i%len(tiers)], LowRisk: i%2 == 0, Protected: i == 7})
	}
	for p := 0; p < 50; p++ {
		proj := fmt.Sprintf("proj-%02d", p)
		s.Usage = append(s.Usage, ProjectUsage{Project: proj, DecayedGPUSeconds: float64(rng.Intn(1e6)), AsOf: t0.Add(-time.Hour)})
		if p%5 == 0 {
			s.Quotas = append(s.Quotas, Quota{Project: proj, Pool: "main", NominalMilli: int64(rng.Intn(400)) * 1000, BorrowingLimitMilli: 50000})
		}
	}
	fillRunning(rng, s, &s.Pools[0], busyFrac)
	for i := 0; i < pending; i++ {
		s.Pending = append(s.Pending, synthPending(rng, i))
	}
	return s
}

// fillRunning adds running jobs to each node until about busyFrac of it is used.
func fillRunning(rng *rand.Rand, s *Snapshot, pool *Pool, busyFrac float64) {
	id := 0
	for _, nd := range pool.Nodes {
		used := make([]int, len(nd.GPUs))
		for g := 0; g < len(nd.GPUs); g++ {
			if rng.Float64() >= busyFrac {
				continue
			}
			r := RunningJob{ID: fmt.Sprintf("run-%s-%06d", pool.Name, id), Project: fmt.Sprintf("proj-%02d", rng.Intn(50)),
				Queue: fmt.Sprintf("q%d", rng.Intn(8)), Tier: vocab.Tier(rng.Intn(4)),
				StartedAt: t0.Add(-time.Duration(rng.Intn(7200)) * time.Second),
				Recovery: RecoveryEvidence{Checkpointable: rng.Intn(3) > 0, VerifiedResumes: rng.Intn(3),
					CheckpointIntervalSeconds: 600}}
			r.Recovery.ProfileVerifiedResumes = r.Recovery.VerifiedResumes // no draw of its own: the sequence stays as it was
			if r.Recovery.Checkpointable && rng.Intn(2) == 0 {
				r.Recovery.LastCheckpoint = &Checkpoint{At: t0.Add(-time.Duration(rng.Intn(1800)) * time.Second), Step: 100}
			}
			if id%4 != 0 { // a declared run time for three in four, derived from the ID so the draws stay as they were
				r.RunSeconds = 3600 + int64(id*7919%14400)
			}
			milli := MilliPerGPU - used[g]
			if rng.Intn(6) == 0 {
				milli = min(milli, 500)
			}
			r.Allocation = Allocation{ID: "alloc-" + r.ID, JobID: r.ID, Pool: pool.Name, Node: nd.Name,
				GPUs: []GPUShare{{UUID: nd.GPUs[g].UUID, Milli: milli}}, CPUMilli: 8000, MemoryMiB: 65536,
				Borrowed: rng.Intn(20) == 0}
			used[g] += milli
			r.Request = ResourceRequest{GPUs: 1, GPUMilli: milli, Pool: pool.Name}
			s.Running = append(s.Running, r)
			s.Allocations = append(s.Allocations, r.Allocation)
			id++
		}
	}
}

// synthPending draws one pending job.
func synthPending(rng *rand.Rand, i int) PendingJob {
	tier := vocab.Tier(rng.Intn(4))
	j := PendingJob{ID: fmt.Sprintf("job-%07d", i), Project: fmt.Sprintf("proj-%02d", rng.Intn(50)),
		Queue: fmt.Sprintf("q%d", rng.Intn(8)), Tier: tier,
		SubmitTime: t0.Add(-time.Duration(rng.Intn(86400)) * time.Second)}
	j.WaitingSince = j.SubmitTime
	counts := []int{1, 1, 1, 2, 4, 8}
	r := ResourceRequest{Pool: "main", GPUs: counts[rng.Intn(len(counts))],
		CPUMilli: int64([]int{4000, 8000, 16000}[rng.Intn(3)]), MemoryMiB: int64([]int{32768, 65536}[rng.Intn(2)])}
	if r.GPUs == 1 && rng.Intn(3) == 0 {
		r.GPUMilli = []int{250, 500}[rng.Intn(2)]
	}
	switch rng.Intn(4) {
	case 0:
		r.GPUModels = []string{"H100"}
	case 1:
		r.GPUModels = []string{"A100-80GB", "H100"}
	case 2:
		r.GPUMemoryMiB = 40960
	}
	r.Topology = []Topology{TopologyAny, TopologySameNode, TopologyNVLinkDomain}[rng.Intn(3)]
	j.Request = r
	switch rng.Intn(200) {
	case 0:
		j.Held = true
	case 1:
		j.Prerequisites = []Prerequisite{{Name: "image", Ready: false, Message: "pulling"}}
	case 2:
		j.Request.Pool = "drained"
	case 3:
		j.Request.GPUs, j.Request.GPUMilli = 16, 0 // larger than any node
	}
	return j
}
