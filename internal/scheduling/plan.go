package scheduling

import (
	"sync"
	"time"

	"github.com/gpugov/gpugov/internal/vocab"
)

// Plan runs one scheduling cycle over a snapshot: it ranks the pending jobs by
// effective priority, places them in rank order by best fit, records exactly
// one wait reason (with quantities and a re-evaluation condition) for every
// job it does not place, keeps reservations for the highest-ranked blocked
// jobs, and proposes preemptions. Plan is pure: no I/O and no clock but now,
// and no map is iterated unsorted, so the same snapshot, policy and now give
// the same Result (docs/design.md invariant 4). Plan does not modify s or p.
// A nil policy means DefaultPolicy; a nil snapshot an empty one.
//
// Cost: each request shape (pool, models, memory, count, milli-GPU,
// topology, CPU, memory) is analysed once per cycle; placements use a
// free-capacity index (freeindex.go) instead of scanning GPUs; "does not fit"
// is remembered per shape for the rest of the cycle (free capacity only
// shrinks within a cycle); and a blocked shape's reason and texts are reused
// until capacity its GPU classes see changes. So, once a pool is full, a job
// costs a few map lookups and one status record. The nearest-fit suggestions
// and expected releases of a wait (docs/design.md §1 "What would change it")
// are computed once per shape per cycle, and the running jobs' expected ends
// are indexed only when some wait needs them.
//
// Plan indexes the inventory afresh every call; a caller that plans cycle
// after cycle on one inventory uses a Planner, which reuses that index.
func Plan(s *Snapshot, p *Policy, now time.Time) *Result {
	return plan(s, p, now, false, nil)
}

// plan is Plan; slow makes every capacity query use the reference scans
// instead of the free-capacity index (tests compare the two); pl, when not
// nil, supplies the static capacity index (Planner).
func plan(s *Snapshot, p *Policy, now time.Time, slow bool, pl *Planner) *Result {
	if s == nil {
		s = &Snapshot{}
	}
	if p == nil {
		d := DefaultPolicy()
		p = &d
	}
	c := newCycle(s, p, now, slow, pl)
	defer c.cap.recycle()
	if c.shares == nil || !c.shares.hasMin {
		for r, pos := range c.order {
			je := &c.jobs[pos]
			je.rank = int32(r + 1)
			c.serve(je)
		}
		c.nextEvaluations()
		return c.res
	}
	// Queue minimums (docs/design.md §4): production jobs and the jobs of
	// queues below their min_share in their pool are served first, in rank
	// order; whether a queue is below its minimum is read when its job comes
	// up, so the queue stops being served first as soon as this cycle's
	// placements bring it to its minimum. The others follow in rank order.
	// A job the first pass leaves is never served first later in the cycle
	// (use only grows within a cycle).
	deferred := make([]int32, 0, len(c.order))
	for r, pos := range c.order {
		je := &c.jobs[pos]
		je.rank = int32(r + 1)
		if !je.firstPass() {
			deferred = append(deferred, pos)
			continue
		}
		if je.tier != vocab.TierProduction {
			c.prios[je.rank-1].MinShareBoost = je.share.boostNote()
		}
		c.serve(je)
	}
	// The aging clause compares a job with the one served before it; a
	// deferred job can overtake only deferred jobs by aging.
	for _, ps := range c.cap.sorted {
		ps.lastRanked = -1
	}
	for _, pos := range deferred {
		c.serve(&c.jobs[pos])
	}
	c.nextEvaluations()
	return c.res
}

// serve decides a job as the next one of the cycle: its place among its
// pool's jobs in the serving order (Placement.Rank, WaitStatus.Rank) and the
// job served before it in its pool.
func (c *cycle) serve(je *jobEntry) {
	je.prevInPool = -1
	if ps := je.ps; ps != nil {
		je.prevInPool = ps.lastRanked
		ps.ranked++
		je.poolRank = ps.ranked
	} else {
		if c.unknownPools == nil {
			c.unknownPools = make(map[string]int32)
		}
		name := je.job.Request.Pool
		c.unknownPools[name]++
		je.poolRank = c.unknownPools[name]
	}
	waiting := len(c.res.Waiting)
	c.decide(je)
	// Only a job left waiting for GPUs (its reason earns aging) stands ahead
	// of the next one in the aging clause: a job placed now, held, or waiting
	// on its spec, quota or environment does not compete for the GPUs.
	if ps := je.ps; ps != nil && len(c.res.Waiting) > waiting {
		if w := &c.res.Waiting[len(c.res.Waiting)-1]; w.JobID == je.id && w.Reason.EarnsAging() &&
			w.Reason != vocab.ReasonQuotaExhausted {
			ps.lastRanked = je.pos
		}
	}
}

// jobEntry is one pending job of the cycle. cycle.jobs is in Snapshot.Pending
// order (cycle.order lists it by rank); a job's priority is cycle.prios[rank−1].
type jobEntry struct {
	job *PendingJob
	// The fields decide needs, copied in one sequential pass over the
	// snapshot so that the pass in rank order touches only this entry.
	id      string
	project string
	tier    vocab.Tier
	flags   jobFlags
	need    int64      // Request.TotalMilli()
	ps      *poolState // the requested pool; nil when unknown
	sh      *shapeInfo // the request's shape in ps; nil when not needed
	qrow    *quotaRow  // the project's quota in ps; nil when unlimited
	share   *shareRow  // the queue's service share in ps; nil when the queue has none
	rank    int32      // 1-based score rank (index into cycle.prios + 1), set when the job is decided
	// poolRank is the job's 1-based place among its pool's jobs in the
	// serving order (Placement.Rank, WaitStatus.Rank).
	poolRank int32
	pos      int32 // index in cycle.jobs
	// prevInPool is the entry of the nearest higher-ranked job of the same
	// pool left waiting for GPUs (a reason that earns aging, quota aside;
	// −1 when none), for the "when aging lifts rank above" clause.
	prevInPool int32
}

// jobFlags are the states that decide a reason before capacity is looked at.
type jobFlags uint8

const (
	flagHeld jobFlags = 1 << iota
	flagNotReady
	flagPreempting
)

// cycle is the working state of one Plan call.
type cycle struct {
	s      *Snapshot
	p      *Policy
	now    time.Time
	cap    *capacityIndex
	quota  *quotaState
	queues map[string]*Queue
	shares *shareState // queue service shares; nil when no queue has one
	// unknownPools counts, per pool the inventory lacks, its jobs decided
	// so far (their pool ranks).
	unknownPools map[string]int32
	victims      *victimIndex // built on first need (victimsIndex)
	jobs         []jobEntry   // in Snapshot.Pending order
	prios        []Priority   // by rank
	aging        []agingRule  // by rank
	order        []int32      // Snapshot.Pending index by rank
	res          *Result
	keyBuf       []byte
	models       []string
	freed        []int32
	scratch      []int32
	textBuf      []byte
	// projects caches project lookups (project); last* remembers the latest.
	projects        map[string]*projectInfo
	lastProject     *projectInfo
	lastProjectName string
	endsBuilt       bool // poolState.ends are built (buildEnds)
	// evidenceGates caches the evidence rule's answer per profile record
	// (evidenceGate); used only while the victim index is built.
	evidenceGates map[evidenceKey]string
}

// newCycle indexes the snapshot and ranks the pending jobs. Ranking needs
// only the pending jobs and the policy, so it runs on its own goroutine
// beside the capacity work and the job entries; they share nothing that is
// written, and the result does not depend on their timing. The victim index
// is built only when a preemption or reclaim first needs it (victimsIndex):
// most cycles of a pool with room never do, and building it for every
// cycle was the simulator's largest cost after the capacity index. slow selects the reference scans and pl the
// static capacity index (see plan).
func newCycle(s *Snapshot, p *Policy, now time.Time, slow bool, pl *Planner) *cycle {
	c := &cycle{s: s, p: p, now: now, queues: make(map[string]*Queue, len(s.Queues)),
		projects: make(map[string]*projectInfo)}
	for i := range s.Queues {
		if _, dup := c.queues[s.Queues[i].Name]; !dup {
			c.queues[s.Queues[i].Name] = &s.Queues[i]
		}
	}
	var wg sync.WaitGroup
	wg.Go(c.rank)
	c.cap = newCapacity(pl.static(s, selectorKeys(s)), s)
	for _, ps := range c.cap.sorted {
		ps.initIndex()
		ps.slow = slow
	}
	c.quota = newQuotaState(s, c.cap, runningProjects(s))
	c.shares = newShareState(s, c.queues, c.cap)
	for _, ps := range c.cap.sorted {
		ps.quota = c.quota.pools[ps.name]
	}
	c.startReclaim()
	c.fillEntries()
	wg.Wait()
	c.initPacking()
	c.findClaims()
	c.res = &Result{PolicyVersion: p.Version, At: now,
		Placements: make([]Placement, 0, min(len(c.jobs), 1024)),
		Waiting:    make([]WaitStatus, 0, len(c.jobs))}
	return c
}

// fillEntries builds the job entries in one sequential pass over the pending
// jobs (beside ranking), resolving pools, shapes and quota rows.
func (c *cycle) fillEntries() {
	c.jobs = make([]jobEntry, len(c.s.Pending))
	var lastPool *poolState
	for i := range c.s.Pending {
		j := &c.s.Pending[i]
		if lastPool == nil || lastPool.name != j.Request.Pool {
			lastPool = c.cap.pools[j.Request.Pool]
		}
		c.fillEntry(&c.jobs[i], j, lastPool)
		c.jobs[i].pos = int32(i)
	}
}

// projectInfo is what a cycle knows about one project: its quota rows by pool.
type projectInfo struct {
	quotas []projectQuota
}

// projectQuota is a project's quota row in one pool.
type projectQuota struct {
	pool *poolState
	row  *quotaRow
}

// project returns the cycle's information about a project, looked up once.
func (c *cycle) project(name string) *projectInfo {
	if c.lastProject != nil && c.lastProjectName == name {
		return c.lastProject
	}
	info, ok := c.projects[name]
	if !ok {
		info = &projectInfo{}
		for _, ps := range c.cap.sorted {
			if ps.quota != nil {
				if row, ok := ps.quota.rows[name]; ok {
					info.quotas = append(info.quotas, projectQuota{ps, row})
				}
			}
		}
		c.projects[name] = info
	}
	c.lastProject, c.lastProjectName = info, name
	return info
}

// fillEntry copies what decide needs from a pending job into its entry and
// resolves its shape and quota row.
func (c *cycle) fillEntry(je *jobEntry, j *PendingJob, ps *poolState) {
	je.job, je.id, je.project, je.tier, je.ps = j, j.ID, j.Project, j.Tier, ps
	je.need = j.Request.TotalMilli()
	if j.Held {
		je.flags |= flagHeld
	}
	if notReady(j.Prerequisites) {
		je.flags |= flagNotReady
	}
	if len(j.PreemptionInProgress) > 0 {
		je.flags |= flagPreempting
	}
	if ps == nil || !ps.available || ps.schedulable == 0 || je.flags&(flagHeld|flagNotReady) != 0 {
		return
	}
	je.sh = c.shape(ps, &j.Request)
	je.share = c.shares.entryRow(c.queues, j.Queue, ps)
	if ps.quota == nil {
		return
	}
	for _, q := range c.project(j.Project).quotas {
		if q.pool == ps {
			je.qrow = q.row
		}
	}
}

// shape returns the cached shape of a request in a pool.
func (c *cycle) shape(ps *poolState, r *ResourceRequest) *shapeInfo {
	c.keyBuf = shapeKeyBytes(c.keyBuf[:0], r, &c.models)
	if sh, ok := ps.shapes[string(c.keyBuf)]; ok {
		return sh
	}
	sh := ps.newShape(r)
	ps.shapes[string(c.keyBuf)] = sh
	return sh
}

// decide places one job or records its wait reason. Reasons are decided in
// this precedence: held > pool_unavailable > environment_not_ready >
// preemption_in_progress > no_matching_capacity > quota_exhausted (the
// project's quota, then the queue's max_share) >
// reserved_for_higher_priority > fragmented > capacity_busy.
func (c *cycle) decide(je *jobEntry) {
	ps, sh := je.ps, je.sh
	switch {
	case je.flags&flagHeld != 0:
		d, re := heldStatus()
		c.wait(je, vocab.ReasonHeld, d, re, "")
		return
	case ps == nil || !ps.available || ps.schedulable == 0:
		d, re := poolUnavailableStatus(je.job.Request.Pool, ps)
		c.wait(je, vocab.ReasonPoolUnavailable, d, re, "")
		return
	case je.flags&flagNotReady != 0:
		d, re := environmentStatus(je.job.Prerequisites)
		c.wait(je, vocab.ReasonEnvironmentNotReady, d, re, "")
		return
	case je.flags&flagPreempting != 0:
		c.reserveInProgress(je, ps, sh)
		d, re := preemptionStatus(je.job.PreemptionInProgress)
		if withinNominal(je) {
			d += c.lentOutPhrase(je, ps, nil, true)
		}
		c.wait(je, vocab.ReasonPreemptionInProgress, d, re, "")
		return
	}
	if !sh.emptyFit {
		d, re := noMatchingStatus(ps, sh)
		w := c.wait(je, vocab.ReasonNoMatchingCapacity, d, re, "")
		w.Suggestions = ps.suggestionsFor(sh, vocab.ReasonNoMatchingCapacity)
		return
	}
	qv := ps.quota.check(je.qrow, je.tier, je.need)
	if qv.ok && qv.borrowed {
		if why, re := c.borrowRefusal(je, ps); why != "" {
			qv.ok, qv.borrowed, qv.why = false, false, why
			d, _ := quotaStatus(je.project, ps.name, qv)
			c.wait(je, vocab.ReasonQuotaExhausted, d, re, "")
			return
		}
	}
	if !qv.ok {
		d, re := quotaStatus(je.project, ps.name, qv)
		w := c.wait(je, vocab.ReasonQuotaExhausted, d, re, "")
		w.Releases = c.quotaReleases(ps, qv.row, canBorrow(je.tier), je.need)
		return
	}
	if je.share.overCap(je.need) {
		d, re := je.share.capStatus(je.need)
		c.wait(je, vocab.ReasonQuotaExhausted, d, re, "")
		return
	}
	if !sh.noFitFree {
		if ch, ok := ps.search(sh, searchFree); ok {
			c.place(je, ps, sh, ch, qv)
			return
		}
		sh.noFitFree = true
	}
	c.blocked(je, ps, sh, qv)
}

// place grants the choice to the job and charges capacity and quota.
func (c *cycle) place(je *jobEntry, ps *poolState, sh *shapeInfo, ch choice, qv quotaVerdict) {
	ps.apply(sh, ch)
	ps.quota.charge(qv.row, qv.need)
	je.share.charge(je.need)
	pl := Placement{JobID: je.id, Pool: ps.name, Node: ps.nodes[ch.node].name, Borrowed: qv.borrowed,
		Rank: int(je.poolRank), Priority: c.prios[je.rank-1], RequestVersion: je.job.RequestVersion}
	if len(ch.gpus) > 0 {
		pl.GPUs = make([]GPUShare, len(ch.gpus))
		for i, gi := range ch.gpus {
			pl.GPUs[i] = GPUShare{UUID: ps.gpus[gi].uuid, Milli: int(sh.milli)}
		}
	}
	c.res.Placements = append(c.res.Placements, pl)
}

// blocked decides the capacity reason of a job that does not fit outside
// reservations, proposes a preemption for capacity_busy, and reserves.
func (c *cycle) blocked(je *jobEntry, ps *poolState, sh *shapeInfo, qv quotaVerdict) {
	rc := c.capacityReason(ps, sh)
	detail, reEval, blocking := rc.detail, rc.reEval, rc.blocking
	var suggest []Suggestion
	var releases []ExpectedRelease
	switch rc.reason {
	case vocab.ReasonFragmented: // before this job's own reservation takes free GPUs
		suggest = ps.suggestionsFor(sh, rc.reason)
		releases = c.capacityReleases(ps, sh)
	case vocab.ReasonCapacityBusy:
		releases = c.capacityReleases(ps, sh)
	}
	above := int(je.prevInPool)
	if rc.reason == vocab.ReasonReservedForHigherPriority {
		above = ps.reservations[rc.reservation].entry
	}
	acting := false
	var proposed *PreemptionProposal
	if rc.reason == vocab.ReasonCapacityBusy {
		if prop, phrase := c.tryPreemption(je, ps, sh, qv.lender); prop != nil {
			c.res.Preemptions = append(c.res.Preemptions, *prop)
			detail += phrase
			acting = prop.Act // an acting proposal already reserved its target
			proposed = prop
		}
	}
	if qv.lender {
		if phrase := c.lentOutPhrase(je, ps, proposed, false); phrase != "" {
			detail += phrase
			ps.quota.reclaim.addClaim(je.project, je.id)
		}
	}
	if !acting && c.p.Reservation.Enabled && ps.heldDepth < c.p.Reservation.Depth {
		if phrase := ps.reserve(sh, reservation{jobID: je.id, entry: int(je.pos)}); phrase != "" {
			detail += "; " + phrase
		}
	}
	var ot *Overtake
	if above >= 0 && c.p.Aging.Enabled {
		ot = c.overtake(je, &c.jobs[above])
		if ot.Never {
			reEval = appendNeverClause(reEval, ot)
		} else {
			reEval = appendAgingClause(reEval, ot.At, ot.AheadJobID)
		}
	}
	w := c.wait(je, rc.reason, detail, reEval, blocking)
	w.Suggestions, w.Releases, w.Overtake = suggest, releases, ot
}

// capacityReason returns reserved_for_higher_priority (fits only on reserved
// GPUs), fragmented (enough matching GPUs free in total, not together as the
// topology asks) or capacity_busy, with texts. The result is cached on the
// shape for the capacity version it depends on; when capacity changed but
// none of the quantities shown did, the texts are kept.
func (c *cycle) capacityReason(ps *poolState, sh *shapeInfo) *reasonCache {
	version := sh.version(ps)
	if sh.hasCached && sh.cachedVersion == version {
		return &sh.cached
	}
	rc := reasonCache{reason: vocab.ReasonCapacityBusy, reservation: -1}
	rc.free, rc.reserved = ps.freeCounts(sh)
	switch {
	case !sh.noFitAll && ps.anyReserved(sh):
		if ch, ok := ps.search(sh, searchWithReserved); ok {
			rc.reservation = ps.reservedBy(ch)
			rc.reason, rc.blocking = vocab.ReasonReservedForHigherPriority, ps.reservations[rc.reservation].jobID
			break
		}
		sh.noFitAll = true
		fallthrough
	default:
		if sh.count > 0 && rc.free >= sh.count {
			rc.reason = vocab.ReasonFragmented
			rc.largest = ps.largestGroup(sh, searchWithReserved)
		}
	}
	old := &sh.cached
	sh.hasCached, sh.cachedVersion = true, version
	if old.detail != "" && old.reason == rc.reason && old.blocking == rc.blocking && old.free == rc.free &&
		old.reserved == rc.reserved && old.largest == rc.largest {
		old.reservation = rc.reservation
		return old
	}
	c.textBuf = capacityStatus(c.textBuf, sh, &rc)
	sh.cached = rc
	return &sh.cached
}

// wait records a job's wait status and returns it for the reason's extras
// (suggestions, releases).
func (c *cycle) wait(je *jobEntry, reason vocab.WaitReason, detail, reEval, blocking string) *WaitStatus {
	c.res.Waiting = append(c.res.Waiting, WaitStatus{JobID: je.id, Reason: reason, Detail: detail,
		ReEvaluate: reEval, BlockingJobID: blocking, Rank: int(je.poolRank), Priority: c.prios[je.rank-1]})
	return &c.res.Waiting[len(c.res.Waiting)-1]
}

// nextEvaluations dates every wait status's next re-evaluation once the
// cycle has decided all jobs (so that every part of a status, its expected
// releases included, is known): the earliest of its aging overtake and its
// earliest expected release still in the future, else the next timer cycle
// (Snapshot.CycleIntervalSeconds after now; left zero when that is 0).
func (c *cycle) nextEvaluations() {
	var timer time.Time
	if iv := c.s.CycleIntervalSeconds; iv > 0 {
		timer = c.now.Add(time.Duration(iv * float64(time.Second)))
	}
	for i := range c.res.Waiting {
		c.res.Waiting[i].Next = nextEvaluation(&c.res.Waiting[i], c.now, timer)
	}
}

// nextEvaluation is one status's next re-evaluation (see nextEvaluations);
// timer is the next timer cycle, zero when unknown.
func nextEvaluation(w *WaitStatus, now, timer time.Time) NextEvaluation {
	var next NextEvaluation
	if ot := w.Overtake; ot != nil && !ot.Never && ot.At.After(now) {
		next = NextEvaluation{At: ot.At, Kind: vocab.NextEvalAgingOvertake}
	}
	for _, r := range w.Releases { // earliest first: the first future one
		if r.ExpectedEnd.After(now) {
			if next.At.IsZero() || r.ExpectedEnd.Before(next.At) {
				next = NextEvaluation{At: r.ExpectedEnd, Kind: vocab.NextEvalReleaseEstimate, Estimate: true}
			}
			break
		}
	}
	if next.At.IsZero() && !timer.IsZero() {
		next = NextEvaluation{At: timer, Kind: vocab.NextEvalTimer}
	}
	return next
}
