package scheduling

import (
	"fmt"
	"math"
	"math/rand"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/gpugov/gpugov/internal/vocab"
)

// randomSnapshot draws a small random snapshot: two pools of nodes with 4–8
// GPUs of mixed models and domain sizes, some unhealthy GPUs and cordoned
// nodes, partly allocated (whole GPUs and shares, some borrowed), with
// pending jobs in every state, quotas, usage and protection windows.
func randomSnapshot(rng *rand.Rand) *Snapshot {
	s := synthSnapshot(rng.Int63(), 6+rng.Intn(20), 20+rng.Intn(120), rng.Float64())
	second := Pool{Name: "second", Available: true, Stage: []vocab.AutomationStage{vocab.StageObserve, vocab.StageTrial, vocab.StageAutomate}[rng.Intn(3)]}
	for n := 0; n < 2+rng.Intn(4); n++ {
		m := synthModels[rng.Intn(len(synthModels))]
		nd := mkNode(fmt.Sprintf("s-%02d", n), 4+rng.Intn(5), m.model, m.memMiB, []int{0, 2, 4}[rng.Intn(3)])
		nd.CPUMilli = int64(rng.Intn(3)) * 32000
		second.Nodes = append(second.Nodes, nd)
	}
	fillRunning(rng, s, &second, rng.Float64())
	s.Pools = append(s.Pools, second)
	s.Pools[0].Stage = []vocab.AutomationStage{vocab.StageObserve, vocab.StageTrial, vocab.StageAutomate}[rng.Intn(3)]
	for i := range s.Pending {
		j := &s.Pending[i]
		if rng.Intn(3) == 0 {
			j.Request.Pool = "second"
		}
		if rng.Intn(40) == 0 && len(s.Running) > 0 {
			j.PreemptionInProgress = []string{s.Running[rng.Intn(len(s.Running))].ID}
		}
		j.AccruedAgingS = float64(rng.Intn(7200))
	}
	if rng.Intn(2) == 0 {
		s.ProtectionWindows = []ProtectionWindow{{Name: "w", Start: t0.Add(-time.Hour), End: t0.Add(time.Hour), Queues: []string{"q1", "q3"}}}
	}
	randomLabels(rng, s)
	for i := range s.Running {
		if rng.Intn(10) == 0 {
			s.Running[i].Protected = true
		}
		if rng.Intn(10) == 0 {
			s.Running[i].RecentPreemptions = []time.Time{t0.Add(-time.Hour), t0.Add(-2 * time.Hour), t0.Add(-3 * time.Hour)}
		}
	}
	if rng.Intn(2) == 0 { // queue service shares
		for i := range s.Queues {
			switch rng.Intn(3) {
			case 0:
				s.Queues[i].MinShare = 0.05 * float64(1+rng.Intn(4))
			case 1:
				s.Queues[i].MaxShare = 0.1 * float64(1+rng.Intn(6))
			}
		}
	}
	return s
}

// randomLabels gives every node a hostname label and random network and
// storage labels, and about one pending job in five a node selector on them
// (sometimes one no node matches).
func randomLabels(rng *rand.Rand, s *Snapshot) {
	networks := []string{"infiniband", "ethernet", ""}
	for pi := range s.Pools {
		for ni := range s.Pools[pi].Nodes {
			n := &s.Pools[pi].Nodes[ni]
			n.Labels = map[string]string{"hostname": n.Name}
			if v := networks[rng.Intn(len(networks))]; v != "" {
				n.Labels["network"] = v
			}
			if rng.Intn(2) == 0 {
				n.Labels["storage"] = "local-nvme"
			}
		}
	}
	for i := range s.Pending {
		switch rng.Intn(10) {
		case 0:
			s.Pending[i].Request.NodeSelector = map[string]string{"network": networks[rng.Intn(2)]}
		case 1:
			s.Pending[i].Request.NodeSelector = map[string]string{"network": "infiniband", "storage": "local-nvme"}
		case 2:
			if rng.Intn(4) == 0 {
				s.Pending[i].Request.NodeSelector = map[string]string{"network": "omni-path"}
			}
		}
	}
}

// randomPolicy varies the rules a little around DefaultPolicy.
func randomPolicy(rng *rand.Rand) *Policy {
	p := DefaultPolicy()
	p.Reservation.Enabled = rng.Intn(4) > 0
	p.Reservation.Depth = rng.Intn(6)
	p.Preemption.Enabled = rng.Intn(4) > 0
	p.Preemption.RequireVerifiedResume = rng.Intn(2) == 0
	p.Aging.Enabled = rng.Intn(4) > 0
	p.FairShare.Enabled = rng.Intn(2) == 0
	return &p
}

// shuffled returns a deep copy of s with every list in a random order.
func shuffled(rng *rand.Rand, s *Snapshot) *Snapshot {
	c := &Snapshot{
		Pools: slices.Clone(s.Pools), Allocations: slices.Clone(s.Allocations), Running: slices.Clone(s.Running),
		Pending: slices.Clone(s.Pending), Quotas: slices.Clone(s.Quotas), Queues: slices.Clone(s.Queues),
		Usage: slices.Clone(s.Usage), ProtectionWindows: slices.Clone(s.ProtectionWindows),
	}
	for i := range c.Pools {
		c.Pools[i].Nodes = slices.Clone(c.Pools[i].Nodes)
		for n := range c.Pools[i].Nodes {
			c.Pools[i].Nodes[n].GPUs = slices.Clone(c.Pools[i].Nodes[n].GPUs)
			shuffle(rng, c.Pools[i].Nodes[n].GPUs)
		}
		shuffle(rng, c.Pools[i].Nodes)
	}
	shuffle(rng, c.Pools)
	shuffle(rng, c.Allocations)
	shuffle(rng, c.Running)
	shuffle(rng, c.Pending)
	shuffle(rng, c.Quotas)
	shuffle(rng, c.Queues)
	shuffle(rng, c.Usage)
	return c
}

func shuffle[T any](rng *rand.Rand, xs []T) {
	rng.Shuffle(len(xs), func(i, j int) { xs[i], xs[j] = xs[j], xs[i] })
}

// TestPlanDeterministic checks docs/design.md invariant 4: the same snapshot,
// policy and time give reflect.DeepEqual results, also when every input list
// is shuffled, and Plan leaves its input untouched.
func TestPlanDeterministic(t *testing.T) {
	rng := rand.New(rand.NewSource(7))
	for it := 0; it < 150; it++ {
		s, p := randomSnapshot(rng), randomPolicy(rng)
		before := shuffled(rand.New(rand.NewSource(0)), s) // a deep copy in another order
		first := Plan(s, p, t0)
		if again := Plan(s, p, t0); !reflect.DeepEqual(first, again) {
			t.Fatalf("iteration %d: two runs differ", it)
		}
		if other := Plan(shuffled(rng, s), p, t0); !reflect.DeepEqual(first, other) {
			t.Fatalf("iteration %d: shuffled input changes the plan:\n%s", it, firstDifference(first, other))
		}
		if other := Plan(before, p, t0); !reflect.DeepEqual(first, other) {
			t.Fatalf("iteration %d: Plan modified its input or depends on order:\n%s", it, firstDifference(first, other))
		}
	}
}

// TestIndexMatchesReference checks that the free-capacity index gives exactly
// the plan the reference scans give.
func TestIndexMatchesReference(t *testing.T) {
	rng := rand.New(rand.NewSource(11))
	for it := 0; it < 150; it++ {
		s, p := randomSnapshot(rng), randomPolicy(rng)
		fast, slow := plan(s, p, t0, false, nil), plan(s, p, t0, true, nil)
		if !reflect.DeepEqual(fast, slow) {
			t.Fatalf("iteration %d: index and reference differ:\n%s", it, firstDifference(fast, slow))
		}
	}
}

// firstDifference describes the first placement or wait that differs.
func firstDifference(a, b *Result) string {
	for i := range min(len(a.Placements), len(b.Placements)) {
		if !reflect.DeepEqual(a.Placements[i], b.Placements[i]) {
			return fmt.Sprintf("placement %d:\n%+v\n%+v", i, a.Placements[i], b.Placements[i])
		}
	}
	for i := range min(len(a.Waiting), len(b.Waiting)) {
		if !reflect.DeepEqual(a.Waiting[i], b.Waiting[i]) {
			return fmt.Sprintf("wait %d:\n%+v\n%+v", i, a.Waiting[i], b.Waiting[i])
		}
	}
	for i := range min(len(a.Preemptions), len(b.Preemptions)) {
		if !reflect.DeepEqual(a.Preemptions[i], b.Preemptions[i]) {
			return fmt.Sprintf("preemption %d:\n%+v\n%+v", i, a.Preemptions[i], b.Preemptions[i])
		}
	}
	return fmt.Sprintf("lengths %d/%d %d/%d %d/%d", len(a.Placements), len(b.Placements), len(a.Waiting), len(b.Waiting),
		len(a.Preemptions), len(b.Preemptions))
}

// TestPlanInvariants checks over random snapshots: no GPU beyond 1000 milli,
// no node beyond its CPU or memory, placements that honour the request, one
// outcome per job with a valid reason, and preemption proposals that name
// only eligible victims, each once.
func TestPlanInvariants(t *testing.T) {
	rng := rand.New(rand.NewSource(3))
	for it := 0; it < 300; it++ {
		s, p := randomSnapshot(rng), randomPolicy(rng)
		res := Plan(s, p, t0)
		if err := checkInvariants(s, p, res); err != nil {
			t.Fatalf("iteration %d: %v", it, err)
		}
	}
}

// gpuInfo is a GPU of the inventory with its node and pool.
type gpuInfo struct {
	gpu  GPU
	node *Node
	pool *Pool
}

// checkInvariants verifies one plan against its snapshot.
func checkInvariants(s *Snapshot, p *Policy, res *Result) error {
	gpus := map[string]gpuInfo{}
	nodes := map[string]*Node{}
	for pi := range s.Pools {
		for ni := range s.Pools[pi].Nodes {
			n := &s.Pools[pi].Nodes[ni]
			nodes[s.Pools[pi].Name+"/"+n.Name] = n
			for _, g := range n.GPUs {
				gpus[g.UUID] = gpuInfo{g, n, &s.Pools[pi]}
			}
		}
	}
	used, cpu, mem := map[string]int{}, map[string]int64{}, map[string]int64{}
	for _, a := range s.Allocations {
		for _, g := range a.GPUs {
			used[g.UUID] += g.Milli
		}
		cpu[a.Pool+"/"+a.Node] += a.CPUMilli
		mem[a.Pool+"/"+a.Node] += a.MemoryMiB
	}
	pending := map[string]*PendingJob{}
	for i := range s.Pending {
		pending[s.Pending[i].ID] = &s.Pending[i]
	}
	seen := map[string]bool{}
	type poolRank struct {
		pool string
		rank int
	}
	ranks := map[poolRank]bool{} // ranks are per pool
	perPool := map[string]int{}
	for _, j := range s.Pending {
		perPool[j.Request.Pool]++
	}
	for _, pl := range res.Placements {
		j := pending[pl.JobID]
		if j == nil || seen[pl.JobID] || ranks[poolRank{pl.Pool, pl.Rank}] || pl.Rank < 1 || pl.Rank > perPool[pl.Pool] {
			return fmt.Errorf("placement %s: unknown or repeated, or rank %d outside its pool's", pl.JobID, pl.Rank)
		}
		seen[pl.JobID], ranks[poolRank{pl.Pool, pl.Rank}] = true, true
		if err := checkPlacement(j, pl, gpus); err != nil {
			return err
		}
		for _, g := range pl.GPUs {
			used[g.UUID] += g.Milli
			if used[g.UUID] > MilliPerGPU {
				return fmt.Errorf("GPU %s over-allocated (%d milli)", g.UUID, used[g.UUID])
			}
		}
		key := pl.Pool + "/" + pl.Node
		cpu[key] += j.Request.CPUMilli
		mem[key] += j.Request.MemoryMiB
		if n := nodes[key]; (n.CPUMilli > 0 && cpu[key] > n.CPUMilli) || (n.MemoryMiB > 0 && mem[key] > n.MemoryMiB) {
			return fmt.Errorf("node %s over its CPU or memory", key)
		}
	}
	rankOf := map[string]int{}
	for _, w := range res.Waiting {
		rankOf[w.JobID] = w.Rank
	}
	for _, pl := range res.Placements {
		rankOf[pl.JobID] = pl.Rank
	}
	for _, w := range res.Waiting {
		j := pending[w.JobID]
		if j == nil || seen[w.JobID] {
			return fmt.Errorf("wait %s: unknown or repeated", w.JobID)
		}
		if pr := (poolRank{j.Request.Pool, w.Rank}); ranks[pr] || w.Rank < 1 || w.Rank > perPool[pr.pool] {
			return fmt.Errorf("wait %s: rank %d repeated or outside pool %q's %d jobs", w.JobID, w.Rank, pr.pool, perPool[pr.pool])
		}
		seen[w.JobID], ranks[poolRank{j.Request.Pool, w.Rank}] = true, true
		if !slices.Contains(vocab.WaitReasons, w.Reason) || w.Detail == "" || w.ReEvaluate == "" {
			return fmt.Errorf("wait %s: bad status %+v", w.JobID, w)
		}
		blocked := w.Reason == vocab.ReasonReservedForHigherPriority
		if blocked != (w.BlockingJobID != "") || (blocked && rankOf[w.BlockingJobID] >= w.Rank) {
			return fmt.Errorf("wait %s: blocking job %q (rank %d vs %d)", w.JobID, w.BlockingJobID, rankOf[w.BlockingJobID], w.Rank)
		}
	}
	if len(seen) != len(s.Pending) {
		return fmt.Errorf("%d of %d jobs have an outcome", len(seen), len(s.Pending))
	}
	if err := checkShareCaps(s, res); err != nil {
		return err
	}
	return checkProposals(s, p, res)
}

// checkShareCaps verifies that no queue with a max_share was placed past
// its cap in a pool: its running allocations plus this cycle's placements
// stay within MaxShare of the pool's usable GPUs.
func checkShareCaps(s *Snapshot, res *Result) error {
	capOf := map[string]int64{}
	for _, p := range s.Pools {
		for _, n := range p.Nodes {
			for _, g := range n.GPUs {
				if g.Healthy && n.Schedulable {
					capOf[p.Name] += MilliPerGPU
				}
			}
		}
	}
	queues := map[string]Queue{}
	for _, q := range s.Queues {
		queues[q.Name] = q
	}
	used, placed := map[[2]string]int64{}, map[[2]string]int64{}
	for _, r := range s.Running {
		for _, g := range r.Allocation.GPUs {
			used[[2]string{r.Queue, r.Allocation.Pool}] += int64(g.Milli)
		}
	}
	pending := map[string]*PendingJob{}
	for i := range s.Pending {
		pending[s.Pending[i].ID] = &s.Pending[i]
	}
	for _, pl := range res.Placements {
		j := pending[pl.JobID]
		placed[[2]string{j.Queue, pl.Pool}] += j.Request.TotalMilli()
	}
	for k, m := range placed {
		q, ok := queues[k[0]]
		if !ok || q.MaxShare <= 0 {
			continue
		}
		if limit := int64(math.Round(q.MaxShare * float64(capOf[k[1]]))); used[k]+m > limit {
			return fmt.Errorf("queue %s placed %d milli in pool %s over its max_share %v (%d held, cap %d)", k[0], m, k[1], q.MaxShare, used[k], limit)
		}
	}
	return nil
}

// checkPlacement verifies that a placement honours its request.
func checkPlacement(j *PendingJob, pl Placement, gpus map[string]gpuInfo) error {
	r := j.Request
	if len(pl.GPUs) != r.GPUs || pl.Pool != r.Pool {
		return fmt.Errorf("placement %s: %d GPUs in %s for %+v", j.ID, len(pl.GPUs), pl.Pool, r)
	}
	domains := map[string]bool{}
	for i, g := range pl.GPUs {
		info, ok := gpus[g.UUID]
		switch {
		case !ok || g.Milli != r.MilliPerDevice():
			return fmt.Errorf("placement %s: GPU %+v", j.ID, g)
		case !info.gpu.Healthy || !info.node.Schedulable || !info.pool.Available || info.pool.Name != r.Pool:
			return fmt.Errorf("placement %s: unusable GPU %s", j.ID, g.UUID)
		case info.gpu.MemoryMiB < r.GPUMemoryMiB || (len(r.GPUModels) > 0 && !slices.Contains(r.GPUModels, info.gpu.Model)):
			return fmt.Errorf("placement %s: GPU %s does not match", j.ID, g.UUID)
		case i == 0 && info.node.Name != pl.Node:
			return fmt.Errorf("placement %s: node %s is not the first GPU's", j.ID, pl.Node)
		case !selectorMatches(r.NodeSelector, info.node.Labels):
			return fmt.Errorf("placement %s: node %s does not match node_selector %v", j.ID, info.node.Name, r.NodeSelector)
		case r.Topology == TopologySameNode && info.node.Name != pl.Node:
			return fmt.Errorf("placement %s: not on one node", j.ID)
		}
		domains[info.node.Name+"/"+info.gpu.NVLinkDomain+"/"+map[bool]string{true: g.UUID}[info.gpu.NVLinkDomain == ""]] = true
	}
	if r.Topology == TopologyNVLinkDomain && len(domains) > 1 {
		return fmt.Errorf("placement %s: spans %d NVLink domains", j.ID, len(domains))
	}
	return nil
}

// checkProposals verifies that every victim is eligible and proposed once.
func checkProposals(s *Snapshot, p *Policy, res *Result) error {
	running := map[string]*RunningJob{}
	for i := range s.Running {
		running[s.Running[i].ID] = &s.Running[i]
	}
	queues := map[string]Queue{}
	for _, q := range s.Queues {
		queues[q.Name] = q
	}
	tierOf := map[string]vocab.Tier{}
	for _, j := range s.Pending {
		tierOf[j.ID] = j.Tier
	}
	stage := map[string]vocab.AutomationStage{}
	for _, pool := range s.Pools {
		stage[pool.Name] = pool.Stage
	}
	proposed := map[string]bool{}
	for _, pp := range res.Preemptions {
		if !p.Preemption.Enabled || (stage[pp.Pool] == vocab.StageObserve && pp.Act) {
			return fmt.Errorf("proposal %+v not allowed", pp)
		}
		for _, v := range pp.Victims {
			r := running[v.JobID]
			if r == nil || proposed[v.JobID] {
				return fmt.Errorf("victim %s unknown or proposed twice", v.JobID)
			}
			proposed[v.JobID] = true
			inWindow := false
			for _, w := range s.ProtectionWindows {
				inWindow = inWindow || (!t0.Before(w.Start) && t0.Before(w.End) && (len(w.Queues) == 0 || slices.Contains(w.Queues, r.Queue)))
			}
			// A borrowed allocation may be a reclaim of lent quota, which
			// asks only the standing gates (docs/design.md §5).
			reclaim := r.Allocation.Borrowed
			if !r.Recovery.Checkpointable || r.Protected || queues[r.Queue].Protected || inWindow ||
				(p.Preemption.RequireVerifiedResume && evidenceRule(&p.Preemption, &r.Recovery) != "") ||
				!reclaim && t0.Sub(r.StartedAt).Seconds() < p.Preemption.MinRuntimeSeconds ||
				!reclaim && recentPreemptions(r.RecentPreemptions, t0, p.Preemption.WindowSeconds) >= p.Preemption.MaxPreemptions ||
				(r.Tier >= tierOf[pp.ForJobID] && !reclaim) {
				return fmt.Errorf("ineligible victim %s (%+v) for %s", v.JobID, r, pp.ForJobID)
			}
		}
	}
	return nil
}
