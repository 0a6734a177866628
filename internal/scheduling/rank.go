package scheduling

import (
	"math"
	"slices"
	"strings"
	"time"
)

// rankKey is the compact sort key of one pending job: score descending, then
// submit time, then ID (sorting small keys rather than whole entries is cheaper).
type rankKey struct {
	score  float64
	submit int64 // Unix nanoseconds, clamped
	pos    int32 // index into Snapshot.Pending
	fair   float64
}

// unixNanoClamped is t in Unix nanoseconds, clamped to the int64 range
// (time.Time.UnixNano is undefined outside 1678..2262).
func unixNanoClamped(t time.Time) int64 {
	const limit = math.MaxInt64 / int64(time.Second)
	sec := t.Unix()
	switch {
	case sec <= -limit:
		return math.MinInt64
	case sec >= limit:
		return math.MaxInt64
	}
	return sec*int64(time.Second) + int64(t.Nanosecond())
}

// rank computes every pending job's effective priority and orders the jobs:
// higher score first, then earlier submit time, then smaller ID. cycle.order
// lists Snapshot.Pending indices by rank; cycle.prios and cycle.aging are in
// rank order. It reads only the pending jobs and the policy, so it may run
// beside the capacity work.
func (c *cycle) rank() {
	rules := newPriorityRules(c.p, c.s.Usage, c.now)
	pending := c.s.Pending
	keys := make([]rankKey, len(pending))
	lastProject, lastFair := "", 1.0
	for i := range pending {
		j := &pending[i]
		if i == 0 || j.Project != lastProject {
			lastProject, lastFair = j.Project, rules.fairOf(j.Project)
		}
		pr, _ := rules.priority(j, lastFair)
		keys[i] = rankKey{score: pr.Score, submit: unixNanoClamped(j.SubmitTime), pos: int32(i), fair: lastFair}
	}
	slices.SortFunc(keys, func(a, b rankKey) int {
		switch {
		case a.score > b.score:
			return -1
		case a.score < b.score:
			return 1
		case a.submit != b.submit:
			return cmpInt64(a.submit, b.submit)
		}
		return strings.Compare(pending[a.pos].ID, pending[b.pos].ID)
	})
	// Recompute the priorities in rank order rather than keeping a copy in
	// input order (less memory; the loads are independent, so they overlap),
	// and decide then reads them in sequence.
	c.order = make([]int32, len(keys))
	c.prios, c.aging = make([]Priority, len(keys)), make([]agingRule, len(keys))
	for r, k := range keys {
		c.order[r] = k.pos
		c.prios[r], c.aging[r] = rules.priority(&pending[k.pos], k.fair)
	}
}

// cmpInt64 orders int64 ascending.
func cmpInt64(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// overtake compares job me with job above under aging: the first instant at
// which aging lifts me above it (both keep aging, each up to its own bound;
// base and fair-share points stay as they are), or Never with the numbers
// when that cannot happen before me's credit reaches its bound.
func (c *cycle) overtake(me, above *jobEntry) *Overtake {
	mp, ap := &c.prios[me.rank-1], &c.prios[above.rank-1]
	mr, ar := c.aging[me.rank-1], c.aging[above.rank-1]
	ot := &Overtake{AheadJobID: above.id, GapPoints: math.Max(0, ap.Score-mp.Score),
		HeadroomPoints: math.Max(0, mr.capEff-mp.AgingCredit), AheadHeadroomPoints: math.Max(0, ar.capEff-ap.AgingCredit),
		BoundPoints: mr.capEff}
	if mp.AgingCredit >= mr.capEff {
		ot.Never = true
		return ot
	}
	secs, ok := overtakeAfter(mr, ar, mp.Score-mp.AgingCredit, ap.Score-ap.AgingCredit, ranksAtTie(mp, ap, me.id, above.id))
	if !ok {
		ot.Never = true
		return ot
	}
	ot.At = c.now.Add(time.Duration(secs * float64(time.Second)))
	return ot
}

// overtakeAfter returns in how many seconds a job with aging rule mine and
// base points myBase (tier + fair share) first ranks above one with rule
// theirs and base theirBase (tieWin: it wins at equal scores), trying only
// its own step boundaries up to the one where its credit reaches its bound
// (credits change in its favour only there).
//
// Both jobs gain one step per interval, so with k counting my boundaries the
// score difference f(k) is constant while neither credit is capped, grows
// once theirs is capped, and is never below its trend at my last boundary.
// Hence: either the first boundary wins, or the answer is the first win in
// [the boundary where their credit caps, my last boundary], found by binary
// search, instead of walking every step.
func overtakeAfter(mine, theirs agingRule, myBase, theirBase float64, tieWin bool) (float64, bool) {
	if mine.interval <= 0 || mine.step <= 0 || mine.capEff <= 0 {
		return 0, false
	}
	n1 := math.Floor(mine.waitS / mine.interval)
	at := func(k float64) float64 { return (n1+k)*mine.interval - mine.waitS } // seconds to my k-th boundary
	win := func(k float64) bool {
		t := at(k)
		me, them := myBase+mine.credit(mine.waitS+t), theirBase+theirs.credit(theirs.waitS+t)
		return me > them || (me == them && tieWin)
	}
	last := math.Max(1, math.Ceil(mine.capEff/mine.step)-n1) // my credit is bounded from here on
	if win(1) {
		return at(1), true
	}
	if last <= 1 || !win(last) {
		return 0, false
	}
	lo := 2.0
	if theirs.interval > 0 && theirs.step > 0 && theirs.capEff > 0 {
		d := math.Floor((theirs.waitS - mine.waitS) / mine.interval)
		lo = math.Max(lo, math.Ceil(theirs.capEff/theirs.step)-n1-d)
	}
	hi := last // win(hi) holds
	for lo < hi {
		mid := math.Floor((lo + hi) / 2)
		if win(mid) {
			hi = mid
		} else {
			lo = mid + 1
		}
	}
	return at(hi), true
}

// ranksAtTie reports whether job a is served before job b at equal scores.
func ranksAtTie(a, b *Priority, aID, bID string) bool {
	if !a.SubmitTime.Equal(b.SubmitTime) {
		return a.SubmitTime.Before(b.SubmitTime)
	}
	return aID < bID
}
