package scheduling

import (
	"slices"

	"github.com/gpugov/gpugov/internal/vocab"
)

// candKey names a cached pool-wide candidate list: the preemptor's tier and
// whether it is a lender.
type candKey struct {
	tier   vocab.Tier
	lender bool
}

// failKey names a pool-wide search that failed: class set, share size, tier
// and lender flag.
type failKey struct {
	mi     *maskIndex
	milli  int32
	tier   vocab.Tier
	lender bool
}

// poolCands is the cached candidate order of pool-wide searches: by primary
// loss per GPU held (the greedy order) and by cost (for the best single
// victim).
type poolCands struct {
	byRatio, byCost []candVictim
}

// cachedPoolCands returns the pool's eligible victims for the search's tier
// and lender flag in both orders. The pool's gate-passing victims are sorted
// once per cycle (basePoolCands); a tier's list is a filter of that order, and
// a lender's puts its candidates holding lent quota (primary loss 0) first
// and sorts the others by their own primary, which is the order sorting
// with primary losses would give. Gains here count every
// GPU a victim holds; refresh counts the useful ones.
func (s *preemptSearch) cachedPoolCands(pool []int32) *poolCands {
	if s.ps.poolCands == nil {
		s.ps.poolCands = make(map[candKey]*poolCands)
	}
	key := candKey{tier: s.tier, lender: s.lender}
	if pc, ok := s.ps.poolCands[key]; ok {
		return pc
	}
	base := s.basePoolCands(pool)
	pc := &poolCands{byRatio: s.filterCands(base.byRatio, false), byCost: s.filterCands(base.byCost, true)}
	s.ps.poolCands[key] = pc
	return pc
}

// basePoolCands returns every victim of the pool that passed the gate (a
// victim holding lent quota: its standing gate), by
// loss per GPU held (then job ID) and by loss (then job ID), sorted once.
func (s *preemptSearch) basePoolCands(pool []int32) *poolCands {
	if pc := s.ps.poolCandsBase; pc != nil {
		return pc
	}
	var list []candVictim
	for _, vi := range pool {
		if v := &s.vx.all[vi]; (v.gate == "" || v.reclaimable && v.standing == "") && len(v.gpus) > 0 {
			cv := candVictim{vi: vi, gain: int32(len(v.gpus)), loss: v.loss, risky: v.loss}
			if v.lowRisk {
				cv.risky = 0
			}
			cv.primary = cv.risky // a non-lender's primary (victimCost); filterCands adjusts a lender's
			list = append(list, cv)
		}
	}
	s.vx.sortByRatio(list)
	pc := &poolCands{byRatio: list, byCost: slices.Clone(list)}
	slices.SortStableFunc(pc.byCost, func(a, b candVictim) int { return s.vx.compareCost(&a, &b) })
	s.ps.poolCandsBase = pc
	return pc
}

// filterCands keeps the candidates of base that are eligible for this search,
// in base order (by ratio, or byCost: by single cost). A lender's
// reclaimable ones come first with primary loss 0, then its others with
// their loss as primary, sorted again in the same order, which is what
// sorting the lender's candidates would give.
func (s *preemptSearch) filterCands(base []candVictim, byCost bool) []candVictim {
	var first, rest []candVictim
	for _, cv := range base {
		v := &s.vx.all[cv.vi]
		if !s.eligible(v) {
			continue
		}
		if s.lender && v.reclaimable {
			cv.primary = 0
			first = append(first, cv)
			continue
		}
		if s.lender {
			cv.primary = cv.loss
		}
		rest = append(rest, cv)
	}
	if s.lender {
		if byCost {
			slices.SortStableFunc(rest, func(a, b candVictim) int { return s.vx.compareCost(&a, &b) })
		} else {
			s.vx.sortByRatio(rest)
		}
	}
	return append(first, rest...)
}

// refresh re-checks a cached candidate against the present state: it must
// still be eligible and hold GPUs of the target that could become usable.
func (s *preemptSearch) refresh(t *preemptTarget, cv *candVictim) bool {
	v := &s.vx.all[cv.vi]
	if !s.eligible(v) {
		return false
	}
	cv.gain = 0
	for _, gi := range v.gpus {
		if s.relevant(t, gi) {
			cv.gain++
		}
	}
	return cv.gain > 0
}

// searchPoolWide is the victim search of a multi-GPU "any" request: the whole
// pool is one target. Walking the cached orders (victims and free GPUs only
// disappear during a cycle, so a cached list misses nothing; it is only
// re-checked) makes a search cost the prefix it uses, not the pool's running
// jobs: greedy in loss-per-GPU order until enough is freed, drop victims the
// set does not need (costliest first), then try single victims cheaper than
// the set, in cost order.
func (s *preemptSearch) searchPoolWide(t *preemptTarget, pool []int32) {
	pc := s.cachedPoolCands(pool)
	fk := failKey{mi: s.sh.mi, milli: s.sh.milli, tier: s.tier, lender: s.lender}
	if failedAt := s.ps.poolFailed[fk]; s.sh.mi != nil && failedAt > 0 && s.sh.count >= failedAt {
		return
	}
	if len(pc.byRatio) <= exactLimit {
		cands := s.cands[:0]
		for _, cv := range pc.byRatio {
			if s.refresh(t, &cv) {
				cands = append(cands, cv)
			}
		}
		s.cands = cands
		s.searchAmong(t, cands)
		return
	}
	var set []candVictim
	for _, cv := range pc.byRatio {
		if !s.refresh(t, &cv) {
			continue
		}
		s.add(t, cv.vi)
		set = append(set, cv)
		if s.feasible(t) {
			break
		}
	}
	if !s.feasible(t) {
		for _, cv := range set {
			s.remove(t, cv.vi)
		}
		if failedAt := s.ps.poolFailed[fk]; s.sh.mi != nil && (failedAt == 0 || s.sh.count < failedAt) {
			if s.ps.poolFailed == nil {
				s.ps.poolFailed = make(map[failKey]int)
			}
			s.ps.poolFailed[fk] = s.sh.count
		}
		return
	}
	ids, cost := s.prune(t, set)
	need := int32(s.sh.count - t.freeBefore)
	for _, cv := range pc.byCost {
		one := victimCost{}.plus(&cv)
		if !one.less(cost) {
			break
		}
		if cv.gain < need || !s.refresh(t, &cv) { // gain here counts all its GPUs: an upper bound
			continue
		}
		s.add(t, cv.vi)
		if s.feasible(t) {
			ids, cost = []int32{cv.vi}, one
		}
		s.remove(t, cv.vi)
	}
	t.victims, t.cost = ids, cost
	s.best = t
}
