package scheduling

import (
	"fmt"
	"strings"
)

// PlacementRule names the rule by which search chooses among the placements
// that fit a request (docs/design.md §4 "Placement rules"). Every rule
// places only where the request fits (GPU model, memory, shares, topology,
// host CPU and memory); they differ in which fitting node and GPU they take.
type PlacementRule string

// The placement rules.
const (
	// PlacementBestFit is the core's original rule (search's comment): the
	// NVLink domain or node with the fewest spare candidates, shares on the
	// partly used GPU with the least milli free. The empty rule means it.
	PlacementBestFit PlacementRule = "bestfit"
	// PlacementFGD is Fragmentation Gradient Descent (Weng et al., "Beware of
	// Fragmentation", USENIX ATC '23, §4): the placement whose node's
	// expected fragmentation w.r.t. the target workload grows least; ties to
	// the lower node (then GPU) index.
	PlacementFGD PlacementRule = "fgd"
	// PlacementFragmentation is gpugov's packing rule: FGD's fragmentation
	// delta plus a charge for GPUs stranded by the node's CPU and memory,
	// ties to the node left with the least free GPU milli, then the least
	// free CPU (see fragmentationBetter for why).
	PlacementFragmentation PlacementRule = "fragmentation"
)

// PlacementRules lists the rules in documentation order.
var PlacementRules = []PlacementRule{PlacementBestFit, PlacementFGD, PlacementFragmentation}

// ParsePlacementRule returns the rule named s ("" is PlacementBestFit), or
// an error listing the rules.
func ParsePlacementRule(s string) (PlacementRule, error) {
	if s == "" {
		return PlacementBestFit, nil
	}
	for _, r := range PlacementRules {
		if string(r) == s {
			return r, nil
		}
	}
	names := make([]string, len(PlacementRules))
	for i, r := range PlacementRules {
		names[i] = string(r)
	}
	return "", fmt.Errorf("unknown placement rule %q, want %s", s, strings.Join(names, ", "))
}

// scored reports whether r chooses by fragmentation score (not best fit).
func (r PlacementRule) scored() bool { return r == PlacementFGD || r == PlacementFragmentation }

// WorkloadShape is one request shape of a target workload and its weight:
// how many requests of the workload have it (a count, so sums stay exact).
type WorkloadShape struct {
	Request ResourceRequest
	Weight  int64
}

// packType is one workload shape resolved in a pool.
type packType struct {
	sh       *shapeInfo
	w        int64
	cpu, mem int64
	count    int
	milli    int32
}

// packState is a pool's fragmentation bookkeeping under a scored rule: the
// target workload, each node's current expected fragmentation (cached until
// the node changes) and per shape each node's last best option.
type packState struct {
	rule   PlacementRule
	types  []packType
	totalW int64
	// ver counts changes per node (placements, via apply); fragAt/frag
	// cache each node's fragmentation at a version.
	ver    []uint32
	fragAt []uint32
	frag   []int64
	opts   map[*shapeInfo][]nodeOption
	// scratch for hypothetical states
	used []int32
	// cpuPerGPU and memPerGPU are the workload's CPU milli and memory MiB per
	// milli-GPU over its GPU requests (strandedOf).
	cpuPerGPU, memPerGPU float64
	// Per node: the types that can run on it at all (nodeTypes), the
	// weight of those that never can (constW: they count all free milli),
	// whether its GPUs are of one class (homog), and scratch (sorted).
	nodeTypes [][]int32
	constW    []int64
	homog     []bool
	sorted    []int32
}

// nodeOption is a shape's best placement on one node at a node version.
type nodeOption struct {
	ver    uint32 // 1 + the node version it was computed at; 0 = never
	ok     bool
	gpu    int32 // the GPU a share takes; −1 otherwise
	delta  int64 // fragmentation after − before (weighted milli)
	strand int64 // stranded GPU milli after − before (strandedOf)
	left   int64 // free GPU milli left on the node after
	cpu    int64 // free CPU milli left on the node after (MaxInt64 when untracked)
}

// initPacking sets the pool's rule and target workload (shapes with weights;
// a shape with a non-positive weight is left out).
func (ps *poolState) initPacking(rule PlacementRule, workload []WorkloadShape, shape func(*ResourceRequest) *shapeInfo) {
	if !rule.scored() {
		ps.pack = nil
		return
	}
	pk := &packState{rule: rule, ver: make([]uint32, len(ps.nodes)), fragAt: make([]uint32, len(ps.nodes)),
		frag: make([]int64, len(ps.nodes)), opts: make(map[*shapeInfo][]nodeOption), used: make([]int32, 0, ps.maxNode)}
	byShape := map[*shapeInfo]int{}
	for i := range workload {
		w := &workload[i]
		if w.Weight <= 0 {
			continue
		}
		sh := shape(&w.Request)
		if k, ok := byShape[sh]; ok {
			pk.types[k].w += w.Weight
		} else {
			byShape[sh] = len(pk.types)
			pk.types = append(pk.types, packType{sh: sh, w: w.Weight, cpu: sh.req.CPUMilli, mem: sh.req.MemoryMiB,
				count: sh.count, milli: sh.milli})
		}
		pk.totalW += w.Weight
	}
	var cpu, mem, gpu float64
	for _, t := range pk.types {
		if t.count > 0 {
			cpu += float64(t.w * t.cpu)
			mem += float64(t.w * t.mem)
			gpu += float64(t.w * int64(t.count) * int64(t.milli))
		}
	}
	if gpu > 0 {
		pk.cpuPerGPU, pk.memPerGPU = cpu/gpu, mem/gpu
	}
	pk.nodeTypes = make([][]int32, len(ps.nodes))
	pk.constW = make([]int64, len(ps.nodes))
	pk.homog = make([]bool, len(ps.nodes))
	for ni := range ps.nodes {
		n := &ps.nodes[ni]
		pk.homog[ni] = true
		for gi := n.first; gi < n.end; gi++ {
			if ps.gpus[gi].class != ps.gpus[n.first].class {
				pk.homog[ni] = false
			}
		}
		for ti := range pk.types {
			t := &pk.types[ti]
			can := n.schedulable && (t.sh.labelOK == nil || t.sh.labelOK[n.labels]) &&
				(n.cpuCap == 0 || t.cpu <= n.cpuCap) && (n.memCap == 0 || t.mem <= n.memCap)
			if can && t.count > 0 {
				can = false
				for gi := n.first; gi < n.end && !can; gi++ {
					can = t.sh.match[ps.gpus[gi].class]
				}
			}
			if can {
				pk.nodeTypes[ni] = append(pk.nodeTypes[ni], int32(ti))
			} else {
				pk.constW[ni] += t.w
			}
		}
	}
	pk.sorted = make([]int32, 0, ps.maxNode)
	ps.pack = pk
}

// packTouched records that node ni changed (apply's hook).
func (ps *poolState) packTouched(ni int32) {
	if ps.pack != nil {
		ps.pack.ver[ni]++
	}
}

// nodeFrag is the expected fragmentation of node ni now, in weighted
// milli-GPU (divide by the workload's total weight for milli-GPU).
func (ps *poolState) nodeFrag(ni int32) int64 {
	pk := ps.pack
	if pk.fragAt[ni] != pk.ver[ni]+1 {
		n := &ps.nodes[ni]
		pk.used = pk.used[:0]
		for gi := n.first; gi < n.end; gi++ {
			pk.used = append(pk.used, ps.gpus[gi].used)
		}
		pk.frag[ni], pk.fragAt[ni] = ps.fragOf(ni, n.cpuUsed, n.memUsed, pk.used), pk.ver[ni]+1
	}
	return pk.frag[ni]
}

// fragOf is the expected fragmentation of node ni in a hypothetical state
// (CPU and memory used, each GPU's used milli in node order), in weighted
// milli-GPU: Σ_m w_m·F_n(m) over the workload's shapes m, where (ATC '23
// FGD, §4.1) F_n(m) is all of the node's free GPU milli when m cannot run on
// the node (its CPU, memory, node selector, GPU model or free GPUs do not
// allow it), else the free milli of the GPUs m cannot use: those of another
// model and those with less free than m needs per GPU (min(its share, one
// GPU)). A request for no GPUs that fits leaves no fragment. Unusable GPUs
// have no free capacity.
func (ps *poolState) fragOf(ni int32, cpuUsed, memUsed int64, used []int32) int64 {
	n, pk := &ps.nodes[ni], ps.pack
	var total int64
	for i, u := range used {
		if ps.gpus[n.first+int32(i)].usable {
			total += int64(MilliPerGPU - u)
		}
	}
	if total == 0 {
		return 0
	}
	sum := pk.constW[ni] * total
	if pk.homog[ni] {
		// One class, which every listed type matches: free milli sorted
		// high to low answers each type in a few steps.
		fs := pk.sorted[:0]
		for i, u := range used {
			if ps.gpus[n.first+int32(i)].usable {
				fs = append(fs, MilliPerGPU-u)
			}
		}
		for i := 1; i < len(fs); i++ {
			for j := i; j > 0 && fs[j] > fs[j-1]; j-- {
				fs[j], fs[j-1] = fs[j-1], fs[j]
			}
		}
		for _, ti := range pk.nodeTypes[ni] {
			t := &pk.types[ti]
			if (n.cpuCap > 0 && t.cpu > n.cpuCap-cpuUsed) || (n.memCap > 0 && t.mem > n.memCap-memUsed) {
				sum += t.w * total
				continue
			}
			if t.count == 0 {
				continue
			}
			fits, usable := 0, int64(0)
			for _, f := range fs {
				if f < t.milli {
					break
				}
				fits++
				usable += int64(f)
			}
			if fits < t.count {
				sum += t.w * total
			} else {
				sum += t.w * (total - usable)
			}
		}
		return sum
	}
	for _, ti := range pk.nodeTypes[ni] {
		t := &pk.types[ti]
		if (n.cpuCap > 0 && t.cpu > n.cpuCap-cpuUsed) || (n.memCap > 0 && t.mem > n.memCap-memUsed) {
			sum += t.w * total
			continue
		}
		if t.count == 0 {
			continue
		}
		fits, frag := 0, int64(0)
		for i, u := range used {
			g := &ps.gpus[n.first+int32(i)]
			if !g.usable {
				continue
			}
			free := int32(MilliPerGPU) - u
			if t.sh.match[g.class] && free >= t.milli {
				fits++
			} else {
				frag += int64(free)
			}
		}
		if fits < t.count {
			frag = total
		}
		sum += t.w * frag
	}
	return sum
}

// strandedOf is the free GPU milli of node ni that its free CPU or memory
// cannot serve at the workload's CPU and memory per milli-GPU: max(0, free
// GPU milli − free CPU ÷ cpuPerGPU, free GPU milli − free memory ÷
// memPerGPU), a measure of the GPUs a node's host resources strand.
func (ps *poolState) strandedOf(ni int32, cpuUsed, memUsed, freeGPU int64) int64 {
	n, pk := &ps.nodes[ni], ps.pack
	var s float64
	if n.cpuCap > 0 && pk.cpuPerGPU > 0 {
		s = max(s, float64(freeGPU)-float64(n.cpuCap-cpuUsed)/pk.cpuPerGPU)
	}
	if n.memCap > 0 && pk.memPerGPU > 0 {
		s = max(s, float64(freeGPU)-float64(n.memCap-memUsed)/pk.memPerGPU)
	}
	return int64(s)
}

// findScored is search under a scored rule for requests that take one node
// (no GPUs, one GPU or a share, or several GPUs on one node). handled is
// false for the other shapes (several GPUs that may span nodes or must share
// one NVLink domain), which keep the best-fit search, and for searchEmpty.
func (ps *poolState) findScored(sh *shapeInfo, mode searchMode) (c choice, ok, handled bool) {
	if mode == searchEmpty || (sh.count > 1 && sh.topo != TopologySameNode) || sh.milli < MilliPerGPU && sh.count > 1 {
		return choice{}, false, false
	}
	pk := ps.pack
	cache := mode == searchFree && len(ps.reservations) == 0
	var opts []nodeOption
	if cache {
		if opts = pk.opts[sh]; opts == nil {
			opts = make([]nodeOption, len(ps.nodes))
			pk.opts[sh] = opts
		}
	}
	best := int32(-1)
	var bestOpt nodeOption
	for ni := range ps.nodes {
		var o nodeOption
		if cache && opts[ni].ver == pk.ver[ni]+1 {
			o = opts[ni]
		} else {
			o = ps.scoreNode(sh, mode, int32(ni))
			o.ver = pk.ver[ni] + 1
			if cache {
				opts[ni] = o
			}
		}
		if o.ok && (best < 0 || ps.better(&o, &bestOpt)) {
			best, bestOpt = int32(ni), o
		}
	}
	if best < 0 {
		return choice{}, false, true
	}
	if sh.count == 0 {
		return choice{node: best}, true, true
	}
	if bestOpt.gpu >= 0 {
		return choice{node: best, gpus: append(ps.pick[:0], bestOpt.gpu)}, true, true
	}
	return choice{node: best, gpus: ps.takeOnNode(sh, mode, ps.pick[:0], best, sh.count)}, true, true
}

// better reports whether option a beats b under the pool's rule (b is from a
// lower node index, so FGD's ties stay with b).
func (ps *poolState) better(a, b *nodeOption) bool {
	if ps.pack.rule == PlacementFGD {
		return a.delta < b.delta
	}
	return fragmentationBetter(a, b, ps.pack.totalW)
}

// strandWeight is how many milli-GPU of expected fragmentation one
// stranded milli-GPU (strandedOf) weighs under PlacementFragmentation. Chosen
// by measurement (docs/design.md §4 "Placement rules": on the Alibaba
// default list at 1.3×, seed 42, weights 1 to 10 give 95.80–95.87 %
// allocated, 0 gives 94.97 %; 3 is kept).
const strandWeight = 3

// fragmentationBetter is gpugov's comparison (PlacementFragmentation): the
// smaller score, FGD's fragmentation delta plus strandWeight × the change in
// GPU milli the node's free CPU or memory strands; on equal scores the node
// left with less free GPU milli (best fit: fill nodes in use before breaking
// into empty ones, which keeps whole nodes for multi-GPU requests), then
// less free CPU. Scores are in weighted milli-GPU (totalW × milli), so they
// compare exactly.
//
// Why: FGD counts a node's GPUs as fragmented for a request only once the
// node can no longer host it, so it sees CPU and memory only at that cliff.
// On the Alibaba cluster CPU binds first on many nodes (an 8-GPU G2 node has
// 12 cores per GPU, the GPU pods ask 9.4 cores on average and CPU-only pods
// 17.6), and a placement that spends a node's CPU faster than its GPUs
// strands the GPUs for every later request. The stranding term charges that
// before the cliff, steering CPU-heavy pods to CPU-rich nodes.
func fragmentationBetter(a, b *nodeOption, totalW int64) bool {
	sa, sb := a.delta+strandWeight*a.strand*totalW, b.delta+strandWeight*b.strand*totalW
	if sa != sb {
		return sa < sb
	}
	if a.left != b.left {
		return a.left < b.left
	}
	return a.cpu < b.cpu
}

// scoreNode is shape sh's best option on node ni in mode.
func (ps *poolState) scoreNode(sh *shapeInfo, mode searchMode, ni int32) nodeOption {
	n := &ps.nodes[ni]
	o := nodeOption{gpu: -1}
	if !sh.hostOK(n, mode) {
		return o
	}
	pk := ps.pack
	before := ps.nodeFrag(ni)
	cpu, mem := n.cpuUsed+sh.req.CPUMilli, n.memUsed+sh.req.MemoryMiB
	var free int64
	pk.used = pk.used[:0]
	for gi := n.first; gi < n.end; gi++ {
		g := &ps.gpus[gi]
		pk.used = append(pk.used, g.used)
		if g.usable {
			free += int64(g.free())
		}
	}
	cpuLeft := int64(1<<63 - 1)
	if n.cpuCap > 0 {
		cpuLeft = n.cpuCap - cpu
	}
	strandBefore := ps.strandedOf(ni, n.cpuUsed, n.memUsed, free)
	option := func(gpu int32, took int64) nodeOption {
		left := free - took
		return nodeOption{ok: true, gpu: gpu, delta: ps.fragOf(ni, cpu, mem, pk.used) - before,
			strand: ps.strandedOf(ni, cpu, mem, left) - strandBefore, left: left, cpu: cpuLeft}
	}
	switch {
	case sh.count == 0:
		return option(-1, 0)
	case sh.count == 1 && sh.milli < MilliPerGPU:
		for gi := n.first; gi < n.end; gi++ {
			g := &ps.gpus[gi]
			if !sh.candidate(g, mode) || ps.sameAsEarlier(sh, mode, n.first, gi) {
				continue
			}
			i := gi - n.first
			pk.used[i] += sh.milli
			cand := option(gi, int64(sh.milli))
			pk.used[i] -= sh.milli
			if !o.ok || ps.better(&cand, &o) {
				o = cand
			}
		}
		return o
	}
	if ps.countIn(sh, mode, n.first, n.end) < sh.count {
		return o
	}
	for _, gi := range ps.takeOnNode(sh, mode, ps.pick[:0], ni, sh.count) {
		pk.used[gi-n.first] += sh.milli
	}
	return option(-1, int64(sh.count)*int64(sh.milli))
}

// sameAsEarlier reports whether an earlier candidate GPU of the node has the
// same class and used milli as gi (the same outcome, so it is not scored
// again).
func (ps *poolState) sameAsEarlier(sh *shapeInfo, mode searchMode, first, gi int32) bool {
	g := &ps.gpus[gi]
	for j := first; j < gi; j++ {
		h := &ps.gpus[j]
		if h.class == g.class && h.used == g.used && h.domain == g.domain && sh.candidate(h, mode) {
			return true
		}
	}
	return false
}

// initPacking gives every pool the policy's placement rule; a scored rule
// takes the cycle's pending requests of the pool, one weight each, as its
// target workload.
func (c *cycle) initPacking() {
	if !c.p.Placement.scored() {
		return
	}
	for _, ps := range c.cap.sorted {
		var wl []WorkloadShape
		for i := range c.s.Pending {
			if r := &c.s.Pending[i].Request; r.Pool == ps.name {
				wl = append(wl, WorkloadShape{Request: *r, Weight: 1})
			}
		}
		ps.initPacking(c.p.Placement, wl, func(r *ResourceRequest) *shapeInfo { return c.shape(ps, r) })
	}
}
