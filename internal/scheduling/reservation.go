package scheduling

import (
	"slices"
	"strconv"
)

// reservation is one blocked job's claim, for this cycle, on the GPUs it
// waits for. Lower-ranked jobs may not use reserved GPUs; since Plan visits
// jobs in rank order, every reservation a job meets belongs to a job ranked
// above it. The holder is re-evaluated first in the next cycle, so it claims
// GPUs released in between before anyone ranked below it.
type reservation struct {
	jobID string
	entry int // index of the holder in cycle.jobs
	// forPreemption marks the GPUs kept for a job whose victims are being (or
	// are proposed to be) released; such reservations do not count toward
	// ReservationPolicy.Depth.
	forPreemption bool
}

// reserve claims a target for shape sh and returns a phrase describing it
// ("" when there was nothing to claim).
//
// Target choice: there is no run-time estimate in the snapshot, so "will be
// free soonest" is approximated by "needs the fewest releases": the NVLink
// domain (nvlink-domain), node (same-node, and any when one node could hold
// the job) or GPU (shares) with the most matching GPUs already free outside
// other reservations; ties go to the lower index. That choice is stable from
// cycle to cycle (the free GPUs it holds cannot be taken by lower-ranked
// jobs), so releases accumulate on the same target. A spread "any" request
// claims the free GPUs of the nodes with the most free first. The claim
// covers the target's free GPUs and its busy matching GPUs up to the count,
// so shares cannot be packed onto GPUs the holder waits for.
func (ps *poolState) reserve(sh *shapeInfo, r reservation) string {
	if sh.count <= 0 || !validTopology(sh.topo) {
		return ""
	}
	id := int32(len(ps.reservations) + 1)
	var claimed, free int
	var where string
	switch {
	case sh.topo == TopologyNVLinkDomain:
		d := ps.bestReservableUnit(sh, true)
		if d < 0 {
			return ""
		}
		dom := &ps.domains[d]
		claimed, free = ps.claim(sh, id, dom.first, dom.end, sh.count)
		where = "in an NVLink domain of node " + ps.nodes[dom.node].name
	case sh.count == 1 && sh.milli < MilliPerGPU:
		g := ps.bestReservableGPU(sh)
		if g < 0 {
			return ""
		}
		claimed, free = ps.claim(sh, id, g, g+1, 1)
		where = "on node " + ps.nodes[ps.gpus[g].node].name
	case sh.topo == TopologySameNode || sh.emptyLargestNode() >= sh.count:
		n := ps.bestReservableUnit(sh, false)
		if n < 0 {
			return ""
		}
		node := &ps.nodes[n]
		claimed, free = ps.claim(sh, id, node.first, node.end, sh.count)
		where = "on node " + node.name
	default:
		claimed, free = ps.claimSpread(sh, id)
		where = "across the pool"
	}
	if claimed == 0 {
		return ""
	}
	ps.reservations = append(ps.reservations, r)
	ps.heldDepth++
	return "reserves " + strconv.Itoa(claimed) + " GPU(s) " + where + " (" + strconv.Itoa(free) + " free now)"
}

// emptyLargestNode is the most usable matching GPUs on one schedulable node.
func (sh *shapeInfo) emptyLargestNode() int {
	if sh.topo == TopologySameNode {
		return sh.emptyLargest
	}
	return sh.largestNode
}

// reservable reports whether GPU g may join a new reservation for sh.
func (sh *shapeInfo) reservable(g *gpuState) bool {
	return g.usable && sh.match[g.class] && g.reserved == 0
}

// bestReservableUnit picks the domain (domains=true) or node that could hold
// the whole request on reservable GPUs and has the most of them free now.
func (ps *poolState) bestReservableUnit(sh *shapeInfo, domains bool) int32 {
	best, bestFree := int32(-1), -1
	consider := func(idx, first, end int32) {
		usable, free := 0, 0
		for gi := first; gi < end; gi++ {
			g := &ps.gpus[gi]
			if !sh.reservable(g) {
				continue
			}
			usable++
			if g.free() >= sh.milli {
				free++
			}
		}
		if usable >= sh.count && min(free, sh.count) > bestFree {
			best, bestFree = idx, min(free, sh.count)
		}
	}
	for ni := range ps.nodes {
		n := &ps.nodes[ni]
		if !sh.hostOK(n, searchEmpty) {
			continue
		}
		if !domains {
			consider(int32(ni), n.first, n.end)
			continue
		}
		for di := n.domFirst; di < n.domEnd; di++ {
			consider(di, ps.domains[di].first, ps.domains[di].end)
		}
	}
	return best
}

// bestReservableGPU picks the reservable GPU with the most milli free.
func (ps *poolState) bestReservableGPU(sh *shapeInfo) int32 {
	best := int32(-1)
	for ni := range ps.nodes {
		n := &ps.nodes[ni]
		if !sh.hostOK(n, searchEmpty) {
			continue
		}
		for gi := n.first; gi < n.end; gi++ {
			if g := &ps.gpus[gi]; sh.reservable(g) && (best < 0 || g.free() > ps.gpus[best].free()) {
				best = gi
			}
		}
	}
	return best
}

// claim marks up to want reservable GPUs of gpus[first:end] with id, the most
// free first, and returns how many it marked and how many of those are free.
func (ps *poolState) claim(sh *shapeInfo, id, first, end int32, want int) (claimed, free int) {
	idx := make([]int32, 0, end-first)
	for gi := first; gi < end; gi++ {
		if sh.reservable(&ps.gpus[gi]) {
			idx = append(idx, gi)
		}
	}
	slices.SortStableFunc(idx, func(a, b int32) int { return int(ps.gpus[b].free() - ps.gpus[a].free()) })
	for _, gi := range idx[:min(want, len(idx))] {
		g := &ps.gpus[gi]
		ps.setGPU(gi, g.used, id)
		claimed++
		if g.free() >= sh.milli {
			free++
		}
	}
	return claimed, free
}

// claimSpread reserves free matching GPUs for a spread "any" request, from the
// nodes with the most of them first, up to the count.
func (ps *poolState) claimSpread(sh *shapeInfo, id int32) (claimed, free int) {
	type group struct{ node, free int32 }
	groups := make([]group, 0, 16)
	for ni := range ps.nodes {
		n := &ps.nodes[ni]
		if !n.schedulable {
			continue
		}
		if c := ps.countIn(sh, searchFree, n.first, n.end); c > 0 {
			groups = append(groups, group{int32(ni), int32(c)})
		}
	}
	slices.SortStableFunc(groups, func(a, b group) int { return int(b.free - a.free) })
	want := sh.count
	for _, g := range groups {
		if want == 0 {
			break
		}
		n := &ps.nodes[g.node]
		for gi := n.first; gi < n.end && want > 0; gi++ {
			if gg := &ps.gpus[gi]; sh.candidate(gg, searchFree) {
				ps.setGPU(gi, gg.used, id)
				claimed++
				free++
				want--
			}
		}
	}
	return claimed, free
}

// reservedBy returns the index of the highest-ranked reservation among the
// GPUs of c, or -1 when none is reserved.
func (ps *poolState) reservedBy(c choice) int {
	best := -1
	for _, gi := range c.gpus {
		if r := int(ps.gpus[gi].reserved) - 1; r >= 0 && (best < 0 || r < best) {
			best = r
		}
	}
	return best
}
