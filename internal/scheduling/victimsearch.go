package scheduling

import (
	"slices"

	"github.com/gpugov/gpugov/internal/vocab"
)

// victimCost orders victim sets (docs/design.md §5 "Victim order"): a lender
// reclaiming its nominal quota takes allocations holding lent quota first
// (primary = loss of the others), then, as anyone else, victims of low-risk
// queues first (risky = loss of the victims of other queues; for a
// non-lender it is also the primary), then the least total expected loss,
// then fewer victims.
type victimCost struct {
	primary, risky, total float64
	n                     int
}

// less reports whether cost a is strictly better than b.
func (a victimCost) less(b victimCost) bool {
	if a.primary != b.primary {
		return a.primary < b.primary
	}
	if a.risky != b.risky {
		return a.risky < b.risky
	}
	if a.total != b.total {
		return a.total < b.total
	}
	return a.n < b.n
}

// plus is the cost of a set after adding candidate v.
func (a victimCost) plus(v *candVictim) victimCost {
	return victimCost{primary: a.primary + v.primary, risky: a.risky + v.risky, total: a.total + v.loss, n: a.n + 1}
}

// compareCost orders single candidates by the cost each would have alone, then
// job ID.
func (vx *victimIndex) compareCost(a, b *candVictim) int {
	if c := compareFloat(a.primary, b.primary); c != 0 {
		return c
	}
	if c := compareFloat(a.risky, b.risky); c != 0 {
		return c
	}
	if c := compareFloat(a.loss, b.loss); c != 0 {
		return c
	}
	return vx.compareID(a.vi, b.vi)
}

// preemptTarget is one placement target of a victim search: the GPUs
// gpus[first:end] of a node or NVLink domain, or the whole pool.
type preemptTarget struct {
	node       int32 // host node; −1 for the whole pool
	first, end int32
	poolWide   bool
	freeBefore int // candidates already free there, outside reservations
	victims    []int32
	cost       victimCost
}

// candVictim is an eligible victim holding GPUs of the target being searched.
type candVictim struct {
	vi   int32
	gain int32 // target GPUs it holds that could become usable for the job
	// loss is its estimated loss; risky the same unless its queue is
	// low-risk (then 0); primary, for a lender, the loss unless it holds
	// lent quota (then 0), for anyone else risky (victimCost).
	loss, primary, risky float64
}

// cand describes victim vi as a candidate of this search with gain GPUs.
func (s *preemptSearch) cand(vi, gain int32) candVictim {
	v := &s.vx.all[vi]
	cv := candVictim{vi: vi, gain: gain, loss: v.loss, risky: v.loss}
	if v.lowRisk {
		cv.risky = 0
	}
	cv.primary = cv.risky
	if s.lender {
		cv.primary = v.loss
		if v.reclaimable {
			cv.primary = 0
		}
	}
	return cv
}

// preemptSearch is the state of one job's victim search. freed, gainedN and
// the host counters describe the victim set currently tried on a target; they
// are changed only through add and remove, and are back to zero between targets.
type preemptSearch struct {
	c                  *cycle
	vx                 *victimIndex
	ps                 *poolState
	sh                 *shapeInfo
	tier               vocab.Tier
	lender             bool
	freed              []int32 // milli freed per GPU of the pool
	gainedN            int
	cpuFreed, memFreed int64
	cands              []candVictim
	cur                []int32
	best               *preemptTarget
}

// eligible reports whether victim v may be stopped for this job: it is not
// yet proposed this cycle, and either it holds lent quota and the job is a
// lender within its nominal quota (Kueue's reclaimWithinCohort, any tier:
// only the standing gate applies) or it is of a strictly lower tier and
// passed the whole gate. Aging plays no part: eligibility is by tier
// (docs/design.md invariant 5, §5 borrowing that gives back).
func (s *preemptSearch) eligible(v *victimState) bool {
	if v.used || v.pool != s.ps {
		return false
	}
	if s.lender && v.reclaimable {
		return v.standing == ""
	}
	return v.tier < s.tier && v.gate == ""
}

// relevant reports whether GPU gi of target t could become usable for the job
// by stopping its holders: in the target, usable, matching, unreserved and
// not already free enough.
func (s *preemptSearch) relevant(t *preemptTarget, gi int32) bool {
	if !t.poolWide && (gi < t.first || gi >= t.end) {
		return false
	}
	g := &s.ps.gpus[gi]
	return g.usable && s.sh.match[g.class] && g.reserved == 0 && g.free() < s.sh.milli
}

// add puts victim vi into the tried set; remove takes it out again.
func (s *preemptSearch) add(t *preemptTarget, vi int32) { s.shift(t, vi, 1, nil) }

func (s *preemptSearch) remove(t *preemptTarget, vi int32) { s.shift(t, vi, -1, nil) }

// shift adds (sign 1) or removes (sign −1) a victim's shares from the freed
// milli, counting GPUs that cross the job's per-device need; with collect it
// appends the GPUs that become usable.
func (s *preemptSearch) shift(t *preemptTarget, vi int32, sign int32, collect *[]int32) {
	v := &s.vx.all[vi]
	for k, gi := range v.gpus {
		if !s.relevant(t, gi) {
			continue
		}
		have := s.ps.gpus[gi].free()
		before := have + s.freed[gi]
		s.freed[gi] += sign * v.milli[k]
		after := have + s.freed[gi]
		switch {
		case before < s.sh.milli && after >= s.sh.milli:
			s.gainedN++
			if collect != nil {
				*collect = append(*collect, gi)
			}
		case before >= s.sh.milli && after < s.sh.milli:
			s.gainedN--
		}
	}
	if !t.poolWide && v.node == t.node {
		s.cpuFreed += int64(sign) * v.cpu
		s.memFreed += int64(sign) * v.mem
	}
}

// feasible reports whether the tried set frees enough on target t: count
// devices in all, and on a node target the CPU and memory on the host.
// A pool-wide target's host is checked when the job is placed after release.
func (s *preemptSearch) feasible(t *preemptTarget) bool {
	if t.freeBefore+s.gainedN < s.sh.count {
		return false
	}
	if t.poolWide {
		return true
	}
	n := &s.ps.nodes[t.node]
	return (n.cpuCap == 0 || s.sh.req.CPUMilli <= n.cpuCap-n.cpuUsed+s.cpuFreed) &&
		(n.memCap == 0 || s.sh.req.MemoryMiB <= n.memCap-n.memUsed+s.memFreed)
}

// candidates collects the eligible victims of pool holding relevant GPUs of
// target t, sorted by primary loss per such GPU, then loss per GPU, then job ID.
func (s *preemptSearch) candidates(t *preemptTarget, pool []int32) []candVictim {
	all := s.vx.all
	out := s.cands[:0]
	for _, vi := range pool {
		v := &all[vi]
		if !s.eligible(v) {
			continue
		}
		gain := int32(0)
		for _, gi := range v.gpus {
			if s.relevant(t, gi) {
				gain++
			}
		}
		if gain == 0 {
			continue
		}
		out = append(out, s.cand(vi, gain))
	}
	s.vx.sortByRatio(out)
	s.cands = out
	return out
}

// sortByRatio orders candidates by primary loss per gained GPU, then the
// loss of a victim outside low-risk queues per gained GPU, then loss per
// gained GPU, then job ID.
func (vx *victimIndex) sortByRatio(cands []candVictim) {
	slices.SortFunc(cands, func(a, b candVictim) int {
		if c := compareFloat(a.primary*float64(b.gain), b.primary*float64(a.gain)); c != 0 {
			return c
		}
		if c := compareFloat(a.risky*float64(b.gain), b.risky*float64(a.gain)); c != 0 {
			return c
		}
		if c := compareFloat(a.loss*float64(b.gain), b.loss*float64(a.gain)); c != 0 {
			return c
		}
		return vx.compareID(a.vi, b.vi)
	})
}

// compareFloat orders floats ascending.
func compareFloat(a, b float64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// hopeless reports whether target t cannot beat the best set so far: even
// stopping every candidate would not free enough, or the fractional lower
// bound of the primary loss (candidates by primary loss per GPU, the last one
// counted in part) exceeds the best primary loss.
func (s *preemptSearch) hopeless(t *preemptTarget, cands []candVictim) bool {
	for _, cv := range cands {
		s.add(t, cv.vi)
	}
	ok := s.feasible(t)
	for _, cv := range cands {
		s.remove(t, cv.vi)
	}
	if !ok {
		return true
	}
	if s.best == nil {
		return false
	}
	need := float64(s.sh.count - t.freeBefore)
	var bound float64
	for _, cv := range cands {
		if need <= 0 {
			break
		}
		take := min(need, float64(cv.gain))
		bound += cv.primary * take / float64(cv.gain)
		need -= take
	}
	return bound > s.best.cost.primary
}

// exactLimit is the most candidate victims on one target searched
// exhaustively (branch and bound); larger sets use the greedy search.
const exactLimit = 10

// searchTarget finds the least-cost victim set on target t and keeps it when
// it beats the best so far (earlier targets win ties).
func (s *preemptSearch) searchTarget(t *preemptTarget, pool []int32) {
	s.searchAmong(t, s.candidates(t, pool))
}

// searchAmong is searchTarget over a prepared candidate list.
func (s *preemptSearch) searchAmong(t *preemptTarget, cands []candVictim) {
	if len(cands) == 0 || s.hopeless(t, cands) {
		return
	}
	var set []int32
	var cost victimCost
	if len(cands) <= exactLimit {
		set, cost = s.exact(t, cands)
	} else {
		set, cost = s.greedy(t, cands)
	}
	if set == nil || (s.best != nil && !cost.less(s.best.cost)) {
		return
	}
	t.victims, t.cost = set, cost
	s.best = t
}

// exact enumerates victim subsets depth-first in candidate order, pruning
// every branch whose cost already reaches the best found here or on an
// earlier target; it returns the least-cost feasible set (nil when none beats
// the best).
func (s *preemptSearch) exact(t *preemptTarget, cands []candVictim) ([]int32, victimCost) {
	var best []int32
	var bestCost victimCost
	haveBound := s.best != nil
	if haveBound {
		bestCost = s.best.cost
	}
	s.cur = s.cur[:0]
	var dfs func(i int, cost victimCost)
	dfs = func(i int, cost victimCost) {
		for j := i; j < len(cands); j++ {
			next := cost.plus(&cands[j])
			if haveBound && !next.less(bestCost) {
				continue
			}
			s.add(t, cands[j].vi)
			s.cur = append(s.cur, cands[j].vi)
			if s.feasible(t) {
				best, bestCost, haveBound = slices.Clone(s.cur), next, true
			} else {
				dfs(j+1, next)
			}
			s.cur = s.cur[:len(s.cur)-1]
			s.remove(t, cands[j].vi)
		}
	}
	dfs(0, victimCost{})
	return best, bestCost
}

// greedy adds candidates in order until the target is freed, drops every
// victim (costliest first) the set does not need, and finally compares with
// the cheapest single victim that suffices alone.
func (s *preemptSearch) greedy(t *preemptTarget, cands []candVictim) ([]int32, victimCost) {
	var set []candVictim
	for _, cv := range cands {
		s.add(t, cv.vi)
		set = append(set, cv)
		if s.feasible(t) {
			break
		}
	}
	if !s.feasible(t) {
		for _, cv := range set {
			s.remove(t, cv.vi)
		}
		return nil, victimCost{}
	}
	ids, cost := s.prune(t, set)
	for i := range cands {
		one := victimCost{}.plus(&cands[i])
		if !one.less(cost) {
			continue
		}
		s.add(t, cands[i].vi)
		if s.feasible(t) {
			ids, cost = []int32{cands[i].vi}, one
		}
		s.remove(t, cands[i].vi)
	}
	return ids, cost
}

// prune takes a feasible tried set, drops every victim (costliest first, by
// primary, then risky, then total loss) it does not need, empties the tried set and returns what was kept.
func (s *preemptSearch) prune(t *preemptTarget, set []candVictim) ([]int32, victimCost) {
	slices.SortStableFunc(set, func(a, b candVictim) int {
		if c := compareFloat(b.primary, a.primary); c != 0 {
			return c
		}
		if c := compareFloat(b.risky, a.risky); c != 0 {
			return c
		}
		return compareFloat(b.loss, a.loss)
	})
	kept := set[:0]
	for _, cv := range set {
		s.remove(t, cv.vi)
		if !s.feasible(t) {
			s.add(t, cv.vi)
			kept = append(kept, cv)
		}
	}
	var cost victimCost
	ids := make([]int32, 0, len(kept))
	for i := range kept {
		cost = cost.plus(&kept[i])
		ids = append(ids, kept[i].vi)
		s.remove(t, kept[i].vi)
	}
	return ids, cost
}

// propose searches every placement target of the shape for the least-cost
// victim set: each NVLink domain (nvlink-domain), each node (same-node and
// single-GPU requests), or the whole pool (several GPUs, topology any).
func (s *preemptSearch) propose() *preemptTarget {
	ps, sh := s.ps, s.sh
	vx := s.vx
	perNode := vx.byNode[ps]
	if perNode == nil {
		return nil
	}
	if (sh.topo == TopologyAny || sh.topo == TopologyWholeNodes) && sh.count > 1 {
		t := &preemptTarget{node: -1, poolWide: true, end: int32(len(ps.gpus))}
		t.freeBefore = ps.freeUnreserved(sh)
		s.searchPoolWide(t, vx.byPool[ps])
		return s.best
	}
	for ni := range ps.nodes {
		n := &ps.nodes[ni]
		if len(perNode[ni]) == 0 || !sh.hostOK(n, searchEmpty) {
			continue
		}
		if sh.topo != TopologyNVLinkDomain || sh.count == 1 {
			s.tryRange(int32(ni), n.first, n.end, perNode[ni])
			continue
		}
		for di := n.domFirst; di < n.domEnd; di++ {
			s.tryRange(int32(ni), ps.domains[di].first, ps.domains[di].end, perNode[ni])
		}
	}
	return s.best
}

// tryRange searches one node or domain target, skipping it at once when its
// free plus occupied matching GPUs cannot reach the count.
func (s *preemptSearch) tryRange(ni, first, end int32, pool []int32) {
	free, occupied := 0, 0
	for gi := first; gi < end; gi++ {
		g := &s.ps.gpus[gi]
		if !g.usable || !s.sh.match[g.class] || g.reserved != 0 {
			continue
		}
		if g.free() >= s.sh.milli {
			free++
		} else {
			occupied++
		}
	}
	if free+occupied < s.sh.count || free >= s.sh.count {
		return
	}
	s.searchTarget(&preemptTarget{node: ni, first: first, end: end, freeBefore: free}, pool)
}

// gainedGPUs lists the target GPUs that stopping the target's victims makes
// usable for the job.
func (s *preemptSearch) gainedGPUs(t *preemptTarget) []int32 {
	var out []int32
	for _, vi := range t.victims {
		s.shift(t, vi, 1, &out)
	}
	for _, vi := range t.victims {
		s.remove(t, vi)
	}
	return out
}

// candidateList describes the running jobs of target t a victim could come
// from, for the proposal's record (PreemptionProposal.Candidates): the
// eligible ones in the search's order with the chosen ones marked, then the
// others with their gate, by job ID; at most MaxCandidates. Call it before
// the chosen victims are marked used.
func (s *preemptSearch) candidateList(t *preemptTarget) []Candidate {
	var pool []int32
	if t.poolWide {
		pool = s.vx.byPool[s.ps]
	} else {
		pool = s.vx.byNode[s.ps][t.node]
	}
	var eligible []candVictim
	var others []int32
	for _, vi := range pool {
		v := &s.vx.all[vi]
		gain := int32(0)
		for _, gi := range v.gpus {
			if s.relevant(t, gi) {
				gain++
			}
		}
		switch {
		case gain == 0:
		case s.eligible(v):
			eligible = append(eligible, s.cand(vi, gain))
		default:
			others = append(others, vi)
		}
	}
	s.vx.sortByRatio(eligible)
	slices.SortFunc(others, s.vx.compareID)
	out := make([]Candidate, 0, min(len(eligible)+len(others), MaxCandidates))
	add := func(vi int32, gain int32, gate string) bool {
		if len(out) == MaxCandidates {
			return false
		}
		v := &s.vx.all[vi]
		out = append(out, Candidate{JobID: v.run.ID, Queue: v.run.Queue, LowRisk: v.lowRisk, GPUs: int(gain),
			EstimatedLossGPUSeconds: v.loss, Chosen: slices.Contains(t.victims, vi), Gate: gate})
		return true
	}
	for _, cv := range eligible {
		if !add(cv.vi, cv.gain, "") {
			return out
		}
	}
	for _, vi := range others {
		v := &s.vx.all[vi]
		gain := int32(0)
		for _, gi := range v.gpus {
			if s.relevant(t, gi) {
				gain++
			}
		}
		if !add(vi, gain, s.whyNot(v)) {
			break
		}
	}
	return out
}

// whyNot says why victim v may not be stopped for this search's job.
func (s *preemptSearch) whyNot(v *victimState) string {
	switch {
	case v.used:
		return "already a victim of another proposal this cycle"
	case s.lender && v.reclaimable:
		return v.standing
	case v.gate != "":
		return v.gate
	case v.tier >= s.tier:
		return "tier " + v.tier.String() + " is not below the job's " + s.tier.String()
	}
	return "not eligible"
}
