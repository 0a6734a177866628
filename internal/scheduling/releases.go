package scheduling

import (
	"cmp"
	"slices"
	"strings"
	"time"
)

// MaxReleases is the most expected releases one wait carries.
const MaxReleases = 5

// runEnd is a running job of a pool with a declared run time: its index in
// Snapshot.Running, its expected end (Unix ns) and, in the pool's
// endShares[first:last], the GPUs it holds there.
type runEnd struct {
	end         int64
	run         int32
	first, last int32
	total       int64  // milli-GPU of the whole allocation
	project     string // the running job's project
}

// endShare is one GPU share of a runEnd: the GPU's pool index and milli-GPU.
type endShare struct{ gpu, milli int32 }

// expectedEnd is when a running job should end by its declared run time:
// the current run's start plus RunSeconds (ok false when unknown). For a job
// resumed from a checkpoint it is late rather than early.
func expectedEnd(rj *RunningJob) (time.Time, bool) {
	if rj.RunSeconds <= 0 {
		return time.Time{}, false
	}
	return rj.StartedAt.Add(time.Duration(rj.RunSeconds) * time.Second), true
}

// buildEnds indexes, once per cycle and only when a wait needs it, the
// running jobs with a declared run time by pool, earliest end first (then
// job ID).
func (c *cycle) buildEnds() {
	if c.endsBuilt {
		return
	}
	c.endsBuilt = true
	var last *poolState
	byID := true // Snapshot.Running in job ID order (the store's): index order is ID order
	for i := range c.s.Running {
		rj := &c.s.Running[i]
		if i > 0 && byID && c.s.Running[i-1].ID > rj.ID {
			byID = false
		}
		end, ok := expectedEnd(rj)
		if !ok {
			continue
		}
		a := &rj.Allocation
		if name := allocationPool(a, c.cap); last == nil || last.name != name {
			last = c.cap.pools[name]
		}
		ps := last
		if ps == nil {
			continue
		}
		if ps.ends == nil {
			ps.ends = make([]runEnd, 0, len(c.s.Running))
			ps.endShares = make([]endShare, 0, len(c.s.Running))
		}
		e := runEnd{end: end.UnixNano(), run: int32(i), total: allocationMilli(a), first: int32(len(ps.endShares)),
			project: rj.Project}
		for _, sh := range a.GPUs {
			if ref, ok := c.cap.locate(a.Pool, a.Node, sh.UUID); ok && ref.pool == ps {
				ps.endShares = append(ps.endShares, endShare{ref.idx, int32(max(sh.Milli, 0))})
			}
		}
		e.last = int32(len(ps.endShares))
		ps.ends = append(ps.ends, e)
	}
	for _, ps := range c.cap.sorted {
		if !byID || !sortEndsPacked(ps.ends) {
			slices.SortFunc(ps.ends, func(a, b runEnd) int {
				if a.end != b.end {
					return cmp.Compare(a.end, b.end)
				}
				return strings.Compare(c.s.Running[a.run].ID, c.s.Running[b.run].ID)
			})
		}
	}
}

// sortEndsPacked sorts ends by expected end, then running-job index, through
// one packed integer key each (microseconds since the earliest end << 24 |
// position), which is exact when every end is a whole microsecond (times
// from PostgreSQL and the simulator are) and the span and count fit; it
// returns false, sorting nothing, otherwise. With Snapshot.Running in job ID
// order, index order is ID order.
func sortEndsPacked(ends []runEnd) bool {
	const idxBits = 24
	if len(ends) < 2 {
		return true
	}
	if len(ends) >= 1<<idxBits {
		return false
	}
	lo := ends[0].end
	for i := range ends {
		lo = min(lo, ends[i].end)
	}
	keys := make([]uint64, len(ends))
	for i := range ends {
		d := ends[i].end - lo
		if d%1000 != 0 || d/1000 >= 1<<(64-idxBits) {
			return false
		}
		keys[i] = uint64(d/1000)<<idxBits | uint64(i)
	}
	slices.Sort(keys) // ties of the end by position: buildEnds appends in run order
	sorted := make([]runEnd, len(ends))
	for i, k := range keys {
		sorted[i] = ends[k&(1<<idxBits-1)]
	}
	copy(ends, sorted)
	return true
}

// release is the ExpectedRelease of e freeing milli.
func (c *cycle) release(e *runEnd, milli int64) ExpectedRelease {
	return ExpectedRelease{JobID: c.s.Running[e.run].ID, Milli: milli, ExpectedEnd: time.Unix(0, e.end).UTC()}
}

// capacityReleases lists, for a shape waiting with capacity_busy or
// fragmented, the running jobs holding GPUs it matches, earliest expected end
// first, until the GPUs their ends free together with the free ones would
// give the request as many GPUs as it asks for in one unit of its topology
// (a node for same-node, an NVLink domain for nvlink-domain, the pool for
// any); at most MaxReleases. Reservations and host CPU/memory are not
// considered: the list is the earliest chance, not a promise. Computed once
// per shape per cycle, at its first job that needs it.
func (c *cycle) capacityReleases(ps *poolState, sh *shapeInfo) []ExpectedRelease {
	if sh.releasesDone {
		return sh.releases
	}
	sh.releasesDone = true
	if sh.count <= 0 {
		return nil
	}
	c.buildEnds()
	if len(ps.ends) == 0 {
		return nil
	}
	total, _ := ps.freeCounts(sh)
	largest := 0
	if ps.relFreed == nil {
		ps.relFreed = make([]int32, len(ps.gpus))
		ps.relUnit = make([]int32, max(len(ps.nodes), len(ps.domains)))
		for i := range ps.relUnit {
			ps.relUnit[i] = -1
		}
	}
	touchedGPU, touchedUnit := ps.relTouched[:0], ps.relTouchedUnit[:0]
	var out []ExpectedRelease
	for i := range ps.ends {
		e := &ps.ends[i]
		var m int64
		for _, es := range ps.endShares[e.first:e.last] {
			gi := es.gpu
			g := &ps.gpus[gi]
			if !g.usable || !sh.match[g.class] {
				continue
			}
			m += int64(es.milli)
			unit, first, end := ps.unitOf(sh.topo, gi)
			if sh.topo != TopologyAny && ps.relUnit[unit] < 0 {
				ps.relUnit[unit] = int32(ps.countIn(sh, searchWithReserved, first, end))
				touchedUnit = append(touchedUnit, unit)
				largest = max(largest, int(ps.relUnit[unit]))
			}
			before := g.free()+ps.relFreed[gi] >= sh.milli
			if ps.relFreed[gi] == 0 {
				touchedGPU = append(touchedGPU, gi)
			}
			ps.relFreed[gi] += es.milli
			if !before && g.free()+ps.relFreed[gi] >= sh.milli {
				total++
				if sh.topo != TopologyAny {
					ps.relUnit[unit]++
					largest = max(largest, int(ps.relUnit[unit]))
				}
			}
		}
		if m == 0 {
			continue
		}
		out = append(out, c.release(e, m))
		enough := total >= sh.count
		if sh.topo != TopologyAny && sh.count > 1 {
			enough = largest >= sh.count
		}
		if enough || len(out) == MaxReleases {
			break
		}
	}
	for _, gi := range touchedGPU {
		ps.relFreed[gi] = 0
	}
	for _, u := range touchedUnit {
		ps.relUnit[u] = -1
	}
	ps.relTouched, ps.relTouchedUnit = touchedGPU, touchedUnit
	sh.releases = out
	return out
}

// unitOf is the topology unit of GPU gi: its node (same-node), its domain
// (nvlink-domain) or the pool (any: unit 0), with the unit's GPU range.
func (ps *poolState) unitOf(topo Topology, gi int32) (unit, first, end int32) {
	g := &ps.gpus[gi]
	switch topo {
	case TopologySameNode:
		n := &ps.nodes[g.node]
		return g.node, n.first, n.end
	case TopologyNVLinkDomain:
		d := &ps.domains[g.domain]
		return g.domain, d.first, d.end
	}
	return 0, 0, int32(len(ps.gpus))
}

// quotaReleases lists, for a job of project waiting with quota_exhausted in
// the pool, the project's own running jobs there, earliest expected end
// first, until their milli-GPU covers what the quota check lacks
// (poolQuota.shortfall); at most MaxReleases. Results are kept per quota
// row and shortfall for the cycle: the list depends only on these, and the
// shortfall of one need grows as the cycle places the project's jobs.
func (c *cycle) quotaReleases(ps *poolState, row *quotaRow, borrow bool, need int64) []ExpectedRelease {
	if row == nil {
		return nil
	}
	short := ps.quota.shortfall(row, borrow, need)
	if rel, ok := row.releases[short]; ok {
		return rel
	}
	c.buildEnds()
	if !row.endsDone {
		row.endsDone = true
		for i := range ps.ends {
			if e := &ps.ends[i]; e.total > 0 && e.project == row.q.Project {
				row.ends = append(row.ends, int32(i))
			}
		}
	}
	var out []ExpectedRelease
	var freed int64
	ends := row.ends
	if short > row.used {
		// Even with every own job ended the request would not pass: only a
		// quota change helps, and no release is worth listing.
		ends = nil
	}
	for _, i := range ends {
		e := &ps.ends[i]
		out = append(out, c.release(e, e.total))
		freed += e.total
		if freed >= short || len(out) == MaxReleases {
			break
		}
	}
	if row.releases == nil {
		row.releases = map[int64][]ExpectedRelease{}
	}
	row.releases[short] = out
	return out
}

// shortfall is how much of its own usage in the pool the project of row must
// give back before need more milli-GPU passes check: back within nominal, or,
// when it may borrow, within nominal + borrowing limit with the cohort's
// usage within the cohort's nominal, whichever is less.
func (pq *poolQuota) shortfall(row *quotaRow, borrow bool, need int64) int64 {
	short := row.used + need - row.q.NominalMilli
	if borrow {
		lim := max(row.used+need-row.q.NominalMilli-row.q.BorrowingLimitMilli, pq.used+need-pq.nominal)
		short = min(short, lim)
	}
	return max(short, 0)
}
