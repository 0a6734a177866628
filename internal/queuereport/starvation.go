package queuereport

import (
	"math/bits"
	"slices"

	"github.com/gpugov/gpugov/internal/vocab"
)

// The starvation signals are counted in the passes the report already makes,
// so that the jobs and waits are walked once:
//
//   - startStarvation sizes the per-pool tables (after the jobs and runs are loaded);
//   - noteJob files a job's submit time and run starts (buildWaits, submit order);
//   - prepareStarvation indexes the arrivals and files the releases;
//   - noteWait counts the releases and arrivals during a wait and files its
//     overtaking queries (aggregateWaits, submit order);
//   - countOvertaking answers the queries pool by pool.

// startStarvation allocates the per-pool tables with their job-sized lists
// at the sizes they will reach, counted in one sequential pass, so that
// millions of appends do not regrow them.
func (c *computer) startStarvation() {
	np := len(c.pools.names)
	var byTier [4][]int
	for t := range byTier {
		byTier[t] = make([]int, np)
	}
	points := make([]int, np)
	for j := range c.jobs {
		jr := &c.jobs[j]
		byTier[jr.tier][jr.pool]++
		if jr.class >= 0 {
			points[jr.pool] += int(c.runOff[j+1] - c.runOff[j])
		}
	}
	c.sig = make([]poolSignals, np)
	for p := range c.sig {
		ps := &c.sig[p]
		ps.points = make([]otPoint, 0, points[p])
		higher := 0
		for t := 3; t > 0; t-- {
			higher += byTier[t][p]
			ps.above[t-1].times = make([]int64, 0, higher)
		}
	}
}

// noteJob files job j's submit time as an arrival for the lower tiers and its
// run starts in the window as possible overtakings. Jobs come in submit order.
func (c *computer) noteJob(j int32) {
	jr := &c.jobs[j]
	p := &c.sig[jr.pool]
	for t := 0; t < int(jr.tier); t++ {
		p.above[t].times = append(p.above[t].times, jr.submit)
	}
	if jr.class < 0 {
		return // requests no GPU: neither overtakes nor is overtaken
	}
	for _, r := range c.runOrder[c.runOff[j]:c.runOff[j+1]] {
		if s := c.runs[r].start; c.inWindow(s) {
			p.points = append(p.points, otPoint{submit: jr.submit, start: s, class: jr.class})
		}
	}
}

// prepareStarvation indexes the arrivals, files the releases and allocates
// the per-wait counts and the query lists.
func (c *computer) prepareStarvation() {
	n := len(c.waits)
	c.overtaken = make([]int32, n)
	c.releases = make([]int32, n)
	c.arrivals = make([]int32, n)
	queries := make([]int, len(c.sig))
	for j := range c.jobs {
		if wc := int(c.waitCount[j]); wc > 0 && c.jobs[j].class >= 0 {
			queries[c.jobs[j].pool] += 2 * wc // a requeue wait may need two queries
		}
	}
	for p := range c.sig {
		for t := range c.sig[p].above {
			c.sig[p].above[t].build()
		}
		c.sig[p].queries = make([]otQuery, 0, queries[p])
	}
	c.releasesByPool()
}

// noteWait counts the releases and higher-tier arrivals during wait i and
// files its overtaking queries. Waits come in submit order.
func (c *computer) noteWait(i int, w *waitRec, jr *jobRec) {
	if jr.class < 0 {
		return
	}
	lo, hi := c.signalSpan(w)
	if lo >= hi {
		return
	}
	p := &c.sig[jr.pool]
	wi := int32(i)
	p.queries = append(p.queries, otQuery{x: jr.submit, t: hi, wait: wi, sign: 1, class: jr.class})
	if w.requeue && lo > c.from {
		// Later-submitted jobs may have started between the window start and
		// this requeue wait; an initial wait has none (they start after their
		// submit, which is after this job's).
		p.queries = append(p.queries, otQuery{x: jr.submit, t: lo, wait: wi, sign: -1, class: jr.class})
	}
	rel := c.matchingReleases(p, jr.mset)
	if w.requeue {
		c.releases[i] = int32(rel.count(lo, hi))
		if vocab.Tier(jr.tier) < vocab.TierProduction {
			c.arrivals[i] = int32(p.above[jr.tier].count(lo, hi))
		}
		return
	}
	// An initial wait's lo is max(submit + 1, from), which never decreases from
	// one initial wait of the pool to the next: a cursor finds it in O(1).
	c.releases[i] = int32(rel.before(hi) - rel.advance(lo))
	if vocab.Tier(jr.tier) < vocab.TierProduction {
		a := &p.above[jr.tier]
		c.arrivals[i] = int32(a.before(hi) - a.advance(lo))
	}
}

// countOvertaking answers every pool's overtaking queries.
func (c *computer) countOvertaking() {
	fits := c.fitMatrix()
	var sc otScratch
	for p := range c.sig {
		sc.count(c.sig[p].points, c.sig[p].queries, fits, len(c.classMset), c.overtaken)
		c.sig[p] = poolSignals{} // let the pool's tables go
	}
}

// poolSignals holds one pool's tables for the starvation signals.
type poolSignals struct {
	points  []otPoint    // run starts in the window of GPU jobs, in submit order
	queries []otQuery    // overtaking queries of waits, in submit order
	above   [3]timeIndex // above[t]: submit times of jobs of a tier higher than t
	// relByMset[m]: times of releases whose model set has ID m; matching[m]:
	// times of releases that match a job accepting model set m, built on use.
	relByMset [][]int64
	matching  []*timeIndex
}

// fitMatrix returns fits[a*C+b]: a job of class a fits the GPUs a job of class
// b waits for (models of a ⊆ models of b, demand of a ≤ demand of b).
func (c *computer) fitMatrix() []bool {
	nc := len(c.classMset)
	fits := make([]bool, nc*nc)
	for a := 0; a < nc; a++ {
		for b := 0; b < nc; b++ {
			fits[a*nc+b] = c.classDemand[a] <= c.classDemand[b] && c.msets.subset(c.classMset[a], c.classMset[b])
		}
	}
	return fits
}

// releasesByPool files the releases in the window by pool and model set,
// each list sorted by time. Releases in pools without jobs cannot match any
// job and are dropped.
func (c *computer) releasesByPool() {
	pools := c.sig
	for i := range c.in.Releases {
		r := &c.in.Releases[i]
		at := r.At.UnixNano()
		if !c.inWindow(at) {
			continue
		}
		p, ok := c.pools.ids[r.Pool]
		if !ok {
			continue
		}
		m := c.msets.id(r.Models)
		ps := &pools[p]
		for len(ps.relByMset) <= int(m) {
			ps.relByMset = append(ps.relByMset, nil)
		}
		if ps.relByMset[m] == nil {
			// Releases mostly follow runs: size the list for one per run start.
			ps.relByMset[m] = make([]int64, 0, len(ps.points)+1)
		}
		ps.relByMset[m] = append(ps.relByMset[m], at)
	}
	var tmp []int64
	for p := range pools {
		for _, ts := range pools[p].relByMset {
			if len(ts) == 0 {
				continue
			}
			tmp = slices.Grow(tmp[:0], len(ts))[:len(ts)]
			if sorted := sortInt64s(ts, tmp); &sorted[0] != &ts[0] {
				copy(ts, sorted) // the sort ended in tmp, which is reused
			}
		}
	}
}

// matchingReleases returns the times of pool p's releases that match a job
// accepting model set m (see modelSets.intersects).
func (c *computer) matchingReleases(p *poolSignals, m int32) *timeIndex {
	if int(m) < len(p.matching) && p.matching[m] != nil {
		return p.matching[m]
	}
	var parts [][]int64
	for rm, ts := range p.relByMset {
		if len(ts) > 0 && c.msets.intersects(int32(rm), m) {
			parts = append(parts, ts)
		}
	}
	x := &timeIndex{}
	if len(parts) == 1 {
		x.times = parts[0] // already sorted; shared, never written
	} else {
		x.times = slices.Concat(parts...)
		slices.Sort(x.times)
	}
	x.build()
	for len(p.matching) <= int(m) {
		p.matching = append(p.matching, nil)
	}
	p.matching[m] = x
	return x
}

// signalSpan returns the part [lo, hi) of wait w in which starvation signals
// are counted: inside the window and strictly after the instant the wait began
// (when a job is requeued, its own GPUs are released and its preemptor starts
// at that instant; neither happened while it waited).
func (c *computer) signalSpan(w *waitRec) (lo, hi int64) {
	hi, _ = c.effEnd(w)
	return max(w.a+1, c.from), hi
}

// lowerBound returns the index of the first element ≥ t in sorted.
func lowerBound(sorted []int64, t int64) int {
	lo, hi := 0, len(sorted)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if sorted[m] < t {
			lo = m + 1
		} else {
			hi = m
		}
	}
	return lo
}

// timeIndex answers "how many of these sorted times are before t" with a
// bucket table in front of the binary search: bucket b covers
// [base + b·2^shift, base + (b+1)·2^shift) and first[b] is the index of its
// first time, so a lookup searches only its bucket (a few entries, one or two
// cache lines) instead of the whole array.
type timeIndex struct {
	times  []int64
	base   int64
	shift  uint
	first  []int32 // len = buckets + 1; the last entry is len(times)
	cursor int     // advance's position
}

// build makes the bucket table: about one bucket per four times.
func (x *timeIndex) build() {
	n := len(x.times)
	if n < 64 {
		return // a plain binary search is as quick
	}
	x.base = x.times[0]
	span := uint64(x.times[n-1]-x.base) + 1
	for x.shift = 0; span>>x.shift > uint64(n/4); x.shift++ {
	}
	buckets := int(span>>x.shift) + 1
	x.first = make([]int32, buckets+1)
	i := 0
	for b := 0; b <= buckets; b++ {
		bound := x.base + int64(b)<<x.shift
		for i < n && x.times[i] < bound {
			i++
		}
		x.first[b] = int32(i)
	}
}

// before returns how many times are < t.
func (x *timeIndex) before(t int64) int {
	if x.first == nil {
		return lowerBound(x.times, t)
	}
	if t <= x.base {
		return 0
	}
	b := uint64(t-x.base) >> x.shift
	if b >= uint64(len(x.first)-1) {
		return len(x.times)
	}
	lo, hi := int(x.first[b]), int(x.first[b+1])
	return lo + lowerBound(x.times[lo:hi], t)
}

// advance returns how many times are < t, like before, for a t that is never
// smaller than in the previous call: it moves a cursor forward instead of
// searching.
func (x *timeIndex) advance(t int64) int {
	for x.cursor < len(x.times) && x.times[x.cursor] < t {
		x.cursor++
	}
	return x.cursor
}

// count returns how many times fall in [lo, hi).
func (x *timeIndex) count(lo, hi int64) int { return x.before(hi) - x.before(lo) }

// otPoint is one run start in the window: a possible overtaking.
type otPoint struct {
	submit, start int64 // the starting job's submit time and the run's start
	class         int32
}

// otQuery asks for D(x, t): the number of points of classes that fit class,
// submitted after x and started before t. A wait's overtaken count is
// D(x, hi) − D(x, lo); the sign says which of the two terms it is.
type otQuery struct {
	x, t  int64
	wait  int32
	class int32
	sign  int8
}

// placedQuery is an otQuery placed among the pool's points, as a sweep reads it.
type placedQuery struct {
	pos   int32 // number of points (of any class) started before t
	bound int32 // index of the first point submitted after x
	wait  int32
	sign  int8
}

// startRef is a point's start time and index, for sorting points by start.
type startRef struct {
	start int64
	idx   int32
}

// otScratch holds the buffers of the overtaking count, reused across pools.
type otScratch struct {
	starts  []startRef // points by start time
	tmp     []startRef // radix sort scratch
	sorted  timeIndex  // their start times, ascending
	pos     []int32    // per point (submit order): its position by start time
	class   []int32    // per point (submit order): its class
	set     rankSet    // positions of the points inserted by a sweep
	byClass []placedQuery
}

// count adds to out[q.wait] q.sign × D(q.x, q.t) for every query. points are in
// ascending submit order, queries in ascending x.
//
// It is an offline dominance count (a plane sweep over submit times with a
// rank structure over start times), one sweep per query class: queries by
// decreasing x, inserting the fitting points submitted after x at their
// position by start time, and reading how many inserted points start before
// t. For P points and Q queries in a pool with C query classes, the cost is
// O((P + Q) log P) to sort and place, then O(C·P + F + Q·P/8192) for the
// sweeps, F being the sum over classes of the points that fit them; it does
// not depend on how long the waits are.
func (s *otScratch) count(points []otPoint, queries []otQuery, fits []bool, nc int, out []int32) {
	if len(points) == 0 || len(queries) == 0 {
		return
	}
	s.starts = slices.Grow(s.starts[:0], len(points))[:len(points)]
	s.tmp = slices.Grow(s.tmp[:0], len(points))[:len(points)]
	for i := range points {
		s.starts[i] = startRef{start: points[i].start, idx: int32(i)}
	}
	sorted := sortStartRefs(s.starts, s.tmp)
	s.sorted.times = slices.Grow(s.sorted.times[:0], len(points))[:len(points)]
	s.pos = slices.Grow(s.pos[:0], len(points))[:len(points)]
	s.class = slices.Grow(s.class[:0], len(points))[:len(points)]
	for i, r := range sorted {
		s.sorted.times[i] = r.start
		s.pos[r.idx] = int32(i)
	}
	for i := range points {
		s.class[i] = points[i].class
	}
	s.sorted.first = nil
	s.sorted.build()

	// Queries grouped by class, each group still in ascending x.
	s.byClass = slices.Grow(s.byClass[:0], len(queries))[:len(queries)]
	classOff := make([]int32, nc+1)
	for _, q := range queries {
		classOff[q.class+1]++
	}
	for k := 1; k <= nc; k++ {
		classOff[k] += classOff[k-1]
	}
	fill := slices.Clone(classOff[:nc])
	bound := 0
	for _, q := range queries {
		for bound < len(points) && points[bound].submit <= q.x {
			bound++ // queries are in ascending x, so bound only moves forward
		}
		s.byClass[fill[q.class]] = placedQuery{pos: int32(s.sorted.before(q.t)), bound: int32(bound), wait: q.wait, sign: q.sign}
		fill[q.class]++
	}
	s.set.reset(len(points))
	for qc := 0; qc < nc; qc++ {
		if qs := s.byClass[classOff[qc]:classOff[qc+1]]; len(qs) > 0 {
			s.sweep(qs, fits[qc:], nc, out)
		}
	}
}

// sweep answers the queries of one class; fitsCol[pc*nc] says whether points
// of class pc fit it. It reads only the compact class and position arrays.
func (s *otScratch) sweep(qs []placedQuery, fitsCol []bool, nc int, out []int32) {
	s.set.clear()
	pi := len(s.class)
	for k := len(qs) - 1; k >= 0; k-- {
		q := &qs[k]
		for pi > int(q.bound) {
			pi--
			// Whether a point fits is close to random, so a branch on it would
			// mispredict half the time; add 0 or 1 instead.
			s.set.addIf(int(s.pos[pi]), fitsCol[int(s.class[pi])*nc])
		}
		if n := s.set.before(int(q.pos)); n != 0 {
			out[q.wait] += int32(q.sign) * n
		}
	}
}

// rankSet is a set of positions 0..n-1, each added at most once, that counts
// the members below a position: a bitset with running counts per block of
// 512 positions and per superblock of 8192. Adding costs three writes (a
// Fenwick tree would take log n), and counting reads at most n/8192
// superblock counts, 15 block counts and 8 words, mostly contiguous. Sweeps
// insert many more points than they ask queries, which is what this trades for.
type rankSet struct {
	words  []uint64
	blocks []int32 // members per 512 positions
	supers []int32 // members per 8192 positions
}

const (
	blockShift = 9  // 512 positions = 8 words
	superShift = 13 // 8192 positions = 16 blocks
)

// reset sizes the set for positions 0..n-1 and empties it.
func (r *rankSet) reset(n int) {
	r.words = slices.Grow(r.words[:0], n>>6+1)[:n>>6+1]
	r.blocks = slices.Grow(r.blocks[:0], n>>blockShift+1)[:n>>blockShift+1]
	r.supers = slices.Grow(r.supers[:0], n>>superShift+1)[:n>>superShift+1]
	r.clear()
}

func (r *rankSet) clear() {
	clear(r.words)
	clear(r.blocks)
	clear(r.supers)
}

// addIf inserts position p, which must not be in the set, when ok; it does
// the same work either way, without a branch.
func (r *rankSet) addIf(p int, ok bool) {
	var one uint64
	if ok {
		one = 1 // compiled to a conditional move
	}
	r.words[p>>6] |= one << (p & 63)
	r.blocks[p>>blockShift] += int32(one)
	r.supers[p>>superShift] += int32(one)
}

// before returns how many members are below position p (0 ≤ p ≤ n).
func (r *rankSet) before(p int) int32 {
	var n int32
	sp := p >> superShift
	for _, c := range r.supers[:sp] {
		n += c
	}
	bp := p >> blockShift
	for _, c := range r.blocks[sp<<(superShift-blockShift) : bp] {
		n += c
	}
	wp := p >> 6
	for _, w := range r.words[bp<<(blockShift-6) : wp] {
		n += int32(bits.OnesCount64(w))
	}
	if rem := p & 63; rem != 0 {
		n += int32(bits.OnesCount64(r.words[wp] & (1<<rem - 1)))
	}
	return n
}
