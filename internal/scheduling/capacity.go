package scheduling

import (
	"slices"
	"strings"
	"sync"

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
	// touched is set the first time the cycle charges or changes the GPU
	// (it is then in poolState.touched); a GPU never touched has nothing
	// used or reserved.
	touched bool
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

// poolStatic is the part of a pool's capacity index that only the
// inventory and the selector keys decide: names, node and GPU order, NVLink
// domains, GPU classes, label sets, and the free-capacity index's per-node
// class sets and the static counts and empty-pool views of its masks. It is
// built once per inventory version (capacityStatic, Planner) and shared
// read-only by every cycle that reuses it; only the mask cache grows, under
// maskMu. Each cycle's poolState copies nodes0 and gpus0 (nothing used or
// reserved) and charges its allocations to the copies.
type poolStatic struct {
	name      string
	available bool
	stage     vocab.AutomationStage
	domains   []domainState
	classes   []gpuClass
	// labelSets are the distinct node labels of the pool as the cycle's node
	// selectors see them (projected onto selectorKeys); each entry is the
	// labels of the first node with that projection. One entry (nil) when no
	// pending job has a selector, so labels then add no classes.
	labelSets   []map[string]string
	schedulable int // schedulable nodes
	nodeByName  map[string]int32
	nodes0      []nodeState // the nodes with nothing used
	gpus0       []gpuState  // the GPUs with nothing used or reserved
	// indexed is false when the pool has more than 64 GPU classes (the
	// free-capacity index is then not used); nodeClasses and maxNode/maxDom
	// are set only when it is true.
	indexed         bool
	nodeClasses     []uint64 // per node: the classes of its GPUs
	maxNode, maxDom int      // most GPUs on one node / in one domain
	maskMu          sync.Mutex
	maskCache       map[uint64]*maskStatic // by class set; at most maxCachedMasks
}

// poolState is one pool during a cycle, with its capacity accounting.
type poolState struct {
	*poolStatic
	nodes []nodeState // copies of nodes0, charged with the cycle's allocations and placements
	gpus  []gpuState  // copies of gpus0, likewise
	// touched lists the GPUs charged or changed this cycle (gpuState.touched),
	// in first-touch order: the others still have nothing used or reserved.
	touched []int32
	// version counts capacity changes (placements, reservations) in this cycle;
	// cached reason details are valid only for the version they were built at.
	version      uint32
	reservations []reservation
	shapes       map[string]*shapeInfo // by shapeKeyBytes
	heldDepth    int                   // reservations counted against ReservationPolicy.Depth
	lastRanked   int32                 // entry of the last job of this pool decided so far and left waiting for GPUs; −1 none
	ranked       int32                 // jobs of this pool decided so far (the pool rank of the last)
	quota        *poolQuota            // nil when the pool has no quota rows

	// The free-capacity index (freeindex.go), used when poolStatic.indexed;
	// slow forces the reference scans (tests).
	slow            bool
	partial         [][]partialGPU // per class: partly used usable GPUs by free milli
	partialReserved []int32        // per class: how many of those are reserved
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

// uuidRef is a gpuRef in a capacityStatic: the pool's index in sorted.
type uuidRef struct{ pool, idx int32 }

// capacityStatic is the inventory's part of the capacity index (see
// poolStatic): every pool of a snapshot sorted by name, for the snapshot's
// selector keys. It is read-only once built but for its lazily built maps,
// so concurrent cycles may share it.
type capacityStatic struct {
	keys   []string // selectorKeys of the snapshot it was built for
	counts inventoryCounts
	sorted []*poolStatic
	// byUUID is built on first need (a GPU whose node is not named); a UUID
	// held by two GPUs names the last in pool, then GPU order.
	uuidOnce sync.Once
	byUUID   map[string]uuidRef
	// spare holds per-cycle arrays that finished cycles gave back (recycle),
	// reset to nodes0 and gpus0, for the next cycles; at most maxSpare.
	spareMu sync.Mutex
	spare   [][]poolArrays
}

// poolArrays are the per-cycle arrays of one pool: its nodes and GPUs as a
// cycle charges them, and the search scratch.
type poolArrays struct {
	nodes []nodeState
	gpus  []gpuState
	pick  []int32
}

// maxSpare bounds capacityStatic.spare: one set per cycle running at once.
const maxSpare = 4

// inventoryCounts is the size of a snapshot's inventory: pools, nodes and
// GPUs. The Planner compares it as a guard beside Snapshot.InventoryVersion.
type inventoryCounts struct{ pools, nodes, gpus int }

// countInventory sizes s's inventory (O(pools + nodes)).
func countInventory(s *Snapshot) inventoryCounts {
	c := inventoryCounts{pools: len(s.Pools)}
	for i := range s.Pools {
		c.nodes += len(s.Pools[i].Nodes)
		for j := range s.Pools[i].Nodes {
			c.gpus += len(s.Pools[i].Nodes[j].GPUs)
		}
	}
	return c
}

// buildStatic indexes s's inventory (pools, nodes and GPUs sorted by name so
// input order never matters) for the selector keys keys.
func buildStatic(s *Snapshot, keys []string) *capacityStatic {
	cs := &capacityStatic{keys: keys, counts: countInventory(s)}
	seen := make(map[string]bool, len(s.Pools))
	for i := range s.Pools {
		if seen[s.Pools[i].Name] {
			continue // a pool name is unique; a duplicate row is ignored
		}
		seen[s.Pools[i].Name] = true
		cs.sorted = append(cs.sorted, newPoolStatic(&s.Pools[i], keys))
	}
	slices.SortFunc(cs.sorted, func(a, b *poolStatic) int { return strings.Compare(a.name, b.name) })
	return cs
}

// uuids returns the UUID map, building it on first call.
func (cs *capacityStatic) uuids() map[string]uuidRef {
	cs.uuidOnce.Do(func() {
		cs.byUUID = make(map[string]uuidRef)
		for pi, ps := range cs.sorted {
			for gi := range ps.gpus0 {
				cs.byUUID[ps.gpus0[gi].uuid] = uuidRef{int32(pi), int32(gi)}
			}
		}
	})
	return cs.byUUID
}

// capacityIndex holds every pool of the snapshot, sorted by name.
type capacityIndex struct {
	static *capacityStatic
	pools  map[string]*poolState
	sorted []*poolState // as static.sorted

	lastPool *poolState // locate's memo of the last node looked up
	lastNode string
	lastIdx  int32
}

// buildCapacity indexes the inventory and charges every allocation to it.
func buildCapacity(s *Snapshot) *capacityIndex {
	return newCapacity(buildStatic(s, selectorKeys(s)), s)
}

// newCapacity starts a cycle's capacity index on cs (built for s's
// inventory and selector keys) and charges s's allocations to it.
func newCapacity(cs *capacityStatic, s *Snapshot) *capacityIndex {
	ci := &capacityIndex{static: cs, pools: make(map[string]*poolState, len(cs.sorted)),
		sorted: make([]*poolState, len(cs.sorted))}
	arrays := cs.takeArrays()
	for i, st := range cs.sorted {
		ps := &poolState{poolStatic: st, shapes: make(map[string]*shapeInfo), lastRanked: -1}
		if arrays != nil {
			ps.nodes, ps.gpus, ps.pick = arrays[i].nodes, arrays[i].gpus, arrays[i].pick
		} else {
			ps.nodes, ps.gpus = slices.Clone(st.nodes0), slices.Clone(st.gpus0)
			ps.pick = make([]int32, 0, len(ps.gpus))
		}
		ci.pools[st.name] = ps
		ci.sorted[i] = ps
	}
	for i := range s.Allocations {
		ci.charge(&s.Allocations[i])
	}
	return ci
}

// takeArrays returns a spare set of per-cycle arrays, or nil when none.
func (cs *capacityStatic) takeArrays() []poolArrays {
	cs.spareMu.Lock()
	defer cs.spareMu.Unlock()
	n := len(cs.spare)
	if n == 0 {
		return nil
	}
	a := cs.spare[n-1]
	cs.spare = cs.spare[:n-1]
	return a
}

// recycle gives the cycle's arrays back to the static index for later
// cycles, once the cycle is over (nothing of a Result points into them): it
// resets the touched GPUs to gpus0 (nothing used or reserved) and every
// node's CPU and memory use to zero. The index must not be used afterwards.
func (ci *capacityIndex) recycle() {
	arrays := make([]poolArrays, len(ci.sorted))
	for i, ps := range ci.sorted {
		for _, gi := range ps.touched {
			g := &ps.gpus[gi]
			g.used, g.reserved, g.touched = 0, 0, false
		}
		for ni := range ps.nodes {
			ps.nodes[ni].cpuUsed, ps.nodes[ni].memUsed = 0, 0
		}
		arrays[i] = poolArrays{nodes: ps.nodes, gpus: ps.gpus, pick: ps.pick[:0]}
		ps.nodes, ps.gpus, ps.pick, ps.touched = nil, nil, nil, nil
	}
	cs := ci.static
	cs.spareMu.Lock()
	defer cs.spareMu.Unlock()
	if len(cs.spare) < maxSpare {
		cs.spare = append(cs.spare, arrays)
	}
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
	ref, ok := ci.static.uuids()[uuid]
	if !ok {
		return gpuRef{}, false
	}
	return gpuRef{ci.sorted[ref.pool], ref.idx}, true
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
		ref.pool.touch(ref.idx)
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
func (ps *poolStatic) labelSetIndex(n *Node, keys []string, byKey map[string]int32, buf []byte) (int32, []byte) {
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

// newPoolStatic builds the sorted node/domain/GPU arrays of one pool and,
// when it has at most 64 GPU classes, the static part of its free-capacity
// index; keys are the snapshot's selector keys (selectorKeys).
func newPoolStatic(p *Pool, keys []string) *poolStatic {
	ps := &poolStatic{name: p.Name, available: p.Available, stage: p.Stage}
	nodes := make([]*Node, 0, len(p.Nodes))
	for i := range p.Nodes {
		nodes = append(nodes, &p.Nodes[i])
	}
	slices.SortStableFunc(nodes, func(a, b *Node) int { return strings.Compare(a.Name, b.Name) })
	ps.nodes0 = make([]nodeState, 0, len(nodes))
	ps.nodeByName = make(map[string]int32, len(nodes))
	ps.gpus0 = make([]gpuState, 0, 8*len(nodes))
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
			first: int32(len(ps.gpus0)), domFirst: int32(len(ps.domains))}
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
				ps.domains = append(ps.domains, domainState{node: int32(ni), first: int32(len(ps.gpus0))})
			}
			ps.gpus0 = append(ps.gpus0, gpuState{uuid: g.UUID, class: ci, node: int32(ni),
				domain: int32(len(ps.domains) - 1), usable: g.Healthy && n.Schedulable})
			ps.domains[len(ps.domains)-1].end = int32(len(ps.gpus0))
		}
		ns.end, ns.domEnd = int32(len(ps.gpus0)), int32(len(ps.domains))
		if _, dup := ps.nodeByName[ns.name]; !dup {
			ps.nodeByName[ns.name] = int32(len(ps.nodes0))
		}
		ps.nodes0 = append(ps.nodes0, ns)
	}
	ps.initStaticIndex()
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
func (ps *poolStatic) nodeIndex(name string) int32 {
	if ni, ok := ps.nodeByName[name]; ok {
		return ni
	}
	return -1
}
