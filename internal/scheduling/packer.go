package scheduling

import "github.com/gpugov/gpugov/internal/vocab"

// Packer places requests one at a time on one pool with nothing departing,
// through the same search and placement rules as Plan (a packing study: the
// FGD paper's workload inflation, internal/simulation's Inflate). It keeps
// the pool's state between requests, so each placement costs one search.
type Packer struct {
	ps     *poolState
	shapes map[string]*shapeInfo
	keyBuf []byte
	models []string
}

// PackOutcome is what Place did with one request: the node it landed on,
// or the wait reason Plan would give it with no reservations (none of
// Plan's queueing reasons apply): no_matching_capacity when it fits no node
// of the empty pool, fragmented when enough matching GPUs have room for it
// but not together on a node that hosts its CPU and memory, else
// capacity_busy.
type PackOutcome struct {
	Placed bool
	Node   string
	Reason vocab.WaitReason // "" when placed
}

// PackStats is the pool's packing state. Milli-GPU throughout.
type PackStats struct {
	TotalMilli     int64 // capacity of the usable GPUs
	AllocatedMilli int64 // milli-GPU placed on usable GPUs
	GPUsInUse      int   // GPUs with any allocation
	GPUs           int   // usable GPUs
	// FragmentedMilli is the pool's expected fragmentation w.r.t. the target
	// workload (Σ over nodes of fragOf, divided by the workload's weight): the
	// free milli-GPU the workload's typical request cannot use, weighted by
	// how often each request shape occurs (ATC '23 FGD §4.1).
	FragmentedMilli float64
}

// NewPacker builds a packer over pool p (allocations none) under rule, with
// workload as the target workload that scored rules and FragmentedMilli
// measure fragmentation against (for PlacementBestFit it is used for
// FragmentedMilli only).
func NewPacker(p *Pool, rule PlacementRule, workload []WorkloadShape) *Packer {
	ps := buildCapacity(&Snapshot{Pools: []Pool{*p}}).sorted[0]
	ps.initIndex()
	pk := &Packer{ps: ps, shapes: ps.shapes}
	ps.initPacking(PlacementFGD, workload, pk.shape) // the measure, whatever the rule
	ps.pack.rule = rule
	return pk
}

// shape returns the pool's shape of r, made once.
func (pk *Packer) shape(r *ResourceRequest) *shapeInfo {
	pk.keyBuf = shapeKeyBytes(pk.keyBuf[:0], r, &pk.models)
	if sh, ok := pk.shapes[string(pk.keyBuf)]; ok {
		return sh
	}
	sh := pk.ps.newShape(r)
	pk.shapes[string(pk.keyBuf)] = sh
	return sh
}

// Place places r where the packer's rule chooses and charges it, or reports
// why it does not fit (see PackOutcome).
func (pk *Packer) Place(r *ResourceRequest) PackOutcome {
	ps := pk.ps
	sh := pk.shape(r)
	if !sh.emptyFit {
		return PackOutcome{Reason: vocab.ReasonNoMatchingCapacity}
	}
	ch, ok := ps.search(sh, searchFree)
	if !ok {
		if free, _ := ps.freeCounts(sh); sh.count > 0 && free >= sh.count {
			return PackOutcome{Reason: vocab.ReasonFragmented}
		}
		return PackOutcome{Reason: vocab.ReasonCapacityBusy}
	}
	ps.apply(sh, ch)
	return PackOutcome{Placed: true, Node: ps.nodes[ch.node].name}
}

// Stats returns the pool's packing state now.
func (pk *Packer) Stats() PackStats {
	ps := pk.ps
	var st PackStats
	for gi := range ps.gpus {
		g := &ps.gpus[gi]
		if !g.usable {
			continue
		}
		st.GPUs++
		st.TotalMilli += MilliPerGPU
		st.AllocatedMilli += int64(g.used)
		if g.used > 0 {
			st.GPUsInUse++
		}
	}
	if ps.pack.totalW > 0 {
		var f int64
		for ni := range ps.nodes {
			f += ps.nodeFrag(int32(ni))
		}
		st.FragmentedMilli = float64(f) / float64(ps.pack.totalW)
	}
	return st
}
