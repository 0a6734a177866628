package scheduling

import (
	"math/bits"
	"slices"
)

// The free-capacity index answers placement and reason queries without
// scanning every GPU: per class set ("mask") of the pool it keeps, for each
// count k, the set of nodes and of NVLink domains with exactly k free whole
// matching GPUs, both outside reservations (unres) and counting reserved ones
// (all); per class it keeps partly used GPUs sorted by free milli for shares.
// Best fit is then "the lowest non-empty bucket ≥ the count, lowest index
// first", the same rule the reference scans in placement.go apply, and every
// change of a GPU updates the index in O(masks).

// bitset is a set of small non-negative integers.
type bitset []uint64

// newBitset returns a bitset able to hold 0..n-1.
func newBitset(n int) bitset { return make(bitset, (n+63)/64) }

func (b bitset) set(i int32)   { b[i>>6] |= 1 << (uint(i) & 63) }
func (b bitset) clear(i int32) { b[i>>6] &^= 1 << (uint(i) & 63) }

// next returns the smallest member ≥ i, or −1.
func (b bitset) next(i int32) int32 {
	w := int(i >> 6)
	if w >= len(b) {
		return -1
	}
	if word := b[w] >> (uint(i) & 63); word != 0 {
		return i + int32(bits.TrailingZeros64(word))
	}
	for w++; w < len(b); w++ {
		if b[w] != 0 {
			return int32(w<<6 + bits.TrailingZeros64(b[w]))
		}
	}
	return -1
}

// freeView counts free whole GPUs of one mask per node and per domain, with
// the nodes and domains bucketed by that count.
type freeView struct {
	node, dom       []uint16
	nodeBkt, domBkt []bitset // by count
	nodeN, domN     []int32  // members per bucket
	total           int
}

// init sizes the view; every node and domain starts in bucket 0.
func (v *freeView) init(nodes, doms, maxNode, maxDom int) {
	v.node, v.dom = make([]uint16, nodes), make([]uint16, doms)
	v.nodeBkt, v.domBkt = make([]bitset, maxNode+1), make([]bitset, maxDom+1)
	v.nodeN, v.domN = make([]int32, maxNode+1), make([]int32, maxDom+1)
	for k := range v.nodeBkt {
		v.nodeBkt[k] = newBitset(nodes)
	}
	for k := range v.domBkt {
		v.domBkt[k] = newBitset(doms)
	}
	for i := range nodes {
		v.nodeBkt[0].set(int32(i))
	}
	for i := range doms {
		v.domBkt[0].set(int32(i))
	}
	v.nodeN[0], v.domN[0] = int32(nodes), int32(doms)
}

// copyOf makes v a copy of t that shares no memory with it.
func (v *freeView) copyOf(t *freeView) {
	v.node, v.dom = slices.Clone(t.node), slices.Clone(t.dom)
	v.nodeN, v.domN = slices.Clone(t.nodeN), slices.Clone(t.domN)
	v.nodeBkt, v.domBkt = cloneBitsets(t.nodeBkt), cloneBitsets(t.domBkt)
	v.total = t.total
}

// cloneBitsets copies bs into one new backing array.
func cloneBitsets(bs []bitset) []bitset {
	n := 0
	for _, b := range bs {
		n += len(b)
	}
	backing := make([]uint64, 0, n)
	out := make([]bitset, len(bs))
	for k, b := range bs {
		start := len(backing)
		backing = append(backing, b...)
		out[k] = backing[start:len(backing):len(backing)]
	}
	return out
}

// add moves a node and a domain by delta (±1) free GPUs.
func (v *freeView) add(node, dom int32, delta int) {
	k := v.node[node]
	v.nodeBkt[k].clear(node)
	v.nodeN[k]--
	k = uint16(int(k) + delta)
	v.node[node] = k
	v.nodeBkt[k].set(node)
	v.nodeN[k]++
	k = v.dom[dom]
	v.domBkt[k].clear(dom)
	v.domN[k]--
	k = uint16(int(k) + delta)
	v.dom[dom] = k
	v.domBkt[k].set(dom)
	v.domN[k]++
	v.total += delta
}

// largestNode and largestDom are the highest non-empty bucket.
func (v *freeView) largestNode() int { return highestNonEmpty(v.nodeN) }
func (v *freeView) largestDom() int  { return highestNonEmpty(v.domN) }

func highestNonEmpty(n []int32) int {
	for k := len(n) - 1; k > 0; k-- {
		if n[k] > 0 {
			return k
		}
	}
	return 0
}

// maskStatic is the part of a mask's index that only the inventory
// decides, built once per poolStatic and shared read-only: the usable
// matching GPUs per node and domain, and the free views of the empty pool.
type maskStatic struct {
	staticNode []uint16 // usable matching GPUs per node (the empty pool)
	staticDom  []uint16
	static     int
	// staticLargestNode/Dom: most usable matching GPUs on one node / domain.
	staticLargestNode, staticLargestDom int
	empty                               freeView // every usable matching GPU free and unreserved
}

// maskIndex is the index of one set of GPU classes (a request's matching
// classes) in one cycle. version changes whenever anything a query on it
// could see changes (a matching GPU, or host CPU/memory on a node with
// matching GPUs).
type maskIndex struct {
	*maskStatic
	mask       uint64
	version    uint32
	unres, all freeView
}

// maxCachedMasks bounds the masks a poolStatic keeps (each is O(nodes +
// domains)); past it a mask's static part is built for the cycle alone.
// Distinct class sets come from distinct requested models, memories and
// selectors, so real inventories stay far below it.
const maxCachedMasks = 1024

// partialGPU is a partly used usable GPU in its class's sorted list.
type partialGPU struct{ free, idx int32 }

// comparePartial orders partly used GPUs by free milli, then index.
func comparePartial(a, b partialGPU) int {
	if a.free != b.free {
		return int(a.free - b.free)
	}
	return int(a.idx - b.idx)
}

// initStaticIndex prepares the static part of the pool's index. The index is
// used only when the pool has at most 64 GPU classes (a class set is then
// one uint64); otherwise every query uses the reference scans.
func (ps *poolStatic) initStaticIndex() {
	if len(ps.classes) > 64 {
		return
	}
	ps.indexed = true
	ps.nodeClasses = make([]uint64, len(ps.nodes0))
	for gi := range ps.gpus0 {
		g := &ps.gpus0[gi]
		ps.nodeClasses[g.node] |= 1 << uint(g.class)
		ps.maxNode = max(ps.maxNode, int(ps.nodes0[g.node].end-ps.nodes0[g.node].first))
		d := &ps.domains[g.domain]
		ps.maxDom = max(ps.maxDom, int(d.end-d.first))
	}
	ps.maskCache = make(map[uint64]*maskStatic)
}

// initIndex prepares the cycle's index after all allocations are charged:
// only touched GPUs can be partly used.
func (ps *poolState) initIndex() {
	if !ps.indexed {
		return
	}
	ps.partial = make([][]partialGPU, len(ps.classes))
	ps.partialReserved = make([]int32, len(ps.classes))
	for _, gi := range ps.touched {
		g := &ps.gpus[gi]
		if g.usable && g.used > 0 && g.used < MilliPerGPU {
			ps.partial[g.class] = append(ps.partial[g.class], partialGPU{g.free(), gi})
			if g.reserved != 0 {
				ps.partialReserved[g.class]++
			}
		}
	}
	for c := range ps.partial {
		slices.SortFunc(ps.partial[c], comparePartial)
	}
	ps.masks = make(map[uint64]*maskIndex)
}

// staticMask returns the static part of class set m, from the pool's cache
// when some cycle built it.
func (ps *poolStatic) staticMask(m uint64) *maskStatic {
	ps.maskMu.Lock()
	defer ps.maskMu.Unlock()
	if ms, ok := ps.maskCache[m]; ok {
		return ms
	}
	ms := &maskStatic{staticNode: make([]uint16, len(ps.nodes0)), staticDom: make([]uint16, len(ps.domains))}
	ms.empty.init(len(ps.nodes0), len(ps.domains), ps.maxNode, ps.maxDom)
	for gi := range ps.gpus0 {
		g := &ps.gpus0[gi]
		if !g.usable || m&(1<<uint(g.class)) == 0 {
			continue
		}
		ms.staticNode[g.node]++
		ms.staticDom[g.domain]++
		ms.static++
		ms.staticLargestNode = max(ms.staticLargestNode, int(ms.staticNode[g.node]))
		ms.staticLargestDom = max(ms.staticLargestDom, int(ms.staticDom[g.domain]))
		ms.empty.add(g.node, g.domain, 1)
	}
	if len(ps.maskCache) < maxCachedMasks {
		ps.maskCache[m] = ms
	}
	return ms
}

// maskOf returns the index of the class set match (nil when not indexed):
// the empty pool's views less the touched GPUs that are not free (used, or
// reserved for unres), which is what counting the free GPUs gives.
func (ps *poolState) maskOf(match []bool) *maskIndex {
	if !ps.indexed {
		return nil
	}
	var m uint64
	for c, ok := range match {
		if ok {
			m |= 1 << uint(c)
		}
	}
	if mi, ok := ps.masks[m]; ok {
		return mi
	}
	mi := &maskIndex{maskStatic: ps.staticMask(m), mask: m}
	mi.all.copyOf(&mi.empty)
	mi.unres.copyOf(&mi.empty)
	for _, gi := range ps.touched {
		g := &ps.gpus[gi]
		if !g.usable || m&(1<<uint(g.class)) == 0 {
			continue
		}
		if g.used != 0 {
			mi.all.add(g.node, g.domain, -1)
			mi.unres.add(g.node, g.domain, -1)
		} else if g.reserved != 0 {
			mi.unres.add(g.node, g.domain, -1)
		}
	}
	ps.masks[m] = mi
	ps.maskList = append(ps.maskList, mi)
	return mi
}

// touch records that the cycle charged or changed GPU gi.
func (ps *poolState) touch(gi int32) {
	if g := &ps.gpus[gi]; !g.touched {
		g.touched = true
		ps.touched = append(ps.touched, gi)
	}
}

// setGPU changes a GPU's used milli and reservation and keeps the index and
// the versions of the masks it concerns up to date.
func (ps *poolState) setGPU(gi int32, used, reserved int32) {
	ps.touch(gi)
	g := &ps.gpus[gi]
	if !ps.indexed {
		g.used, g.reserved = used, reserved
		return
	}
	wasAll, wasUnres := g.usable && g.used == 0, g.usable && g.used == 0 && g.reserved == 0
	wasPartial := g.usable && g.used > 0 && g.used < MilliPerGPU
	wasPR := wasPartial && g.reserved != 0
	if wasPartial && g.used != used {
		ps.removePartial(g.class, partialGPU{g.free(), gi})
	}
	oldFree := g.free()
	g.used, g.reserved = used, reserved
	isAll, isUnres := g.usable && g.used == 0, g.usable && g.used == 0 && g.reserved == 0
	isPartial := g.usable && g.used > 0 && g.used < MilliPerGPU
	if isPartial && (!wasPartial || oldFree != g.free()) {
		ps.insertPartial(g.class, partialGPU{g.free(), gi})
	}
	if isPR := isPartial && g.reserved != 0; isPR != wasPR {
		ps.partialReserved[g.class] += int32(boolDelta(isPR))
	}
	// A reservation change on a GPU with nothing free is invisible to every
	// capacity query, so it leaves cached reasons valid.
	if !g.usable || (isAll == wasAll && isUnres == wasUnres && oldFree == g.free() && oldFree == 0) {
		return
	}
	bit := uint64(1) << uint(g.class)
	for _, mi := range ps.maskList {
		if mi.mask&bit == 0 {
			continue
		}
		if isAll != wasAll {
			mi.all.add(g.node, g.domain, boolDelta(isAll))
		}
		if isUnres != wasUnres {
			mi.unres.add(g.node, g.domain, boolDelta(isUnres))
		}
	}
	ps.touchNode(g.node)
}

// touchNode bumps the version of every mask with a class on node ni.
func (ps *poolState) touchNode(ni int32) {
	ps.version++
	if !ps.indexed {
		return
	}
	for _, mi := range ps.maskList {
		if mi.mask&ps.nodeClasses[ni] != 0 {
			mi.version++
		}
	}
}

// boolDelta is +1 for true and −1 for false.
func boolDelta(b bool) int {
	if b {
		return 1
	}
	return -1
}

// insertPartial and removePartial keep a class's partial list sorted.
func (ps *poolState) insertPartial(c int32, e partialGPU) {
	l := ps.partial[c]
	i, _ := slices.BinarySearchFunc(l, e, comparePartial)
	ps.partial[c] = slices.Insert(l, i, e)
}

func (ps *poolState) removePartial(c int32, e partialGPU) {
	l := ps.partial[c]
	if i, ok := slices.BinarySearchFunc(l, e, comparePartial); ok {
		ps.partial[c] = slices.Delete(l, i, i+1)
	}
}

// lowerBound returns the first position of list with free ≥ m.
func lowerBound(list []partialGPU, m int32) int {
	i, _ := slices.BinarySearchFunc(list, partialGPU{m, -1}, comparePartial)
	return i
}
