package scheduling

import "slices"

// searchMode says which GPUs a placement search may use.
type searchMode uint8

const (
	searchFree         searchMode = iota // free capacity outside this cycle's reservations
	searchWithReserved                   // free capacity, reservations ignored
	searchEmpty                          // the pool as if nothing were allocated
)

// choice is a placement found by a search: the host node and GPU indices
// (the first GPU is on node). gpus lives in the pool's pick buffer and is
// valid until the next search.
type choice struct {
	node int32
	gpus []int32
}

// candidate reports whether GPU g can take one device of shape sh in mode.
func (sh *shapeInfo) candidate(g *gpuState, mode searchMode) bool {
	if !g.usable || !sh.match[g.class] {
		return false
	}
	switch mode {
	case searchEmpty:
		return true
	case searchFree:
		if g.reserved != 0 {
			return false
		}
	}
	return g.free() >= sh.milli
}

// hostOK reports whether node n matches the shape's node selector and can
// host its CPU and memory in mode.
func (sh *shapeInfo) hostOK(n *nodeState, mode searchMode) bool {
	return n.schedulable && (sh.labelOK == nil || sh.labelOK[n.labels]) &&
		n.fitsHost(sh.req.CPUMilli, sh.req.MemoryMiB, mode == searchEmpty)
}

// search places shape sh by best fit in mode, through the free-capacity index
// when the shape has one, else by the reference scans. Both apply the same
// rule, so they return the same choice:
//   - one whole GPU, or nvlink-domain: the NVLink domain with the fewest
//     spare candidates after placement;
//   - same-node: the node with the fewest spare candidates, filling its
//     smallest domain groups first;
//   - a share (1 GPU below 1000 milli): the partly used GPU with the least
//     milli free that fits, so shares fill partly used GPUs before breaking
//     whole ones; else a free GPU on the node with the fewest free GPUs;
//   - any (several GPUs): one domain if possible, else one node, else spread
//     over nodes taking the smallest free groups first.
//
// Ties go to the lower index (nodes and GPUs are sorted by name), and the host
// node must have the CPU and host memory asked for. That is the best-fit rule
// (PlacementBestFit); under a scored rule (Policy.Placement, packing.go)
// findScored chooses instead for the requests placed on one node.
func (ps *poolState) search(sh *shapeInfo, mode searchMode) (choice, bool) {
	if !validTopology(sh.topo) || sh.count < 0 {
		return choice{}, false
	}
	if ps.pack != nil && ps.pack.rule.scored() {
		if c, ok, handled := ps.findScored(sh, mode); handled {
			return c, ok
		}
	}
	if sh.mi != nil && mode != searchEmpty && !ps.slow {
		return ps.findFast(sh, mode)
	}
	return ps.find(sh, mode)
}

// find is the reference implementation of search: it scans every GPU.
func (ps *poolState) find(sh *shapeInfo, mode searchMode) (choice, bool) {
	switch {
	case sh.count == 0:
		return ps.findHostOnly(sh, mode)
	case sh.count == 1 && sh.milli < MilliPerGPU:
		return ps.findShare(sh, mode)
	case sh.count == 1 || sh.topo == TopologyNVLinkDomain:
		return ps.findInDomain(sh, mode)
	case sh.topo == TopologySameNode:
		return ps.findOnNode(sh, mode)
	case sh.topo == TopologyWholeNodes:
		return ps.findWholeNodes(sh, mode)
	}
	if c, ok := ps.findInDomain(sh, mode); ok {
		return c, true
	}
	if c, ok := ps.findOnNode(sh, mode); ok {
		return c, true
	}
	return ps.findSpread(sh, mode)
}

// countIn counts the candidates of sh among gpus[first:end].
func (ps *poolState) countIn(sh *shapeInfo, mode searchMode, first, end int32) int {
	c := 0
	for i := first; i < end; i++ {
		if sh.candidate(&ps.gpus[i], mode) {
			c++
		}
	}
	return c
}

// findHostOnly places a request for no GPUs on the node with the least CPU
// left after it.
func (ps *poolState) findHostOnly(sh *shapeInfo, mode searchMode) (choice, bool) {
	best, bestLeft := int32(-1), int64(0)
	for ni := range ps.nodes {
		n := &ps.nodes[ni]
		if !sh.hostOK(n, mode) {
			continue
		}
		left := n.cpuCap - n.cpuUsed - sh.req.CPUMilli
		if best < 0 || left < bestLeft {
			best, bestLeft = int32(ni), left
		}
	}
	return choice{node: best}, best >= 0
}

// findInDomain finds the best-fit NVLink domain holding all count devices.
func (ps *poolState) findInDomain(sh *shapeInfo, mode searchMode) (choice, bool) {
	best, bestSpare := int32(-1), 0
	for di := range ps.domains {
		d := &ps.domains[di]
		if !sh.hostOK(&ps.nodes[d.node], mode) {
			continue
		}
		if c := ps.countIn(sh, mode, d.first, d.end); c >= sh.count && (best < 0 || c-sh.count < bestSpare) {
			best, bestSpare = int32(di), c-sh.count
		}
	}
	if best < 0 {
		return choice{}, false
	}
	return ps.domainChoice(sh, mode, best), true
}

// domainChoice takes the first count candidates of domain di.
func (ps *poolState) domainChoice(sh *shapeInfo, mode searchMode, di int32) choice {
	d := &ps.domains[di]
	return choice{node: d.node, gpus: ps.take(sh, mode, ps.pick[:0], d.first, d.end, sh.count)}
}

// findOnNode finds the best-fit node holding all count devices.
func (ps *poolState) findOnNode(sh *shapeInfo, mode searchMode) (choice, bool) {
	best, bestSpare := int32(-1), 0
	for ni := range ps.nodes {
		n := &ps.nodes[ni]
		if !sh.hostOK(n, mode) {
			continue
		}
		if c := ps.countIn(sh, mode, n.first, n.end); c >= sh.count && (best < 0 || c-sh.count < bestSpare) {
			best, bestSpare = int32(ni), c-sh.count
		}
	}
	if best < 0 {
		return choice{}, false
	}
	return choice{node: best, gpus: ps.takeOnNode(sh, mode, ps.pick[:0], best, sh.count)}, true
}

// takeOnNode picks want devices on node ni: the best-fit domain if one holds
// them all, else the smallest domain groups first.
func (ps *poolState) takeOnNode(sh *shapeInfo, mode searchMode, out []int32, ni int32, want int) []int32 {
	n := &ps.nodes[ni]
	var buf [16]struct{ dom, count int32 }
	groups := buf[:0]
	for di := n.domFirst; di < n.domEnd; di++ {
		d := &ps.domains[di]
		if c := ps.countIn(sh, mode, d.first, d.end); c > 0 {
			groups = append(groups, struct{ dom, count int32 }{di, int32(c)})
		}
	}
	slices.SortStableFunc(groups, func(a, b struct{ dom, count int32 }) int { return int(a.count - b.count) })
	for _, g := range groups {
		if int(g.count) >= want {
			d := &ps.domains[g.dom]
			return ps.take(sh, mode, out, d.first, d.end, want)
		}
	}
	for _, g := range groups {
		if want == 0 {
			break
		}
		d := &ps.domains[g.dom]
		k := min(want, int(g.count))
		out = ps.take(sh, mode, out, d.first, d.end, k)
		want -= k
	}
	return out
}

// take appends the first want candidates of gpus[first:end] to out.
func (ps *poolState) take(sh *shapeInfo, mode searchMode, out []int32, first, end int32, want int) []int32 {
	for i := first; i < end && want > 0; i++ {
		if sh.candidate(&ps.gpus[i], mode) {
			out = append(out, i)
			want--
		}
	}
	return out
}

// findShare places one GPU share: on the partly used candidate with the least
// free milli (then lowest index) whose node hosts the CPU and memory; else on
// a free GPU of the node with the fewest free candidates.
func (ps *poolState) findShare(sh *shapeInfo, mode searchMode) (choice, bool) {
	best := int32(-1)
	for gi := range ps.gpus {
		g := &ps.gpus[gi]
		if mode == searchEmpty || g.used == 0 || !sh.candidate(g, mode) || !sh.hostOK(&ps.nodes[g.node], mode) {
			continue
		}
		if best < 0 || g.free() < ps.gpus[best].free() {
			best = int32(gi)
		}
	}
	if best >= 0 {
		return choice{node: ps.gpus[best].node, gpus: append(ps.pick[:0], best)}, true
	}
	bestNode, bestCount := int32(-1), 0
	for ni := range ps.nodes {
		n := &ps.nodes[ni]
		if !sh.hostOK(n, mode) {
			continue
		}
		if c := ps.countIn(sh, mode, n.first, n.end); c > 0 && (bestNode < 0 || c < bestCount) {
			bestNode, bestCount = int32(ni), c
		}
	}
	if bestNode < 0 {
		return choice{}, false
	}
	return choice{node: bestNode, gpus: ps.takeOnNode(sh, mode, ps.pick[:0], bestNode, 1)}, true
}

// nodeGroup is a node with its count of candidates.
type nodeGroup struct{ node, count int32 }

// findSpread places count devices across nodes ("any" topology when no single
// node holds them): nodes are taken in order of fewest candidates first (then
// index), so small free groups are used before large ones; the host node is
// the first of them able to host the CPU and memory and gives its GPUs first.
func (ps *poolState) findSpread(sh *shapeInfo, mode searchMode) (choice, bool) {
	groups := make([]nodeGroup, 0, len(ps.nodes))
	for ni := range ps.nodes {
		n := &ps.nodes[ni]
		if !n.schedulable {
			continue
		}
		if c := ps.countIn(sh, mode, n.first, n.end); c > 0 {
			groups = append(groups, nodeGroup{int32(ni), int32(c)})
		}
	}
	slices.SortStableFunc(groups, func(a, b nodeGroup) int { return int(a.count - b.count) })
	return ps.spreadChoice(sh, mode, groups)
}

// spreadChoice takes count devices from groups (in order), host node first.
func (ps *poolState) spreadChoice(sh *shapeInfo, mode searchMode, groups []nodeGroup) (choice, bool) {
	total, host := 0, -1
	for i, g := range groups {
		total += int(g.count)
		if host < 0 && sh.hostOK(&ps.nodes[g.node], mode) {
			host = i
		}
	}
	if total < sh.count || host < 0 {
		return choice{}, false
	}
	want := sh.count
	hg := groups[host]
	k := min(want, int(hg.count))
	out := ps.takeOnNode(sh, mode, ps.pick[:0], hg.node, k)
	want -= k
	for i, g := range groups {
		if want == 0 {
			break
		}
		if i != host {
			k := min(want, int(g.count))
			out = ps.takeOnNode(sh, mode, out, g.node, k)
			want -= k
		}
	}
	return choice{node: hg.node, gpus: out}, true
}

// wholeNode reports whether every GPU of schedulable node n is a candidate
// of sh in mode (a node without GPUs is never whole).
func (ps *poolState) wholeNode(sh *shapeInfo, mode searchMode, n *nodeState) bool {
	return n.schedulable && n.end > n.first && ps.countIn(sh, mode, n.first, n.end) == int(n.end-n.first)
}

// findWholeNodes places a whole-nodes request on the nodes whose GPUs are all
// candidates, lowest index first; the host node (the first taken) must have
// the CPU and memory, nodes before the first such one are passed over. All
// GPUs of each node are taken but the last node's, which gives what the
// count still lacks.
func (ps *poolState) findWholeNodes(sh *shapeInfo, mode searchMode) (choice, bool) {
	out, host := ps.pick[:0], int32(-1)
	for ni := range ps.nodes {
		if len(out) >= sh.count {
			break
		}
		n := &ps.nodes[ni]
		if !ps.wholeNode(sh, mode, n) || host < 0 && !sh.hostOK(n, mode) {
			continue
		}
		if host < 0 {
			host = int32(ni)
		}
		out = ps.takeOnNode(sh, mode, out, int32(ni), min(int(n.end-n.first), sh.count-len(out)))
	}
	if host < 0 || len(out) < sh.count {
		return choice{}, false
	}
	return choice{node: host, gpus: out}, true
}

// largestGroup is the most candidates of sh in one unit of its topology: one
// domain (nvlink-domain), one node (same-node), the whole pool (any) or the
// GPUs of the pool's whole candidate nodes (whole-nodes).
func (ps *poolState) largestGroup(sh *shapeInfo, mode searchMode) int {
	if sh.topo == TopologyWholeNodes {
		total := 0
		for ni := range ps.nodes {
			if n := &ps.nodes[ni]; ps.wholeNode(sh, mode, n) {
				total += int(n.end - n.first)
			}
		}
		return total
	}
	if mi := sh.mi; mi != nil && !ps.slow && sh.milli == MilliPerGPU {
		v := &mi.all
		if mode == searchFree {
			v = &mi.unres
		}
		switch {
		case mode == searchEmpty:
			return staticLargest(mi, sh.topo)
		case sh.topo == TopologyNVLinkDomain:
			return v.largestDom()
		case sh.topo == TopologySameNode:
			return v.largestNode()
		}
		return v.total
	}
	largest, total := 0, 0
	for ni := range ps.nodes {
		n := &ps.nodes[ni]
		if !n.schedulable {
			continue
		}
		if sh.topo == TopologyNVLinkDomain {
			for di := n.domFirst; di < n.domEnd; di++ {
				d := &ps.domains[di]
				largest = max(largest, ps.countIn(sh, mode, d.first, d.end))
			}
			continue
		}
		c := ps.countIn(sh, mode, n.first, n.end)
		largest = max(largest, c)
		total += c
	}
	if sh.topo == TopologyAny {
		return total
	}
	return largest
}

// staticLargest is the largest group of usable matching GPUs by topology.
func staticLargest(mi *maskIndex, topo Topology) int {
	switch topo {
	case TopologyNVLinkDomain:
		return mi.staticLargestDom
	case TopologySameNode:
		return mi.staticLargestNode
	}
	return mi.static
}

// freeCounts returns how many usable matching GPUs could take one device of
// sh now, and how many of those are reserved for higher-ranked jobs.
func (ps *poolState) freeCounts(sh *shapeInfo) (free, reserved int) {
	if mi := sh.mi; mi != nil && !ps.slow {
		free, reserved = mi.all.total, mi.all.total-mi.unres.total
		if sh.milli < MilliPerGPU {
			for c, ok := range sh.match {
				if !ok {
					continue
				}
				list := ps.partial[c]
				from := lowerBound(list, sh.milli)
				free += len(list) - from
				if ps.partialReserved[c] == 0 {
					continue
				}
				for _, e := range list[from:] {
					if ps.gpus[e.idx].reserved != 0 {
						reserved++
					}
				}
			}
		}
		return free, reserved
	}
	for gi := range ps.gpus {
		g := &ps.gpus[gi]
		if sh.candidate(g, searchWithReserved) {
			free++
			if g.reserved != 0 {
				reserved++
			}
		}
	}
	return free, reserved
}

// anyReserved reports whether some reserved GPU might take one device of sh
// (when false, a search that ignores reservations finds nothing more).
func (ps *poolState) anyReserved(sh *shapeInfo) bool {
	mi := sh.mi
	if mi == nil || ps.slow {
		return true
	}
	if mi.all.total > mi.unres.total {
		return true
	}
	if sh.milli < MilliPerGPU {
		for c, ok := range sh.match {
			if ok && ps.partialReserved[c] > 0 {
				return true
			}
		}
	}
	return false
}

// apply charges a placement to the pool.
func (ps *poolState) apply(sh *shapeInfo, c choice) {
	for _, gi := range c.gpus {
		g := &ps.gpus[gi]
		ps.setGPU(gi, g.used+sh.milli, g.reserved)
	}
	n := &ps.nodes[c.node]
	n.cpuUsed += sh.req.CPUMilli
	n.memUsed += sh.req.MemoryMiB
	ps.touchNode(c.node)
	ps.packTouched(c.node)
}

// largestOnNode is the most candidates of sh on one schedulable node.
func (ps *poolState) largestOnNode(sh *shapeInfo, mode searchMode) int {
	largest := 0
	for ni := range ps.nodes {
		if n := &ps.nodes[ni]; n.schedulable {
			largest = max(largest, ps.countIn(sh, mode, n.first, n.end))
		}
	}
	return largest
}

// freeUnreserved counts the GPUs that could take one device of sh now,
// outside reservations.
func (ps *poolState) freeUnreserved(sh *shapeInfo) int {
	free, reserved := ps.freeCounts(sh)
	return free - reserved
}
