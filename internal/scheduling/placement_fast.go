package scheduling

// findFast is search through the free-capacity index (see freeindex.go). It
// returns the same choice as the reference scan find.
func (ps *poolState) findFast(sh *shapeInfo, mode searchMode) (choice, bool) {
	v := &sh.mi.unres
	if mode == searchWithReserved {
		v = &sh.mi.all
	}
	switch {
	case sh.count == 0:
		return ps.findHostOnly(sh, mode)
	case sh.count == 1 && sh.milli < MilliPerGPU:
		return ps.fastShare(sh, mode, v)
	case sh.milli < MilliPerGPU, sh.topo == TopologyWholeNodes:
		return ps.find(sh, mode) // several GPU shares (not a valid request) or whole nodes: scanned
	case sh.count == 1 || sh.topo == TopologyNVLinkDomain:
		return ps.fastDomain(sh, mode, v)
	case sh.topo == TopologySameNode:
		return ps.fastNode(sh, mode, v)
	}
	if c, ok := ps.fastDomain(sh, mode, v); ok {
		return c, true
	}
	if c, ok := ps.fastNode(sh, mode, v); ok {
		return c, true
	}
	return ps.fastSpread(sh, mode, v)
}

// fastDomain: the lowest domain in the lowest bucket ≥ count whose node hosts.
func (ps *poolState) fastDomain(sh *shapeInfo, mode searchMode, v *freeView) (choice, bool) {
	for k := sh.count; k < len(v.domBkt); k++ {
		if v.domN[k] == 0 {
			continue
		}
		b := v.domBkt[k]
		for d := b.next(0); d >= 0; d = b.next(d + 1) {
			if sh.hostOK(&ps.nodes[ps.domains[d].node], mode) {
				return ps.domainChoice(sh, mode, d), true
			}
		}
	}
	return choice{}, false
}

// fastNode: the lowest node in the lowest bucket ≥ count that hosts.
func (ps *poolState) fastNode(sh *shapeInfo, mode searchMode, v *freeView) (choice, bool) {
	ni := ps.fastNodeFrom(sh, mode, v, sh.count)
	if ni < 0 {
		return choice{}, false
	}
	return choice{node: ni, gpus: ps.takeOnNode(sh, mode, ps.pick[:0], ni, sh.count)}, true
}

// fastNodeFrom returns the lowest hosting node in the lowest bucket ≥ from.
func (ps *poolState) fastNodeFrom(sh *shapeInfo, mode searchMode, v *freeView, from int) int32 {
	for k := from; k < len(v.nodeBkt); k++ {
		if v.nodeN[k] == 0 {
			continue
		}
		b := v.nodeBkt[k]
		for n := b.next(0); n >= 0; n = b.next(n + 1) {
			if sh.hostOK(&ps.nodes[n], mode) {
				return n
			}
		}
	}
	return -1
}

// fastShare: the partly used GPU with the least free milli ≥ the share (then
// lowest index) on a hosting node, else a free GPU on the hosting node with
// the fewest free GPUs.
func (ps *poolState) fastShare(sh *shapeInfo, mode searchMode, v *freeView) (choice, bool) {
	best := partialGPU{free: MilliPerGPU + 1, idx: -1}
	for c, ok := range sh.match {
		if !ok {
			continue
		}
		list := ps.partial[c]
		for _, e := range list[lowerBound(list, sh.milli):] {
			if comparePartial(e, best) >= 0 {
				break
			}
			g := &ps.gpus[e.idx]
			if (mode == searchFree && g.reserved != 0) || !sh.hostOK(&ps.nodes[g.node], mode) {
				continue
			}
			best = e
			break
		}
	}
	if best.idx >= 0 {
		return choice{node: ps.gpus[best.idx].node, gpus: append(ps.pick[:0], best.idx)}, true
	}
	ni := ps.fastNodeFrom(sh, mode, v, 1)
	if ni < 0 {
		return choice{}, false
	}
	return choice{node: ni, gpus: ps.takeOnNode(sh, mode, ps.pick[:0], ni, 1)}, true
}

// fastSpread: nodes in bucket order (fewest candidates first, then index),
// collected until they hold count GPUs and include a hosting node.
func (ps *poolState) fastSpread(sh *shapeInfo, mode searchMode, v *freeView) (choice, bool) {
	if v.total < sh.count {
		return choice{}, false
	}
	var groups []nodeGroup
	total, hosted := 0, false
	for k := 1; k < len(v.nodeBkt) && !(hosted && total >= sh.count); k++ {
		if v.nodeN[k] == 0 {
			continue
		}
		b := v.nodeBkt[k]
		for n := b.next(0); n >= 0 && !(hosted && total >= sh.count); n = b.next(n + 1) {
			if !ps.nodes[n].schedulable {
				continue
			}
			groups = append(groups, nodeGroup{n, int32(k)})
			total += k
			hosted = hosted || sh.hostOK(&ps.nodes[n], mode)
		}
	}
	return ps.spreadChoice(sh, mode, groups)
}
