package scheduling

import (
	"slices"
	"strings"

	"github.com/gpugov/gpugov/internal/vocab"
)

// gpuClass is one kind of GPU in a pool, (model, memory, node label set).
// Requests match whole classes, so matching (node selector included) is
// computed once per class rather than once per GPU.
type gpuClass struct {
	model     string
	memoryMiB int64
	labels    int32 // index into poolState.labelSets of the GPU's node
}

// gpuState is one GPU during a cycle.
type gpuState struct {
	uuid     string
	class    int32 // index into poolState.classes
	node     int32 // index into poolState.nodes
	domain   int32 // index into poolState.domains
	used     int32 // milli-GPU held by allocations and this cycle's placements
	reserved int32 // 1 + index of the reservation holding this GPU this cycle; 0 = none
	usable   bool  // healthy and on a schedulable node
}

// free is the GPU's unallocated milli-GPU.
func (g *gpuState) free() int32 { return MilliPerGPU - g.used }

// nodeState is one node during a cycle. Its GPUs are gpus[first:end], ordered
// by NVLink domain so that each domain is a contiguous range.
type nodeState struct {
	name             string
	schedulable      bool
	labels           int32 // index into poolState.labelSets
	cpuCap, memCap   int64 // 0 = not tracked
	cpuUsed, memUsed int64
	first, end       int32
	domFirst, domEnd int32 // range of the node's domains in poolState.domains
}

// fitsHost reports whether the node has cpu milli-cores and mem MiB free (or
// does not track them). With empty set, it compares against the capacity alone.
func (n *nodeState) fitsHost(cpu, mem int64, empty bool) bool {
	cu, mu := n.cpuUsed, n.memUsed
	if empty {
		cu, mu = 0, 0
	}
	if n.cpuCap > 0 && cpu > n.cpuCap-cu {
		return false
	}
	if n.memCap > 0 && mem > n.memCap-mu {
		return false
	}
	return true
}

// domainState is one NVLink/NVSwitch domain of a node: gpus[first:end]. A GPU
// with no domain forms a domain of its own.
type domainState struct {
	node       int32
	first, end int32
}

// poolState is one pool during a cycle, with its capacity accounting.
type poolState struct {
	name      string
	available bool
	stage     vocab.AutomationStage
	nodes     []nodeState
	domains   []domainState
	gpus      []gpuState
	classes   []gpuClass
	// labelSets are the distinct node labels of the pool as the cycle's node
	// selectors see them (projected onto selectorKeys); each entry is the
	// labels of the first node with that projection. One entry (nil) when no
	// pending job has a selector, so labels then add no classes.
	labelSets []map[string]string
	// version counts capacity changes (placements, reservations) in this cycle;
	// cached reason details are valid only for the version they were built at.
	version      uint32
	reservations []reservation
	shapes       map[string]*shapeInfo // by shapeKeyBytes
	schedulable  int                   // schedulable nodes
	heldDepth    int                   // reservations counted against ReservationPolicy.Depth
	lastRanked   int32                 // entry of the last job of this pool decided so far and left waiting for GPUs; −1 none
	ranked       int32                 // jobs of this pool decided so far (the pool rank of the last)
	quota        *poolQuota            // nil when the pool has no quota rows
	nodeByName   map[string]int32

	// The free-capacity index (freeindex.go); indexed is false when the pool
	// has more than 64 GPU classes, and slow forces the reference scans (tests).
	indexed         bool
	slow            bool
	partial         [][]partialGPU // per class: partly used usable GPUs by free milli
	partialReserved []int32        // per class: how many of those are reserved
	nodeClasses     []uint64       // per node: the classes of its GPUs
	maxNode, maxDom int            // most GPUs on one node / in one domain
	masks           map[uint64]*maskIndex
	maskList        []*maskIndex // masks in creation order (iterated, never the map)
	pick            []int32      // scratch for search choices; as long as gpus, so never regrown
	// poolCands and poolFailed cache pool-wide victim searches (victimsearch.go).
	poolCands     map[candKey]*poolCands
	poolCandsBase *poolCands
	poolFailed    map[failKey]int
	// ends are the pool's running jobs with a declared run time, earliest
	// expected end first, their GPU shares in endShares; built on first need
	// (cycle.buildEnds). relFreed (per GPU), relUnit (per node or domain,
	// −1 unset) and the touched lists are capacityReleases' scratch.
	ends                       []runEnd
	endShares                  []endShare
	relFreed, relUnit          []int32
	relTouched, relTouchedUnit []int32
	// pack is the fragmentation bookkeeping of a scored placement rule
	// (packing.go); nil under best fit.
	pack *packState
}

// gpuRef locates a GPU by UUID.
type gpuRef struct {
	pool *poolState
	idx  int32
}

// capacityIndex holds every pool of the snapshot, sorted by name.
type capacityIndex struct {
	pools  map[string]*poolState
	sorted []*poolState
	byUUID map[string]gpuRef // built on first need (a GPU whose node is not named)

	lastPool *poolState // locate's memo of the last node looked up
	lastNode string
	lastIdx  int32
}

// buildCapacity indexes the inventory (pools, nodes and GPUs sorted by name so
// input order never matters) and charges every allocation to it.
func buildCapacity(s *Snapshot) *capacityIndex {
	ci := &capacityIndex{pools: make(map[string]*poolState, len(s.Pools))}
	keys := selectorKeys(s)
	for i := range s.Pools {
		if _, dup := ci.pools[s.Pools[i].Name]; dup {
			continue // a pool name is unique; a duplicate row is ignored
		}
		ps := newPoolState(&s.Pools[i], keys)
		ci.pools[ps.name] = ps
		ci.sorted = append(ci.sorted, ps)
	}
	slices.SortFunc(ci.sorted, func(a, b *poolState) int { return strings.Compare(a.name, b.name) })
	for i := range s.Allocations {
		ci.charge(&s.Allocations[i])
	}
	return ci
}

// locate finds a GPU: on the named node of the named pool when it is there
// (no map needed), else through the UUID map.
func (ci *capacityIndex) locate(pool, node, uuid string) (gpuRef, bool) {
	if ci.lastPool == nil || ci.lastPool.name != pool || ci.lastNode != node {
		// Allocations come grouped by node more often than not: remember
		// the last node looked up.
		ci.lastPool, ci.lastNode, ci.lastIdx = ci.pools[pool], node, -1
		if ci.lastPool != nil {
			ci.lastIdx = ci.lastPool.nodeIndex(node)
		}
	}
	if ps, ni := ci.lastPool, ci.lastIdx; ps != nil {
		if ni >= 0 {
			n := &ps.nodes[ni]
			for gi := n.first; gi < n.end; gi++ {
				if ps.gpus[gi].uuid == uuid {
					return gpuRef{ps, gi}, true
				}
			}
		}
	}
	if ci.byUUID == nil {
		ci.byUUID = make(map[string]gpuRef)
		for _, ps := range ci.sorted {
			for gi := range ps.gpus {
				ci.byUUID[ps.gpus[gi].uuid] = gpuRef{ps, int32(gi)}
			}
		}
	}
	ref, ok := ci.byUUID[uuid]
	return ref, ok
}

// poolOfGPU returns the pool holding a GPU, or nil.
func (ci *capacityIndex) poolOfGPU(uuid string) *poolState {
	ref, _ := ci.locate("", "", uuid)
	return ref.pool
}

// charge adds one allocation's GPU shares, CPU and memory to the accounting.
// Shares of unknown GPUs are ignored (the GPU left the inventory); a GPU is
// never charged beyond MilliPerGPU.
func (ci *capacityIndex) charge(a *Allocation) {
	var hostPool *poolState
	for _, sh := range a.GPUs {
		ref, ok := ci.locate(a.Pool, a.Node, sh.UUID)
		if !ok {
			continue
		}
		g := &ref.pool.gpus[ref.idx]
		g.used = int32(min(int64(g.used)+int64(max(sh.Milli, 0)), MilliPerGPU))
		if hostPool == nil {
			hostPool = ref.pool
		}
	}
	if p, ok := ci.pools[a.Pool]; ok {
		hostPool = p
	}
	if hostPool == nil {
		return
	}
	if ni := hostPool.nodeIndex(a.Node); ni >= 0 {
		hostPool.nodes[ni].cpuUsed += a.CPUMilli
		hostPool.nodes[ni].memUsed += a.MemoryMiB
	}
}

// noLabelSets is the label sets of a pool when no pending job has a node
// selector: one empty set shared by every node. It is never written.
var noLabelSets = []map[string]string{nil}

// selectorKeys returns the sorted distinct label keys named by the node
// selectors of the snapshot's pending jobs (nil when none has one). Node
// labels are seen only through these keys, so labels no job asks for never
// split GPU classes.
func selectorKeys(s *Snapshot) []string {
	var keys []string
	for i := range s.Pending {
		for k := range s.Pending[i].Request.NodeSelector {
			if !slices.Contains(keys, k) {
				keys = append(keys, k)
			}
		}
	}
	slices.Sort(keys)
	return keys
}

// labelSetIndex returns the index in ps.labelSets of node n's labels
// projected onto keys, adding it when new. byKey maps projections to indices.
func (ps *poolState) labelSetIndex(n *Node, keys []string, byKey map[string]int32, buf []byte) (int32, []byte) {
	buf = buf[:0]
	for _, k := range keys {
		if v, ok := n.Labels[k]; ok {
			buf = append(buf, 1)
			buf = append(buf, v...)
		}
		buf = append(buf, 0)
	}
	if li, ok := byKey[string(buf)]; ok {
		return li, buf
	}
	li := int32(len(ps.labelSets))
	byKey[string(buf)] = li
	ps.labelSets = append(ps.labelSets, n.Labels)
	return li, buf
}

// newPoolState builds the sorted node/domain/GPU arrays of one pool; keys are
// the snapshot's selector keys (selectorKeys).
func newPoolState(p *Pool, keys []string) *poolState {
	ps := &poolState{name: p.Name, available: p.Available, stage: p.Stage, shapes: make(map[string]*shapeInfo), lastRanked: -1}
	nodes := make([]*Node, 0, len(p.Nodes))
	for i := range p.Nodes {
		nodes = append(nodes, &p.Nodes[i])
	}
	slices.SortStableFunc(nodes, func(a, b *Node) int { return strings.Compare(a.Name, b.Name) })
	ps.nodes = make([]nodeState, 0, len(nodes))
	ps.nodeByName = make(map[string]int32, len(nodes))
	ps.gpus = make([]gpuState, 0, 8*len(nodes))
	ps.domains = make([]domainState, 0, 2*len(nodes))
	classIdx := make(map[gpuClass]int32)
	var labelByKey map[string]int32
	var labelBuf []byte
	if len(keys) > 0 {
		labelByKey = make(map[string]int32)
	} else {
		ps.labelSets = noLabelSets
	}
	for ni, n := range nodes {
		ns := nodeState{name: n.Name, schedulable: n.Schedulable, cpuCap: n.CPUMilli, memCap: n.MemoryMiB,
			first: int32(len(ps.gpus)), domFirst: int32(len(ps.domains))}
		if labelByKey != nil {
			ns.labels, labelBuf = ps.labelSetIndex(n, keys, labelByKey, labelBuf)
		}
		if n.Schedulable {
			ps.schedulable++
		}
		gpus := n.GPUs
		if !slices.IsSortedFunc(gpus, compareGPUByDomain) {
			gpus = slices.Clone(gpus)
			slices.SortFunc(gpus, compareGPUByDomain)
		}
		for gi := range gpus {
			g := &gpus[gi]
			cls := gpuClass{model: g.Model, memoryMiB: g.MemoryMiB, labels: ns.labels}
			ci, ok := classIdx[cls]
			if !ok {
				ci = int32(len(ps.classes))
				classIdx[cls] = ci
				ps.classes = append(ps.classes, cls)
			}
			if gi == 0 || g.NVLinkDomain == "" || g.NVLinkDomain != gpus[gi-1].NVLinkDomain {
				ps.domains = append(ps.domains, domainState{node: int32(ni), first: int32(len(ps.gpus))})
			}
			ps.gpus = append(ps.gpus, gpuState{uuid: g.UUID, class: ci, node: int32(ni),
				domain: int32(len(ps.domains) - 1), usable: g.Healthy && n.Schedulable})
			ps.domains[len(ps.domains)-1].end = int32(len(ps.gpus))
		}
		ns.end, ns.domEnd = int32(len(ps.gpus)), int32(len(ps.domains))
		if _, dup := ps.nodeByName[ns.name]; !dup {
			ps.nodeByName[ns.name] = int32(len(ps.nodes))
		}
		ps.nodes = append(ps.nodes, ns)
	}
	ps.pick = make([]int32, 0, len(ps.gpus))
	return ps
}

// compareGPUByDomain orders a node's GPUs by NVLink domain (named domains
// first), then UUID, so each domain is contiguous and the order is stable.
func compareGPUByDomain(a, b GPU) int {
	if (a.NVLinkDomain == "") != (b.NVLinkDomain == "") {
		if a.NVLinkDomain == "" {
			return 1
		}
		return -1
	}
	if c := strings.Compare(a.NVLinkDomain, b.NVLinkDomain); c != 0 {
		return c
	}
	return strings.Compare(a.UUID, b.UUID)
}

// nodeIndex finds a node by name; −1 when absent. Duplicate names resolve to
// the first in sorted order.
func (ps *poolState) nodeIndex(name string) int32 {
	if ni, ok := ps.nodeByName[name]; ok {
		return ni
	}
	return -1
}
