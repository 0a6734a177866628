package queuereport

import (
	"cmp"
	"container/heap"
	"math"
	"slices"
	"time"

	"github.com/gpugov/gpugov/internal/scheduling"
	"github.com/gpugov/gpugov/internal/vocab"
)

// Signal bits of one job.
const (
	sigOvertaken uint8 = 1 << iota
	sigReleases
	sigArrivals
)

// candidate is a job with at least one starvation signal.
type candidate struct {
	waitLen int64 // its longest wait in the window, ns
	job     int32
	signals uint8
}

// signalNames holds, for each combination of signal bits, the names in
// StarvingJob.Signals; entries are shared by every listed job (read-only).
var signalNames = func() [8][]string {
	var out [8][]string
	for bits := range out {
		out[bits] = []string{}
		for i, name := range []string{SignalOvertaken, SignalReleases, SignalHigherTierArrivals} {
			if bits&(1<<i) != 0 {
				out[bits] = append(out[bits], name)
			}
		}
	}
	return out
}()

// report turns the accumulated state into the Report.
func (c *computer) report() Report {
	order := make([]int32, len(c.aggs))
	for i := range order {
		order[i] = int32(i)
	}
	slices.SortFunc(order, func(a, b int32) int { return c.compareKeys(c.aggs[a].key, c.aggs[b].key) })
	keys := make([]map[string]string, len(c.aggs)) // shared by a group and its starving jobs
	for g := range c.aggs {
		keys[g] = c.keyMap(c.aggs[g].key)
	}
	cands, stuck := c.signals(keys)
	r := Report{
		Options:      c.opts,
		End:          time.Unix(0, c.end).UTC(),
		Groups:       make([]Group, 0, len(c.aggs)),
		Starving:     c.starvingList(cands, keys),
		Stuck:        stuckList(stuck, c.opts.StarvingLimit),
		ReasonShares: reasonShares(c.poolTimes()),
	}
	total := agg{longest: -1}
	for _, g := range order {
		slices.Sort(c.aggs[g].initial)
		slices.Sort(c.aggs[g].requeue)
		total.merge(&c.aggs[g], c)
	}
	r.Total = c.group(&total, map[string]string{}, total.gpu)
	if len(c.opts.GroupBy) > 0 {
		for _, g := range order {
			ag := &c.aggs[g]
			grp := c.group(ag, keys[g], c.shareDen(ag.key, total.gpu))
			c.setTarget(&grp, ag.key, total.gpu)
			r.Groups = append(r.Groups, grp)
		}
	}
	return r
}

// jobCounts returns the largest count of each signal over job j's waits that
// reach the starvation floor of its queue (Options.StarvationMinWaitS);
// shorter waits carry no signal.
func (c *computer) jobCounts(j int) (ot, rel, arr int32) {
	floor := c.opts.starvationFloor(c.maxWait[c.jobs[j].queue])
	for i := c.waitFirst[j]; i < c.waitFirst[j]+c.waitCount[j]; i++ {
		if c.waitLen(i) < floor {
			continue
		}
		ot = max(ot, c.overtaken[i])
		rel = max(rel, c.releases[i])
		arr = max(arr, c.arrivals[i])
	}
	return ot, rel, arr
}

// signals gives every job its signals (largest count over its waits against
// the thresholds), adds them to its group and returns the starving jobs to
// list, ordered: longest wait first, then job ID. With a limit, only the best
// candidates are kept (a bounded heap), so that ordering costs O(n log limit)
// however many jobs are starving. A job stuck at the report end (StuckJob)
// gets no signal: it is counted and returned as stuck instead; keys are the
// group key maps.
func (c *computer) signals(keys []map[string]string) ([]candidate, []stuckCand) {
	h := &candHeap{c: c, limit: c.opts.StarvingLimit}
	var stuck []stuckCand
	for j := range c.jobs {
		ag := &c.aggs[c.jobs[j].group]
		if i := c.stuckWait(j); i >= 0 {
			ag.stuck++
			jb := &c.in.Jobs[j]
			stuck = append(stuck, stuckCand{job: jb.ID, key: keys[c.jobs[j].group], queue: jb.Queue, tier: jb.Tier.String(),
				pool: jb.Pool, project: jb.Project, reason: c.reasons.names[c.lastRsn[j]],
				start: c.waits[i].a, length: c.waitLen(i)})
			continue
		}
		ot, rel, arr := c.jobCounts(j)
		var bits uint8
		if int(ot) >= c.opts.OvertakenThreshold {
			bits |= sigOvertaken
			ag.overtaken++
		}
		if int(rel) >= c.opts.StarvationReleases {
			bits |= sigReleases
			ag.released++
		}
		if int(arr) >= c.opts.TierArrivalThreshold {
			bits |= sigArrivals
			ag.tierStarved++
		}
		if bits == 0 {
			continue
		}
		ag.starving++
		// A wait with a count overlaps the window, so the job has a best wait.
		h.offer(candidate{waitLen: c.waitLen(c.bestWait[j]), job: int32(j), signals: bits})
	}
	slices.SortFunc(h.items, func(a, b candidate) int {
		switch {
		case a.job == b.job:
			return 0
		case c.ranksBefore(a, b):
			return -1
		}
		return 1 // job IDs are unique, so distinct candidates never tie
	})
	return h.items, stuck
}

// ranksBefore reports whether starving job a is listed before b.
func (c *computer) ranksBefore(a, b candidate) bool {
	if a.waitLen != b.waitLen {
		return a.waitLen > b.waitLen
	}
	return c.in.Jobs[a.job].ID < c.in.Jobs[b.job].ID
}

// candHeap keeps the best limit candidates (all when limit < 0), the
// lowest-ranked at the root so it is the one replaced.
type candHeap struct {
	c     *computer
	limit int
	items []candidate
}

// Len, Less, Swap, Push and Pop implement heap.Interface.
func (h *candHeap) Len() int           { return len(h.items) }
func (h *candHeap) Less(i, j int) bool { return h.c.ranksBefore(h.items[j], h.items[i]) }
func (h *candHeap) Swap(i, j int)      { h.items[i], h.items[j] = h.items[j], h.items[i] }
func (h *candHeap) Push(x any)         { h.items = append(h.items, x.(candidate)) }
func (h *candHeap) Pop() any {
	x := h.items[len(h.items)-1]
	h.items = h.items[:len(h.items)-1]
	return x
}

// offer adds cd if the list has room or cd ranks before the worst kept.
func (h *candHeap) offer(cd candidate) {
	switch {
	case h.limit < 0:
		h.items = append(h.items, cd)
	case len(h.items) < h.limit:
		heap.Push(h, cd)
	case h.c.ranksBefore(cd, h.items[0]):
		h.items[0] = cd
		heap.Fix(h, 0)
	}
}

// starvingList describes the listed starving jobs; keys are the group key maps.
func (c *computer) starvingList(cands []candidate, keys []map[string]string) []StarvingJob {
	out := make([]StarvingJob, len(cands))
	for k, cd := range cands {
		j := &c.in.Jobs[cd.job]
		w := &c.waits[c.bestWait[cd.job]]
		_, ongoing := c.effEnd(w)
		ot, rel, arr := c.jobCounts(int(cd.job))
		out[k] = StarvingJob{
			JobID: j.ID, Key: keys[c.jobs[cd.job].group], Queue: j.Queue, Tier: j.Tier.String(),
			Pool: j.Pool, Project: j.Project, State: j.State,
			WaitStart: time.Unix(0, w.a).UTC(), WaitS: float64(cd.waitLen) / 1e9, WaitOngoing: ongoing,
			Signals: signalNames[cd.signals], Overtaken: int(ot), Releases: int(rel), HigherTierArrivals: int(arr),
		}
		if rid := c.lastRsn[cd.job]; rid >= 0 {
			out[k].LastReason = c.reasons.names[rid]
		}
	}
	return out
}

// merge adds group b to a (for the total).
func (a *agg) merge(b *agg, c *computer) {
	a.jobs += b.jobs
	a.submitted += b.submitted
	a.cancelled += b.cancelled
	// b's samples are sorted; the total reads them as sorted lists (kthOf)
	// rather than copying and sorting them all again.
	a.initialLists = append(a.initialLists, b.initial)
	a.requeueLists = append(a.requeueLists, b.requeue)
	if b.longest >= 0 && c.longer(b.longest, a.longest) {
		a.longest = b.longest
	}
	a.stillWaiting += b.stillWaiting
	a.overObjective += b.overObjective
	a.waitsEnded += b.waitsEnded
	a.cancelledWhileWaited += b.cancelledWhileWaited
	a.gpu.merge(b.gpu)
	for len(a.reasons) < len(b.reasons) {
		a.reasons = append(a.reasons, reasonAcc{})
	}
	for i, s := range b.reasons {
		a.reasons[i].merge(s)
	}
	a.starving += b.starving
	a.overtaken += b.overtaken
	a.released += b.released
	a.tierStarved += b.tierStarved
	a.stuck += b.stuck
}

// group converts an accumulator to its Group; den is the GPU-seconds the
// service share is relative to.
func (c *computer) group(ag *agg, key map[string]string, den secAcc) Group {
	initial, requeue := ag.initialLists, ag.requeueLists
	if initial == nil { // a group: its own samples, sorted by report
		initial, requeue = [][]int64{ag.initial}, [][]int64{ag.requeue}
	}
	g := Group{
		Key: key, Jobs: ag.jobs, Submitted: ag.submitted, Cancelled: ag.cancelled,
		StillWaiting: ag.stillWaiting, JobsOverObjective: ag.overObjective,
		WaitsEnded: ag.waitsEnded, CancelledWhileWaiting: ag.cancelledWhileWaited,
		GPUSeconds:        ag.gpu.seconds() / scheduling.MilliPerGPU,
		WaitReasonSeconds: map[string]float64{},
		StarvingJobs:      ag.starving, OvertakenJobs: ag.overtaken,
		ReleaseStarvedJobs: ag.released, TierStarvedJobs: ag.tierStarved, StuckJobs: ag.stuck,
	}
	g.Started, g.WaitP50S, g.WaitP95S, g.WaitP99S, g.WaitMaxS = waitStats(initial)
	g.RequeueStarts, g.RequeueWaitP50S, g.RequeueWaitP95S, g.RequeueWaitP99S, g.RequeueWaitMaxS = waitStats(requeue)
	if c.opts.WaitHistogram {
		g.WaitHistogram = waitHistogram(initial)
	}
	if ag.longest >= 0 {
		w := &c.waits[ag.longest]
		_, ongoing := c.effEnd(w)
		g.LongestWaitS = secondsPtr(c.waitLen(ag.longest))
		g.LongestWaitJobID = c.in.Jobs[w.job].ID
		g.LongestWaitOngoing = ongoing
	}
	if ag.waitsEnded > 0 {
		g.CancellationRate = floatPtr(float64(ag.cancelledWhileWaited) / float64(ag.waitsEnded))
	}
	if !den.isZero() {
		g.ServiceShare = floatPtr(ag.gpu.seconds() / den.seconds())
	}
	for rid, s := range ag.reasons {
		if !s.job.isZero() {
			g.WaitReasonSeconds[c.reasons.names[rid]] = s.job.seconds()
		}
	}
	return g
}

// keyMap returns the group-by values of key by key name.
func (c *computer) keyMap(k groupKey) map[string]string {
	m := make(map[string]string, len(c.opts.GroupBy))
	for d, name := range GroupKeys {
		if c.grouped[d] {
			m[name] = c.keyValue(k, d)
		}
	}
	return m
}

// keyValue returns dimension d's value of key k as written in reports.
func (c *computer) keyValue(k groupKey, d int) string {
	switch d {
	case 0:
		return c.queues.names[k[0]]
	case 1:
		return vocab.Tier(k[1]).String()
	case 2:
		return c.jobTypes.names[k[2]]
	case 3:
		return c.pools.names[k[3]]
	default:
		return c.projects.names[k[4]]
	}
}

// compareKeys orders groups by their values in canonical dimension order;
// tiers sort highest first, everything else alphabetically.
func (c *computer) compareKeys(a, b groupKey) int {
	for d := range GroupKeys {
		if !c.grouped[d] {
			continue
		}
		if d == 1 {
			if a[1] != b[1] {
				return cmp.Compare(b[1], a[1])
			}
			continue
		}
		if r := cmp.Compare(c.keyValue(a, d), c.keyValue(b, d)); r != 0 {
			return r
		}
	}
	return 0
}

// shareDen returns the GPU-seconds a group's service share is relative to:
// its pool's when the report is grouped by pool, else the report's.
func (c *computer) shareDen(k groupKey, total secAcc) secAcc {
	if c.grouped[3] {
		return c.poolGPU[k[3]]
	}
	return total
}

// setTarget sets the target share of a group grouped by queue and compares it
// with the whole queue's delivered share in the same scope (its pool when
// grouped by pool), so that a queue split by job type or project is judged as
// a whole, and every row of it shows the same comparison.
func (c *computer) setTarget(g *Group, k groupKey, total secAcc) {
	if !c.grouped[0] {
		return
	}
	t := c.target[k[0]]
	if math.IsNaN(t) {
		return
	}
	g.TargetShare = floatPtr(t)
	den, delivered := c.shareDen(k, total), c.queueGPU[k[0]]
	if c.grouped[3] {
		delivered = c.queuePoolGPU[int(k[0])*len(c.pools.names)+int(k[3])]
	}
	if t > 0 && !den.isZero() {
		g.ShareVsTarget = floatPtr(delivered.seconds() / den.seconds() / t)
	}
}
