package queuereport

import (
	"cmp"
	"fmt"
	"hash/maphash"
	"math"
	"slices"

	"github.com/gpugov/gpugov/internal/vocab"
)

// loadTargets interns the target queues and normalises their service shares.
func (c *computer) loadTargets() error {
	var sum float64
	seen := make(map[string]bool, len(c.in.Targets))
	for _, t := range c.in.Targets {
		if seen[t.Queue] {
			return fmt.Errorf("targets: queue %q given twice", t.Queue)
		}
		seen[t.Queue] = true
		if t.ServiceShare < 0 || math.IsNaN(t.ServiceShare) || math.IsInf(t.ServiceShare, 0) {
			return fmt.Errorf("targets: queue %q: service_share must be a finite number ≥ 0, got %v", t.Queue, t.ServiceShare)
		}
		if t.MaxWait < 0 {
			return fmt.Errorf("targets: queue %q: max_wait must not be negative", t.Queue)
		}
		if err := t.checkShares(); err != nil {
			return err
		}
		sum += t.ServiceShare
	}
	for _, t := range c.in.Targets {
		q := c.queues.id(t.Queue)
		c.growQueues()
		c.maxWait[q] = int64(t.MaxWait)
		if sum > 0 {
			c.target[q] = t.ServiceShare / sum
		}
	}
	return nil
}

// growQueues extends the per-queue tables to every interned queue.
func (c *computer) growQueues() {
	for len(c.maxWait) < len(c.queues.names) {
		c.maxWait = append(c.maxWait, 0)
		c.target = append(c.target, math.NaN())
	}
}

// loadJobs validates the jobs, interns their dimensions, assigns groups and
// orders them by submit time.
func (c *computer) loadJobs() error {
	n := len(c.in.Jobs)
	c.jobs = make([]jobRec, n)
	var lastKey groupKey
	lastGroup := int32(-1)
	for i := range c.in.Jobs {
		j := &c.in.Jobs[i]
		r := jobRec{
			submit: j.SubmitTime.UnixNano(), firstStart: nsOf(j.FirstStart), end: nsOf(j.End),
			tier: int8(j.Tier), cancelled: j.Cancelled, cww: j.CancelledWhileWaiting, class: -1,
		}
		if err := validateJob(j, &r); err != nil {
			return err
		}
		r.pool, r.queue, r.mset = c.pools.id(j.Pool), c.queues.id(j.Queue), c.msets.id(j.Request.Models)
		if d := j.Request.DemandMilli(); d > 0 {
			r.class = c.classOf(r.mset, d)
		}
		key := groupKey{-1, -1, -1, -1, -1}
		if c.grouped[0] {
			key[0] = r.queue
		}
		if c.grouped[1] {
			key[1] = int32(j.Tier)
		}
		if c.grouped[2] {
			key[2] = c.jobTypes.id(j.JobType)
		}
		if c.grouped[3] {
			key[3] = r.pool
		}
		if c.grouped[4] {
			key[4] = c.projects.id(j.Project)
		}
		if lastGroup < 0 || key != lastKey {
			lastKey, lastGroup = key, c.groupOf(key)
		}
		r.group = lastGroup
		c.jobs[i] = r
	}
	if id, dup := firstDuplicateID(c.in.Jobs); dup {
		return fmt.Errorf("job %q: id given twice", id)
	}
	c.growQueues()
	c.order = make([]int32, n)
	for i := range c.order {
		c.order[i] = int32(i)
	}
	if !slices.IsSortedFunc(c.order, c.bySubmit) { // loaders usually give them in order
		slices.SortStableFunc(c.order, c.bySubmit)
	}
	return nil
}

// bySubmit orders job indexes by submit time.
func (c *computer) bySubmit(a, b int32) int { return cmp.Compare(c.jobs[a].submit, c.jobs[b].submit) }

// validateJob checks one job's own fields; r holds its times in ns.
func validateJob(j *Job, r *jobRec) error {
	switch {
	case j.ID == "":
		return fmt.Errorf("job: id is required")
	case j.Tier < vocab.TierExperiment || j.Tier > vocab.TierProduction:
		return fmt.Errorf("job %q: unknown tier %d", j.ID, int(j.Tier))
	case j.Request.GPUs < 0 || j.Request.GPUMilli < 0:
		return fmt.Errorf("job %q: request: gpus and gpu_milli must not be negative", j.ID)
	case r.firstStart != noTime && r.firstStart < r.submit:
		return fmt.Errorf("job %q: first_start is before submit_time", j.ID)
	case r.end != noTime && r.end < r.submit:
		return fmt.Errorf("job %q: end is before submit_time", j.ID)
	case r.end != noTime && r.end < r.firstStart:
		return fmt.Errorf("job %q: end is before first_start", j.ID)
	case j.CancelledWhileWaiting && r.end == noTime:
		return fmt.Errorf("job %q: cancelled_while_waiting needs end (the cancellation time)", j.ID)
	}
	return nil
}

// firstDuplicateID returns an ID that two jobs share, if any. It hashes the
// IDs to 64 bits, partitions the hashes by their top bits into cache-sized
// parts and looks for a repeated hash within each part with a small
// open-addressing set, which costs a few sequential passes instead of a
// cache miss per job. Only when two hashes are equal does it build an exact
// map to find the duplicate (or rule out a collision), so the answer never
// depends on the hash seed.
func firstDuplicateID(jobs []Job) (string, bool) {
	n := len(jobs)
	if n < 2 {
		return "", false
	}
	seed := maphash.MakeSeed()
	hashes := make([]uint64, n)
	for i := range jobs {
		hashes[i] = maphash.String(seed, jobs[i].ID) | 1 // 0 marks an empty slot below
	}
	const partBits = 8
	var off [1<<partBits + 1]int
	for _, h := range hashes {
		off[h>>(64-partBits)+1]++
	}
	for p := 1; p < len(off); p++ {
		off[p] += off[p-1]
	}
	parts := make([]uint64, n)
	fill := off
	for _, h := range hashes {
		p := h >> (64 - partBits)
		parts[fill[p]] = h
		fill[p]++
	}
	var set []uint64
	suspect := false
	for p := 0; p < 1<<partBits && !suspect; p++ {
		part := parts[off[p]:off[p+1]]
		size := 16
		for size < 2*len(part) {
			size <<= 1
		}
		set = slices.Grow(set[:0], size)[:size]
		clear(set)
		mask := uint64(size - 1)
		for _, h := range part {
			k := h & mask
			for set[k] != 0 && set[k] != h {
				k = (k + 1) & mask
			}
			if set[k] == h {
				suspect = true
				break
			}
			set[k] = h
		}
	}
	if !suspect {
		return "", false
	}
	seen := make(map[string]bool, n)
	for i := range jobs {
		if seen[jobs[i].ID] {
			return jobs[i].ID, true
		}
		seen[jobs[i].ID] = true
	}
	return "", false
}

// classOf interns the (model set, demand) class of a GPU request.
func (c *computer) classOf(mset int32, demand int64) int32 {
	k := [2]int64{int64(mset), demand}
	id, ok := c.classIdx[k]
	if !ok {
		id = int32(len(c.classMset))
		c.classIdx[k] = id
		c.classMset = append(c.classMset, mset)
		c.classDemand = append(c.classDemand, demand)
	}
	return id
}

// groupOf returns the index of the group with key k, adding it if new.
func (c *computer) groupOf(k groupKey) int32 {
	g, ok := c.groupIdx[k]
	if !ok {
		g = int32(len(c.aggs))
		c.groupIdx[k] = g
		c.aggs = append(c.aggs, agg{key: k, longest: -1})
	}
	return g
}

// lookAhead is how many jobs past the previous record's job jobOf tries
// before using the map.
const lookAhead = 8

// jobOf returns the index of the job with the given ID. last is the previous
// answer: records of one job usually come together, and often in the order of
// the jobs, so the previous job and the next few are tried before the map.
func (c *computer) jobOf(id string, last *int32) (int32, bool) {
	l := *last // -1 before the first record
	if l >= 0 && c.in.Jobs[l].ID == id {
		return l, true
	}
	// Records ordered like the jobs skip the jobs that have none: look a few
	// jobs ahead before falling back to the map.
	for k := l + 1; k < l+1+lookAhead && int(k) < len(c.in.Jobs); k++ {
		if c.in.Jobs[k].ID == id {
			*last = k
			return k, true
		}
	}
	if c.jobIdx == nil {
		c.jobIdx = make(map[string]int32, len(c.in.Jobs))
		for i := range c.in.Jobs {
			c.jobIdx[c.in.Jobs[i].ID] = int32(i)
		}
	}
	j, ok := c.jobIdx[id]
	if ok {
		*last = j
	}
	return j, ok
}

// loadRuns validates the runs and indexes them by job, ordered by start.
func (c *computer) loadRuns() error {
	c.runs = make([]runRec, len(c.in.Runs))
	counts := make([]int32, len(c.jobs)+1)
	last := int32(-1)
	for i := range c.in.Runs {
		r := &c.in.Runs[i]
		j, ok := c.jobOf(r.JobID, &last)
		if !ok {
			return fmt.Errorf("run %d: unknown job %q", i, r.JobID)
		}
		rr := runRec{start: r.Start.UnixNano(), end: nsOf(r.End), milli: int32(r.GPUMilli), job: j}
		if rr.end != noTime && rr.end < rr.start {
			return fmt.Errorf("run %d of job %q: end is before start", i, r.JobID)
		}
		if r.GPUMilli < 0 || r.GPUMilli > math.MaxInt32 {
			return fmt.Errorf("run %d of job %q: gpu_milli must be in 0..%d, got %d", i, r.JobID, math.MaxInt32, r.GPUMilli)
		}
		c.runs[i] = rr
		counts[j+1]++
	}
	for j := 1; j < len(counts); j++ {
		counts[j] += counts[j-1]
	}
	c.runOff = counts
	c.runOrder = make([]int32, len(c.runs))
	fill := slices.Clone(counts[:len(c.jobs)])
	for i, r := range c.runs {
		c.runOrder[fill[r.job]] = int32(i)
		fill[r.job]++
	}
	for j := range c.jobs {
		rs := c.runOrder[c.runOff[j]:c.runOff[j+1]]
		if len(rs) > 1 {
			slices.SortFunc(rs, func(a, b int32) int { return cmp.Compare(c.runs[a].start, c.runs[b].start) })
		}
	}
	return nil
}

// loadWaitEvents validates the wait events, adds their time in the window to
// their group's reason totals and remembers each job's latest reason.
func (c *computer) loadWaitEvents() error {
	for l := range c.reasonByLen {
		c.reasonByLen[l] = -1
	}
	c.lastSeen = make([]int64, len(c.jobs))
	c.lastRsn = make([]int32, len(c.jobs))
	for j := range c.lastSeen {
		c.lastSeen[j], c.lastRsn[j] = noTime, -1
	}
	c.poolReasons = make([][]reasonAcc, len(c.pools.names))
	last := int32(-1)
	for i := range c.in.WaitEvents {
		e := &c.in.WaitEvents[i]
		j, ok := c.jobOf(e.JobID, &last)
		if !ok {
			return fmt.Errorf("wait event %d: unknown job %q", i, e.JobID)
		}
		if e.Reason == "" {
			return fmt.Errorf("wait event %d of job %q: reason is required", i, e.JobID)
		}
		s, en := e.Start.UnixNano(), nsOf(e.End)
		if en != noTime && en < s {
			return fmt.Errorf("wait event %d of job %q: end is before start", i, e.JobID)
		}
		rid, ok := c.reasonID(e.Reason)
		if !ok {
			return fmt.Errorf("wait event %d of job %q: unknown reason %q", i, e.JobID, e.Reason)
		}
		c.noteReason(j, s, rid)
		lo, hi := max(s, c.from), en
		if hi == noTime || hi > c.end {
			hi = c.end
		}
		if hi <= lo {
			continue
		}
		jr := &c.jobs[j]
		var demand int64 // milli-GPU; 0 for a job that requests no GPU
		if jr.class >= 0 {
			demand = c.classDemand[jr.class]
		}
		addReason(&c.aggs[jr.group].reasons, rid, demand, hi-lo)
		addReason(&c.poolReasons[jr.pool], rid, demand, hi-lo)
	}
	return nil
}

// addReason adds d ns of waiting in reason rid by a job demanding demand
// milli-GPU to the per-reason sums *rs, growing them as needed.
func addReason(rs *[]reasonAcc, rid int32, demand, d int64) {
	for len(*rs) <= int(rid) {
		*rs = append(*rs, reasonAcc{})
	}
	r := &(*rs)[rid]
	r.job.add(1, d)
	r.gpu.add(demand, d)
}

// reasonID interns a wait reason; ok is false for a code the catalogue
// (vocab.Reasons) lacks, whose time no reason group could hold. There are
// few reasons and the known ones all differ in length, so the length picks
// the one candidate to compare, which is cheaper than hashing each of
// millions of events; the catalogue is asked once per new reason.
func (c *computer) reasonID(r vocab.WaitReason) (id int32, ok bool) {
	l := len(r)
	if l < len(c.reasonByLen) {
		if id := c.reasonByLen[l]; id >= 0 && c.reasons.names[id] == string(r) {
			return id, true
		}
	}
	n := len(c.reasons.names)
	id = c.reasons.id(string(r))
	if int(id) == n && !r.Known() { // first seen, and unknown
		return id, false
	}
	if l < len(c.reasonByLen) {
		switch c.reasonByLen[l] {
		case -1: // first reason of this length
			c.reasonByLen[l] = id
		case id:
		default: // two reasons of one length: always use the map for it
			c.reasonByLen[l] = -2
		}
	}
	return id, true
}

// noteReason keeps the latest-starting wait event of job j that starts before
// the report end; ties go to the alphabetically first reason so that the
// answer does not depend on record order.
func (c *computer) noteReason(j int32, start int64, rid int32) {
	if start >= c.end || start < c.lastSeen[j] {
		return
	}
	if start == c.lastSeen[j] && c.reasons.names[rid] >= c.reasons.names[c.lastRsn[j]] {
		return
	}
	c.lastSeen[j], c.lastRsn[j] = start, rid
}
