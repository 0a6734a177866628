package scheduling

import (
	"slices"
	"strconv"
	"strings"

	"github.com/gpugov/gpugov/internal/vocab"
)

// MaxSuggestions is the most nearest-fit suggestions one wait carries.
const MaxSuggestions = 3

// Suggestion fields, as the job spec names them.
const (
	FieldGPUModels    = "gpu_models"
	FieldGPUMemoryMiB = "gpu_memory_mib"
	FieldGPUs         = "gpus"
	FieldTopology     = "topology"
	FieldNodeSelector = "node_selector"
)

// maxCountTries bounds how many smaller GPU counts one suggestion tries.
const maxCountTries = 16

// suggestionsFor returns the nearest requests that would fit the shape's
// pool, for a job waiting with reason no_matching_capacity (the target is
// the pool as if nothing were allocated) or fragmented (the target is the
// free capacity outside reservations now). It relaxes one field at a time,
// each to its nearest value that fits: gpu_models widened by one model of
// the pool, gpu_memory_mib lowered to the next GPU memory the pool has,
// gpus lowered to the largest count that fits, topology loosened one step
// (nvlink-domain → same-node → any), one node_selector pair dropped.
// Suggestions that fit now come first, then that order; at most
// MaxSuggestions. They are computed once per shape per cycle, at the
// shape's first waiting job (docs/design.md §1 "What would change it"). A
// probe uses the free-capacity index of its class set when one exists and
// the reference scans otherwise: probes add no index that the rest of the
// cycle would have to maintain.
func (ps *poolState) suggestionsFor(sh *shapeInfo, reason vocab.WaitReason) []Suggestion {
	if sh.suggested {
		return sh.suggest
	}
	sh.suggested = true
	if !validTopology(sh.topo) || sh.count < 0 {
		return nil
	}
	target := searchFree
	if reason == vocab.ReasonNoMatchingCapacity {
		target = searchEmpty
	}
	r := &sh.req
	var out []Suggestion
	add := func(field, value string, probe *shapeInfo) {
		s := Suggestion{Field: field, Value: value, Now: target == searchFree || ps.fits(probe, searchFree),
			Nodes: probe.selectorNodes}
		s.MatchingGPUs, s.FreeGPUs = ps.probeCounts(probe)
		s.Text = suggestionText(&s, r)
		out = append(out, s)
	}
	if r.GPUs > 0 && len(r.GPUModels) > 0 {
		if v, probe := ps.widenModels(r, target); probe != nil {
			add(FieldGPUModels, v, probe)
		}
	}
	if r.GPUs > 0 && r.GPUMemoryMiB > 0 {
		if v, probe := ps.lowerMemory(sh, target); probe != nil {
			add(FieldGPUMemoryMiB, v, probe)
		}
	}
	if sh.count > 1 {
		if v, probe := ps.fewerGPUs(sh, target); probe != nil {
			add(FieldGPUs, v, probe)
		}
	}
	if sh.count > 1 && sh.topo != TopologyAny {
		if v, probe := ps.looserTopology(sh, target); probe != nil {
			add(FieldTopology, v, probe)
		}
	}
	if len(r.NodeSelector) > 0 {
		if v, probe := ps.dropSelectorPair(r, target); probe != nil {
			add(FieldNodeSelector, v, probe)
		}
	}
	slices.SortStableFunc(out, func(a, b Suggestion) int { return boolRank(b.Now) - boolRank(a.Now) })
	if len(out) > MaxSuggestions {
		out = out[:MaxSuggestions]
	}
	sh.suggest = out
	return out
}

// boolRank is 1 for true and 0 for false.
func boolRank(b bool) int {
	if b {
		return 1
	}
	return 0
}

// probeShape is the shape of r in the pool, without texts and with the
// free-capacity index of its class set only when one exists already.
func (ps *poolState) probeShape(r *ResourceRequest) *shapeInfo {
	sh := &shapeInfo{req: *r, topo: normalTopology(r.Topology), count: r.GPUs, milli: int32(r.MilliPerDevice())}
	sh.selectorNodes = ps.schedulable
	if len(r.NodeSelector) > 0 {
		sh.labelOK = make([]bool, len(ps.labelSets))
		for li, ls := range ps.labelSets {
			sh.labelOK[li] = selectorMatches(r.NodeSelector, ls)
		}
		sh.selectorNodes = 0
		for ni := range ps.nodes {
			if n := &ps.nodes[ni]; n.schedulable && sh.labelOK[n.labels] {
				sh.selectorNodes++
			}
		}
	}
	sh.match = make([]bool, len(ps.classes))
	for ci, c := range ps.classes {
		sh.match[ci] = c.memoryMiB >= r.GPUMemoryMiB && (len(r.GPUModels) == 0 || slices.Contains(r.GPUModels, c.model)) &&
			(sh.labelOK == nil || sh.labelOK[c.labels])
	}
	sh.mi = ps.existingMask(sh.match)
	return sh
}

// existingMask returns the free-capacity index of the class set match when
// some shape of the cycle already made one, else nil (probes never add one).
func (ps *poolState) existingMask(match []bool) *maskIndex {
	if !ps.indexed || ps.slow {
		return nil
	}
	var m uint64
	for c, ok := range match {
		if ok {
			m |= 1 << uint(c)
		}
	}
	return ps.masks[m]
}

// fits reports whether a probe shape can be placed in mode: through the
// free-capacity index when its class set has one, else by the reference
// scans (the same rule either way).
func (ps *poolState) fits(sh *shapeInfo, mode searchMode) bool {
	if !validTopology(sh.topo) || sh.count < 0 || (sh.count > 0 && !slices.Contains(sh.match, true)) {
		return false
	}
	if mode == searchEmpty && sh.mi != nil {
		return ps.fitsEmpty(sh)
	}
	_, ok := ps.search(sh, mode)
	return ok
}

// probeCounts counts the usable GPUs a probe shape matches and those of them
// that could take one of its devices now, outside reservations.
func (ps *poolState) probeCounts(sh *shapeInfo) (matching, free int) {
	if sh.mi != nil {
		return sh.mi.static, ps.freeUnreserved(sh)
	}
	for gi := range ps.gpus {
		g := &ps.gpus[gi]
		if !g.usable || !sh.match[g.class] {
			continue
		}
		matching++
		if sh.candidate(g, searchFree) {
			free++
		}
	}
	return matching, free
}

// probeCapacity is a fitting probe with its counts (probeCounts).
type probeCapacity struct {
	sh             *shapeInfo
	matching, free int
}

// better reports whether probe a is a better suggestion than b (nil: none
// yet) in target: more GPUs free now (searchFree) or more matching GPUs
// (searchEmpty).
func better(a probeCapacity, b *probeCapacity, target searchMode) bool {
	if b == nil {
		return true
	}
	if target == searchFree {
		return a.free > b.free || (a.free == b.free && a.matching > b.matching)
	}
	return a.matching > b.matching || (a.matching == b.matching && a.free > b.free)
}

// widenModels tries the request with one more GPU model of the pool allowed,
// for each model it does not allow (by name), and returns the widened list of
// the one that fits with the most capacity.
func (ps *poolState) widenModels(r *ResourceRequest, target searchMode) (string, *shapeInfo) {
	var models []string
	for _, c := range ps.classes {
		if !slices.Contains(r.GPUModels, c.model) && !slices.Contains(models, c.model) {
			models = append(models, c.model)
		}
	}
	slices.Sort(models)
	var best *probeCapacity
	for _, m := range models {
		q := *r
		q.GPUModels = append(slices.Clone(r.GPUModels), m)
		probe := ps.probeShape(&q)
		if !ps.fits(probe, target) {
			continue
		}
		pc := probeCapacity{sh: probe}
		pc.matching, pc.free = ps.probeCounts(probe)
		if better(pc, best, target) {
			best = &pc
		}
	}
	if best == nil {
		return "", nil
	}
	return strings.Join(best.sh.req.GPUModels, ","), best.sh
}

// lowerMemory tries the request's memory minimum lowered to each smaller GPU
// memory of a model the request allows, largest first, and returns the first
// that fits.
func (ps *poolState) lowerMemory(sh *shapeInfo, target searchMode) (string, *shapeInfo) {
	r := &sh.req
	var mems []int64
	for _, c := range ps.classes {
		if c.memoryMiB < r.GPUMemoryMiB && (len(r.GPUModels) == 0 || slices.Contains(r.GPUModels, c.model)) &&
			!slices.Contains(mems, c.memoryMiB) {
			mems = append(mems, c.memoryMiB)
		}
	}
	slices.SortFunc(mems, func(a, b int64) int { return compareInt64(b, a) })
	for _, m := range mems {
		q := *r
		q.GPUMemoryMiB = m
		if probe := ps.probeShape(&q); ps.fits(probe, target) {
			return strconv.FormatInt(m, 10), probe
		}
	}
	return "", nil
}

// compareInt64 orders int64 ascending.
func compareInt64(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// fewerGPUs returns the largest GPU count below the request's that fits,
// starting from the largest group its topology allows in target.
func (ps *poolState) fewerGPUs(sh *shapeInfo, target searchMode) (string, *shapeInfo) {
	probe := ps.probeShape(&sh.req)
	upper := min(sh.count-1, ps.largestGroup(probe, target))
	for n, tries := upper, 0; n >= 1 && tries < maxCountTries; n, tries = n-1, tries+1 {
		probe.count, probe.req.GPUs = n, n
		if ps.fits(probe, target) {
			return strconv.Itoa(n), probe
		}
	}
	return "", nil
}

// looserTopology tries the request with its topology loosened one step at a
// time (nvlink-domain → same-node → any) and returns the first that fits.
func (ps *poolState) looserTopology(sh *shapeInfo, target searchMode) (string, *shapeInfo) {
	steps := []Topology{TopologyAny}
	if sh.topo == TopologyNVLinkDomain {
		steps = []Topology{TopologySameNode, TopologyAny}
	}
	for _, t := range steps {
		q := sh.req
		q.Topology = t
		if probe := ps.probeShape(&q); ps.fits(probe, target) {
			return string(t), probe
		}
	}
	return "", nil
}

// dropSelectorPair tries the request without each node selector pair (by
// key) and returns the remaining selector of the one that fits with the most
// capacity.
func (ps *poolState) dropSelectorPair(r *ResourceRequest, target searchMode) (string, *shapeInfo) {
	keys := make([]string, 0, len(r.NodeSelector))
	for k := range r.NodeSelector {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var best *probeCapacity
	for _, k := range keys {
		q := *r
		q.NodeSelector = make(map[string]string, len(r.NodeSelector)-1)
		for kk, v := range r.NodeSelector {
			if kk != k {
				q.NodeSelector[kk] = v
			}
		}
		probe := ps.probeShape(&q)
		if !ps.fits(probe, target) {
			continue
		}
		pc := probeCapacity{sh: probe}
		pc.matching, pc.free = ps.probeCounts(probe)
		if better(pc, best, target) {
			best = &pc
		}
	}
	if best == nil {
		return "", nil
	}
	return selectorText(best.sh.req.NodeSelector), best.sh
}

// suggestionText renders a suggestion: "fits now if gpu_models also allows
// A100-80GB: 24 matching GPUs, 6 free"; one that fits only the pool as if
// empty reads "fits when its GPUs are free ...".
func suggestionText(s *Suggestion, r *ResourceRequest) string {
	b := make([]byte, 0, 120)
	if s.Now {
		b = append(b, "fits now "...)
	} else {
		b = append(b, "fits when its GPUs are free "...)
	}
	switch s.Field {
	case FieldGPUModels:
		b = append(b, "if gpu_models also allows "...)
		b = append(b, s.Value[strings.LastIndexByte(s.Value, ',')+1:]...)
	case FieldGPUMemoryMiB:
		b = append(b, "with gpu_memory_mib ≤ "...)
		b = append(b, s.Value...)
	case FieldGPUs:
		b = append(b, "with gpus ≤ "...)
		b = append(b, s.Value...)
		b = append(b, unitPhrase(normalTopology(r.Topology), 2)...)
	case FieldTopology:
		b = append(b, "with topology "...)
		b = append(b, s.Value...)
	case FieldNodeSelector:
		b = append(b, "without node_selector "...)
		b = append(b, droppedPair(r.NodeSelector, s.Value)...)
	}
	b = append(b, ": "...)
	if s.Field == FieldNodeSelector || r.GPUs == 0 {
		b = appendQty(b, s.Nodes, " nodes")
		if r.GPUs == 0 {
			return string(b)
		}
		b = append(b, ", "...)
	}
	b = appendQty(b, s.MatchingGPUs, " matching GPUs, ")
	b = appendQty(b, s.FreeGPUs, " free")
	return string(b)
}

// droppedPair names the selector pair of sel that the remaining selector
// text rest lacks, "storage=local-nvme".
func droppedPair(sel map[string]string, rest string) string {
	kept := map[string]bool{}
	for _, kv := range strings.Split(rest, ",") {
		if k, _, ok := strings.Cut(kv, "="); ok {
			kept[k] = true
		}
	}
	keys := make([]string, 0, len(sel))
	for k := range sel {
		if !kept[k] {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	if len(keys) == 0 {
		return ""
	}
	return keys[0] + "=" + sel[keys[0]]
}
