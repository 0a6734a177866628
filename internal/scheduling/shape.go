package scheduling

import (
	"encoding/binary"
	"slices"
	"strconv"

	"github.com/gpugov/gpugov/internal/vocab"
)

// shapeInfo is what a cycle knows about one request shape in one pool: which
// GPU classes match, whether it could run on the empty pool, its description,
// and memos that stay valid while capacity only shrinks. Within a cycle free
// capacity never grows (placements and reservations only take), so "does not
// fit" learned once stays true for the rest of the cycle.
type shapeInfo struct {
	req   ResourceRequest // the first request seen with this shape (labels ignored)
	topo  Topology
	count int
	milli int32
	match []bool // per pool class
	// labelOK says per pool label set whether the request's node selector
	// matches it; nil when the request has no selector (every node matches).
	labelOK []bool
	// selectorNodes counts the schedulable nodes the selector matches (all
	// schedulable nodes when there is no selector).
	selectorNodes int
	mi            *maskIndex // the free-capacity index of match; nil when the pool is not indexed
	matching      int        // usable matching GPUs in the pool
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
	// suggest is the shape's nearest-fit suggestions (nearfit.go) and
	// releases its expected releases for capacity_busy (releases.go), each
	// computed once per cycle, at the first job that needs them.
	suggested    bool
	suggest      []Suggestion
	releasesDone bool
	releases     []ExpectedRelease
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
// milli, topology, CPU, memory, node selector pairs sorted by key) into buf.
// Labels are not part of the shape. scratch is reused to sort models and
// selector keys without allocating.
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
	if len(r.NodeSelector) > 0 {
		buf = append(buf, 0)
		*scratch = (*scratch)[:0]
		for k := range r.NodeSelector {
			*scratch = append(*scratch, k)
		}
		slices.Sort(*scratch)
		for _, k := range *scratch {
			buf = append(buf, k...)
			buf = append(buf, 0)
			buf = append(buf, r.NodeSelector[k]...)
			buf = append(buf, 0)
		}
	}
	return buf
}

// selectorMatches reports whether labels hold every pair of sel exactly.
func selectorMatches(sel, labels map[string]string) bool {
	for k, v := range sel {
		if lv, ok := labels[k]; !ok || lv != v {
			return false
		}
	}
	return true
}

// selectorText renders a node selector as "network=infiniband,storage=local-nvme"
// (keys sorted).
func selectorText(sel map[string]string) string {
	keys := make([]string, 0, len(sel))
	for k := range sel {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	b := make([]byte, 0, 64)
	for i, k := range keys {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, k...)
		b = append(b, '=')
		b = append(b, sel[k]...)
	}
	return string(b)
}

// applySelector evaluates the request's node selector once per label set of
// the pool, sets labelOK, and returns the selector's note for the shape's
// description: "node_selector network=infiniband rules out 3 of 4 schedulable
// nodes" ("" when the selector is empty or rules out no schedulable node).
func (ps *poolState) applySelector(sh *shapeInfo, sel map[string]string) string {
	if len(sel) == 0 {
		sh.selectorNodes = ps.schedulable
		return ""
	}
	sh.labelOK = make([]bool, len(ps.labelSets))
	for li, ls := range ps.labelSets {
		sh.labelOK[li] = selectorMatches(sel, ls)
	}
	out := 0
	for ni := range ps.nodes {
		if n := &ps.nodes[ni]; n.schedulable && !sh.labelOK[n.labels] {
			out++
		}
	}
	sh.selectorNodes = ps.schedulable - out
	if out == 0 {
		return ""
	}
	return "node_selector " + selectorText(sel) + " rules out " + strconv.Itoa(out) + " of " +
		strconv.Itoa(ps.schedulable) + " schedulable nodes"
}

// newShape computes the static facts of a shape in a pool.
func (ps *poolState) newShape(r *ResourceRequest) *shapeInfo {
	sh := &shapeInfo{req: *r, topo: normalTopology(r.Topology), count: r.GPUs, milli: int32(r.MilliPerDevice())}
	sh.req.Labels = nil
	note := ps.applySelector(sh, r.NodeSelector)
	sh.match = make([]bool, len(ps.classes))
	for ci, c := range ps.classes {
		sh.match[ci] = c.memoryMiB >= r.GPUMemoryMiB && (len(r.GPUModels) == 0 || slices.Contains(r.GPUModels, c.model)) &&
			(sh.labelOK == nil || sh.labelOK[c.labels])
	}
	sh.desc = describeRequest(r, sh.topo)
	if note != "" {
		sh.desc += "; " + note
	}
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
	case sh.topo == TopologyWholeNodes:
		_, ok := ps.find(sh, searchEmpty)
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
	return t == TopologyAny || t == TopologySameNode || t == TopologyNVLinkDomain || t == TopologyWholeNodes
}
