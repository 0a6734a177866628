package scheduling

import (
	"fmt"
	"time"

	"github.com/gpugov/gpugov/internal/vocab"
)

// t0 is the fixed "now" of the scenario tests.
var t0 = time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)

// mkNode builds a schedulable node with n healthy GPUs of one model, grouped
// into NVLink domains of domainSize GPUs (0: no domains).
func mkNode(name string, n int, model string, memMiB int64, domainSize int) Node {
	nd := Node{Name: name, Schedulable: true}
	for i := 0; i < n; i++ {
		g := GPU{UUID: fmt.Sprintf("%s-gpu%d", name, i), Model: model, MemoryMiB: memMiB, Healthy: true}
		if domainSize > 0 {
			g.NVLinkDomain = fmt.Sprintf("nvl%d", i/domainSize)
		}
		nd.GPUs = append(nd.GPUs, g)
	}
	return nd
}

// mkPool builds an available pool in the automate stage.
func mkPool(name string, nodes ...Node) Pool {
	return Pool{Name: name, Available: true, Stage: vocab.StageAutomate, Nodes: nodes}
}

// mkJob builds a pending job submitted and waiting since t0 − age.
func mkJob(id string, tier vocab.Tier, gpus int, pool string, age time.Duration) PendingJob {
	return PendingJob{ID: id, Project: "proj-" + id, Queue: "q-" + tier.String(), Tier: tier,
		Request:    ResourceRequest{GPUs: gpus, Pool: pool},
		SubmitTime: t0.Add(-age), WaitingSince: t0.Add(-age)}
}

// mkRunning builds a running job holding whole GPUs (uuids) on node, with
// recovery evidence that makes it an eligible victim by default: its own
// verified resume and its recovery profile's.
func mkRunning(id string, tier vocab.Tier, pool, node string, startedAgo time.Duration, uuids ...string) RunningJob {
	r := RunningJob{ID: id, Project: "proj-" + id, Queue: "q-" + tier.String(), Tier: tier,
		Request:   ResourceRequest{GPUs: len(uuids), Pool: pool},
		StartedAt: t0.Add(-startedAgo),
		Recovery: RecoveryEvidence{Checkpointable: true, VerifiedResumes: 1, CheckpointIntervalSeconds: 600,
			Profile: "proj-" + id + "/simulated", ProfileVerifiedResumes: 1},
		Allocation: Allocation{ID: "alloc-" + id, JobID: id, Pool: pool, Node: node}}
	for _, u := range uuids {
		r.Allocation.GPUs = append(r.Allocation.GPUs, GPUShare{UUID: u, Milli: MilliPerGPU})
	}
	return r
}

// withRunning adds running jobs and their allocations to a snapshot.
func withRunning(s *Snapshot, rs ...RunningJob) {
	for _, r := range rs {
		s.Running = append(s.Running, r)
		s.Allocations = append(s.Allocations, r.Allocation)
	}
}

// waitOf returns the wait status of a job, or nil.
func waitOf(r *Result, id string) *WaitStatus {
	for i := range r.Waiting {
		if r.Waiting[i].JobID == id {
			return &r.Waiting[i]
		}
	}
	return nil
}

// placementOf returns the placement of a job, or nil.
func placementOf(r *Result, id string) *Placement {
	for i := range r.Placements {
		if r.Placements[i].JobID == id {
			return &r.Placements[i]
		}
	}
	return nil
}

// testPolicy is DefaultPolicy with fair share off, so scores are tier + aging.
func testPolicy() *Policy {
	p := DefaultPolicy()
	p.FairShare.Enabled = false
	return &p
}
