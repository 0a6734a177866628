package scheduling

import (
	"encoding/binary"
	"slices"

	"github.com/gpugov/gpugov/internal/vocab"
)

// shapeInfo is what a cycle knows about one request shape in one pool: which
// GPU classes match, whether it could run on the empty pool, its description,
// and memos that stay valid while capacity only shrinks. Within a cycle free
// capacity never grows (placements and reservations only take), so "does not
// fit" learned once stays true for the rest of the cycle.
type shapeInfo struct {
	req      ResourceRequest // the first request seen with this shape (labels ignored)
	topo     Topology
	count    int
	milli    int32
	match    []bool     // per pool class
	mi       *maskIndex // the free-capacity index of match; nil when the pool is not indexed
	matching int        // usable matching GPUs in the pool
	// emptyFit: the shape fits the pool with no allocations (model, memory,
	// count, topology, node CPU and memory); emptyLargest is the largest group
	// the topology allows on the empty pool.
	emptyFit     bool
	emptyLargest int
	largestNode  int    // most usable matching GPUs on one schedulable node
	desc         string // "needs 4 × ≥81920 MiB H100|H200 on one node"
	want         string // wantText, built on first use
	reservedFor  string // reservedText's last blocking job and text
	reservedWant string
	noFitFree    bool // no fit outside reservations: permanent for the cycle
	noFitAll     bool // no fit even on reserved GPUs: permanent for the cycle
	// noPreempt is set per preemptor tier bit (and lender flag) once a victim
	// search failed; eligible victims only disappear during a cycle.
	noPreempt uint16
	// cached is the reason computed at cachedVersion, shared by later jobs of
	// the shape while the pool's capacity is unchanged.
	cachedVersion uint32
	cached        reasonCache
	hasCached     bool
}

// reasonCache is a capacity-dependent reason, the quantities it was
// decided from, and its texts.
type reasonCache struct {
	reason      vocab.WaitReason
	blocking    string // reserving job for reserved_for_higher_priority
	reservation int    // index of the blocking reservation in the pool
	// free and reserved count the matching GPUs that could take one device
	// (reserved: of those, held for higher-ranked jobs); largest is the
	// largest free group the topology allows (fragmented only).
	free, reserved, largest int
	detail, reEval          string
}

// normalTopology maps "" to TopologyAny.
func normalTopology(t Topology) Topology {
	if t == "" {
		return TopologyAny
	}
	return t
}

// shapeKeyBytes encodes the request's shape (models sorted, memory, count,
// milli, topology, CPU, memory) into buf. Labels are not part of the shape.
// scratch is reused to sort models without allocating.
func shapeKeyBytes(buf []byte, r *ResourceRequest, scratch *[]string) []byte {
	models := r.GPUModels
	if len(models) > 1 && !slices.IsSorted(models) {
		*scratch = append((*scratch)[:0], models...)
		slices.Sort(*scratch)
		models = *scratch
	}
	for i, m := range models {
		if i > 0 && m == models[i-1] {
			continue
		}
		buf = append(buf, m...)
		buf = append(buf, 0)
	}
	buf = append(buf, 1)
	buf = binary.LittleEndian.AppendUint64(buf, uint64(r.GPUMemoryMiB))
	buf = binary.LittleEndian.AppendUint64(buf, uint64(r.GPUs))
	buf = binary.LittleEndian.AppendUint32(buf, uint32(r.MilliPerDevice()))
	buf = binary.LittleEndian.AppendUint64(buf, uint64(r.CPUMilli))
	buf = binary.LittleEndian.AppendUint64(buf, uint64(r.MemoryMiB))
	buf = append(buf, normalTopology(r.Topology)...)
	return buf
}

// newShape computes the static facts of a shape in a pool.
func (ps *poolState) newShape(r *ResourceRequest) *shapeInfo {
	sh := &shapeInfo{req: *r, topo: normalTopology(r.Topology), count: r.GPUs, milli: int32(r.MilliPerDevice())}
	sh.req.Labels = nil
	sh.match = make([]bool, len(ps.classes))
	for ci, c := range ps.classes {
		sh.match[ci] = c.memoryMiB >= r.GPUMemoryMiB && (len(r.GPUModels) == 0 || slices.Contains(r.GPUModels, c.model))
	}
	sh.desc = describeRequest(r, sh.topo)
	sh.mi = ps.maskOf(sh.match)
	if !validTopology(sh.topo) || r.GPUs < 0 {
		return sh
	}
	if sh.mi == nil {
		sh.matching = ps.largestGroup(&shapeInfo{match: sh.match, topo: TopologyAny, milli: MilliPerGPU}, searchEmpty)
		sh.emptyLargest = ps.largestGroup(sh, searchEmpty)
		sh.largestNode = ps.largestOnNode(sh, searchEmpty)
		_, sh.emptyFit = ps.find(sh, searchEmpty)
		return sh
	}
	sh.matching = sh.mi.static
	sh.emptyLargest = staticLargest(sh.mi, sh.topo)
	sh.largestNode = staticLargest(sh.mi, TopologySameNode)
	sh.emptyFit = ps.fitsEmpty(sh)
	return sh
}

// fitsEmpty reports whether the shape fits the empty pool, from the mask's
// static counts: a domain (one GPU, or nvlink-domain) or node (same-node)
// with enough usable matching GPUs on a node with the CPU and memory; for a
// spread "any" request, enough in total and one such host node.
func (ps *poolState) fitsEmpty(sh *shapeInfo) bool {
	mi := sh.mi
	switch {
	case sh.count == 0:
		_, ok := ps.findHostOnly(sh, searchEmpty)
		return ok
	case sh.count == 1 || sh.topo == TopologyNVLinkDomain:
		for di, c := range mi.staticDom {
			if int(c) >= sh.count && sh.hostOK(&ps.nodes[ps.domains[di].node], searchEmpty) {
				return true
			}
		}
		return false
	}
	need := sh.count
	if sh.topo == TopologyAny {
		if mi.static < sh.count {
			return false
		}
		need = 1
	}
	for ni, c := range mi.staticNode {
		if int(c) >= need && sh.hostOK(&ps.nodes[ni], searchEmpty) {
			return true
		}
	}
	return false
}

// version is the capacity version the shape's cached reason depends on.
func (sh *shapeInfo) version(ps *poolState) uint32 {
	if sh.mi != nil && !ps.slow {
		return sh.mi.version
	}
	return ps.version
}

// validTopology reports whether t is one of the accepted topologies.
func validTopology(t Topology) bool {
	return t == TopologyAny || t == TopologySameNode || t == TopologyNVLinkDomain
}
