package queuereport

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/gpugov/gpugov/internal/scheduling"
)

// A Summary holds what a report needs from one segment [From, To) of a
// window, in a form that adds up: the report over [a, c) is
// Assemble(Merge(Summarize(in, [a, b)), Summarize(in, [b, c)))), equal to
// Compute(in, [a, c)). A service that keeps summaries of past hours or days
// (whose records no longer change) computes a long window's report from a
// few of them and fresh summaries of the window's ends, instead of reading
// and computing every record again.
//
// Per group (at the summary's grouping) a summary keeps the counts of
// events in the segment (submits, cancellations, waits ended), the wait
// samples ended in it (sorted), GPU-seconds and wait-reason seconds clipped
// to it, the jobs alive at its start, the waits still open at its end, and
// the longest unlisted wait that ended in (From, To] or was open at To.
//
// Waits that are open (at To, or with no end at all), or closed after
// lasting at least the summary's MinWait, are listed one by one with their
// starvation counts inside the segment; they are the only waits that can be over a wait objective or
// carry a starvation signal when MinWait ≤ RequiredMinWait (see there), so
// the job-level metrics (jobs over objective, signals, the starving list)
// are computed from the listed waits alone.
type Summary struct {
	from, to int64    // the segment, ns since the Unix epoch
	groupBy  []string // canonical order
	minWait  int64    // ns
	groups   []sumGroup
	dims     [][5]string // the dimension values of listed waits' jobs (sumWait.dims)
	waits    []sumWait   // sorted by compareWaits
}

// sumGroup is one group's part of a Summary.
type sumGroup struct {
	key                  [5]string // values of the grouped dimensions (GroupKeys order), "" elsewhere
	alive, zeroAtFrom    int       // jobs alive at From; jobs submitted and ended at From
	submitted, cancelled int
	initial, requeue     []int64 // wait samples ended in the segment, ns, sorted
	waitsEnded, cww      int     // waits ended by a start or a cancellation; by a cancellation
	gpu                  secAcc  // milli-GPU-ns
	reasons              []reasonSec
	ongoing              int     // waits open at To
	bestClosed           waitRef // longest unlisted wait ended in (From, To]
	bestOngoing          waitRef // longest unlisted wait open at To, measured to To
}

// reasonSec is the time spent in one wait reason: sec in job-ns, gpu in
// milli-GPU-ns (reasonAcc).
type reasonSec struct {
	reason string
	sec    secAcc
	gpu    secAcc
}

// waitRef names a wait by its measured length, start and job; job is ""
// for none.
type waitRef struct {
	length, start int64
	job           string
}

// better reports whether a ranks before b as "longest": longer, then earlier
// start, then smaller job ID (the order Compute uses). An empty b loses.
func (a waitRef) better(b waitRef) bool {
	switch {
	case a.job == "":
		return false
	case b.job == "":
		return true
	case a.length != b.length:
		return a.length > b.length
	case a.start != b.start:
		return a.start < b.start
	}
	return a.job < b.job
}

// sumWait is one listed wait: its job, the job's dimensions, its span and
// its starvation counts inside the segment.
type sumWait struct {
	job          string
	dims         int32 // index in Summary.dims: queue, tier, job type, pool, project (GroupKeys order)
	start, end   int64 // end is noTime while open
	requeue      bool
	ot, rel, arr int32
}

// compareWaits orders listed waits by job, start and kind (initial first),
// which identify a wait across summaries.
func compareWaits(a, b *sumWait) int {
	if r := strings.Compare(a.job, b.job); r != 0 {
		return r
	}
	if r := cmp.Compare(a.start, b.start); r != 0 {
		return r
	}
	switch {
	case a.requeue == b.requeue:
		return 0
	case b.requeue:
		return -1
	}
	return 1
}

// Seg returns the segment the summary covers.
func (s *Summary) Seg() Window {
	return Window{From: time.Unix(0, s.from).UTC(), To: time.Unix(0, s.to).UTC()}
}

// MinWait returns the length from which closed waits are listed one by one.
func (s *Summary) MinWait() time.Duration { return time.Duration(s.minWait) }

// GroupBy returns the summary's grouping (canonical order).
func (s *Summary) GroupBy() []string { return slices.Clone(s.groupBy) }

// RequiredMinWait returns the largest Summary MinWait a report with opts and
// targets can be assembled from: the shortest wait that can be over a
// queue's objective or carry a starvation signal, which is the smallest of
// the starvation floor (Options.StarvationMinWaitS; 0 with
// NoStarvationMinWait) and every positive queue objective. It returns an
// error for options Compute would reject.
func RequiredMinWait(opts Options, targets []QueueTarget) (time.Duration, error) {
	o, err := opts.normalized()
	if err != nil {
		return 0, err
	}
	m := o.starvationFloor(0)
	for _, t := range targets {
		if t.MaxWait > 0 {
			m = min(m, int64(t.MaxWait))
		}
	}
	return time.Duration(m), nil
}

// Summarize computes the summary of seg from in, read at now, grouped by
// groupBy (nil: DefaultGroupBy), listing the waits that are open or lasted at
// least minWait. in must hold every record Compute would need for a window
// equal to seg (every job alive in it with all its runs, the wait events
// and releases in it). now must not be before seg.To: a summary covers only
// observed time. Errors are Compute's, or name the bad argument.
func Summarize(in Input, seg Window, now time.Time, groupBy []string, minWait time.Duration) (*Summary, error) {
	if now.Before(seg.To) {
		return nil, fmt.Errorf("summarize: now (%s) is before the segment's end (%s)", now.Format(time.RFC3339Nano), seg.To.Format(time.RFC3339Nano))
	}
	if minWait < 0 {
		return nil, fmt.Errorf("summarize: min wait must not be negative, got %s", minWait)
	}
	if groupBy == nil {
		groupBy = DefaultGroupBy
	}
	c, err := run(in, Options{Window: seg, Now: now, GroupBy: groupBy, StarvationMinWaitS: NoStarvationMinWait})
	if err != nil {
		return nil, err
	}
	s := &Summary{from: c.from, to: c.end, groupBy: c.opts.GroupBy, minWait: int64(minWait)}
	s.groups = make([]sumGroup, len(c.aggs))
	for g := range c.aggs {
		s.groups[g] = c.sumGroup(&c.aggs[g])
	}
	c.sumJobs(s)
	c.sumWaits(s)
	return s, nil
}

// run computes every per-record quantity of a report over opts.Window: the
// steps of Compute before the groups are turned into a Report.
func run(in Input, opts Options) (*computer, error) {
	o, err := opts.normalized()
	if err != nil {
		return nil, err
	}
	c := &computer{
		in: in, opts: o, from: o.Window.From.UnixNano(),
		end:   min(o.Window.To.UnixNano(), o.Now.UnixNano()),
		pools: newInterner(), queues: newInterner(), jobTypes: newInterner(),
		projects: newInterner(), reasons: newInterner(), msets: newModelSets(),
		classIdx: make(map[[2]int64]int32), groupIdx: make(map[groupKey]int32),
	}
	for i, k := range GroupKeys {
		c.grouped[i] = slices.Contains(o.GroupBy, k)
	}
	for _, step := range []func() error{c.loadTargets, c.loadJobs, c.loadRuns, c.buildWaits, c.loadWaitEvents} {
		if err := step(); err != nil {
			return nil, err
		}
	}
	c.prepareStarvation()
	c.aggregateWaits()
	c.aggregateRuns()
	c.countOvertaking()
	return c, nil
}

// sumGroup copies the additive part of one group's accumulator.
func (c *computer) sumGroup(ag *agg) sumGroup {
	g := sumGroup{
		submitted: ag.submitted, cancelled: ag.cancelled,
		initial: ag.initial, requeue: ag.requeue,
		waitsEnded: ag.waitsEnded, cww: ag.cancelledWhileWaited,
		gpu: ag.gpu, ongoing: ag.stillWaiting,
	}
	slices.Sort(g.initial)
	slices.Sort(g.requeue)
	for d := range GroupKeys {
		if c.grouped[d] {
			g.key[d] = c.keyValue(ag.key, d)
		}
	}
	for rid, r := range ag.reasons {
		if !r.job.isZero() {
			g.reasons = append(g.reasons, reasonSec{reason: c.reasons.names[rid], sec: r.job, gpu: r.gpu})
		}
	}
	slices.SortFunc(g.reasons, func(a, b reasonSec) int { return cmp.Compare(a.reason, b.reason) })
	return g
}

// sumJobs counts the jobs alive at the segment's start: submitted before it
// and not ended at or before it (Compute's "jobs" of a window that starts
// there, less those submitted in it), and those submitted and ended exactly
// at it, which a window starting there does not count.
func (c *computer) sumJobs(s *Summary) {
	for j := range c.jobs {
		jr := &c.jobs[j]
		g := &s.groups[jr.group]
		switch {
		case jr.submit < c.from && (jr.end == noTime || jr.end > c.from):
			g.alive++
		case jr.submit == c.from && jr.end == c.from:
			g.zeroAtFrom++
		}
	}
}

// sumWaits lists the open and long waits overlapping the segment, sorted by
// job and start, and keeps, per group, the longest of the others.
func (c *computer) sumWaits(s *Summary) {
	dimIdx := map[[5]string]int32{}
	for i := range c.waits {
		w := &c.waits[i]
		eff, ongoing := c.effEnd(w)
		if eff <= c.from {
			continue // does not overlap the segment
		}
		jr := &c.jobs[w.job]
		g := &s.groups[jr.group]
		// A wait still open at the segment's end is listed even when its
		// recorded end comes later (a window that ends before now): the
		// report's stuck jobs are decided on the open waits at its end.
		if w.how == endOpen || ongoing || w.b-w.a >= s.minWait {
			dims := c.jobDims(w.job)
			d, ok := dimIdx[dims]
			if !ok {
				d = int32(len(s.dims))
				dimIdx[dims] = d
				s.dims = append(s.dims, dims)
			}
			sw := sumWait{job: c.in.Jobs[w.job].ID, dims: d, start: w.a, end: noTime, requeue: w.requeue,
				ot: c.overtaken[i], rel: c.releases[i], arr: c.arrivals[i]}
			if w.how != endOpen {
				sw.end = w.b
			}
			s.waits = append(s.waits, sw)
			continue
		}
		ref := waitRef{length: eff - w.a, start: w.a, job: c.in.Jobs[w.job].ID}
		if ongoing {
			if ref.better(g.bestOngoing) {
				g.bestOngoing = ref
			}
		} else if ref.better(g.bestClosed) {
			g.bestClosed = ref
		}
	}
	slices.SortFunc(s.waits, func(a, b sumWait) int { return compareWaits(&a, &b) })
}

// jobDims returns job j's value of every group-by dimension.
func (c *computer) jobDims(j int32) [5]string {
	job := &c.in.Jobs[j]
	return [5]string{job.Queue, job.Tier.String(), job.JobType, job.Pool, job.Project}
}

// Merge combines the summaries of consecutive segments into the summary of
// their union. They must be given in time order, each starting where the
// previous one ends, with the same grouping and MinWait. The parts are not
// changed.
func Merge(parts ...*Summary) (*Summary, error) {
	if len(parts) == 0 {
		return nil, fmt.Errorf("merge summaries: none given")
	}
	first, last := parts[0], parts[len(parts)-1]
	for k := 1; k < len(parts); k++ {
		p, q := parts[k-1], parts[k]
		switch {
		case q.from != p.to:
			return nil, fmt.Errorf("merge summaries: part %d starts at %s, not where part %d ends (%s)",
				k, time.Unix(0, q.from).UTC().Format(time.RFC3339Nano), k-1, time.Unix(0, p.to).UTC().Format(time.RFC3339Nano))
		case !slices.Equal(q.groupBy, first.groupBy):
			return nil, fmt.Errorf("merge summaries: part %d is grouped by %v, part 0 by %v", k, q.groupBy, first.groupBy)
		case q.minWait != first.minWait:
			return nil, fmt.Errorf("merge summaries: part %d lists waits from %s, part 0 from %s", k, time.Duration(q.minWait), time.Duration(first.minWait))
		}
	}
	m := &Summary{from: first.from, to: last.to, groupBy: slices.Clone(first.groupBy), minWait: first.minWait}
	m.groups = mergeGroups(parts, func(k [5]string) [5]string { return k })
	dimIdx := map[[5]string]int32{}
	for cur := newWaitCursor(parts); ; {
		w, dims, ok := cur.next()
		if !ok {
			break
		}
		d, seen := dimIdx[*dims]
		if !seen {
			d = int32(len(m.dims))
			dimIdx[*dims] = d
			m.dims = append(m.dims, *dims)
		}
		w.dims = d
		m.waits = append(m.waits, w)
	}
	return m, nil
}

// mergeGroups merges the groups of consecutive parts, keyed by project(key):
// the start counts come from the first part, the end counts from the last,
// everything else adds up. The result is sorted by key.
func mergeGroups(parts []*Summary, project func([5]string) [5]string) []sumGroup {
	idx := map[[5]string]int{}
	var out []sumGroup
	lists := map[int][2][][]int64{}
	for k, p := range parts {
		for gi := range p.groups {
			src := &p.groups[gi]
			key := project(src.key)
			i, ok := idx[key]
			if !ok {
				i = len(out)
				idx[key] = i
				out = append(out, sumGroup{key: key})
			}
			dst := &out[i]
			if k == 0 {
				dst.alive += src.alive
				dst.zeroAtFrom += src.zeroAtFrom
			}
			if k == len(parts)-1 {
				dst.ongoing += src.ongoing
				if src.bestOngoing.better(dst.bestOngoing) {
					dst.bestOngoing = src.bestOngoing
				}
			}
			dst.submitted += src.submitted
			dst.cancelled += src.cancelled
			dst.waitsEnded += src.waitsEnded
			dst.cww += src.cww
			dst.gpu.merge(src.gpu)
			dst.reasons = mergeReasons(dst.reasons, src.reasons)
			if src.bestClosed.better(dst.bestClosed) {
				dst.bestClosed = src.bestClosed
			}
			l := lists[i]
			l[0], l[1] = append(l[0], src.initial), append(l[1], src.requeue)
			lists[i] = l
		}
	}
	for i, l := range lists {
		out[i].initial, out[i].requeue = mergeSorted(l[0]), mergeSorted(l[1])
	}
	slices.SortFunc(out, func(a, b sumGroup) int { return slices.Compare(a.key[:], b.key[:]) })
	return out
}

// mergeReasons adds b's reason times to a (both sorted by reason).
func mergeReasons(a, b []reasonSec) []reasonSec {
	for _, r := range b {
		i, ok := slices.BinarySearchFunc(a, r.reason, func(x reasonSec, name string) int { return cmp.Compare(x.reason, name) })
		if ok {
			a[i].sec.merge(r.sec)
			a[i].gpu.merge(r.gpu)
		} else {
			a = slices.Insert(a, i, r)
		}
	}
	return a
}

// mergeSorted returns the union of sorted lists, sorted. A single list is
// returned as is (shared, never written).
func mergeSorted(lists [][]int64) []int64 {
	n, nonEmpty := 0, 0
	var only []int64
	for _, l := range lists {
		if len(l) > 0 {
			n += len(l)
			nonEmpty++
			only = l
		}
	}
	if nonEmpty <= 1 {
		return only
	}
	out := make([]int64, 0, n)
	for _, l := range lists {
		out = append(out, l...)
	}
	tmp := make([]int64, n)
	if sorted := sortInt64s(out, tmp); &sorted[0] != &out[0] {
		return sorted
	}
	return out
}

// waitCursor walks the listed waits of consecutive parts in compareWaits order,
// merging the records of one wait: counts add up, and a wait closed in any
// part is closed (a later part knows more). Every part's waits are sorted, so
// this is a k-way merge: no map, no sort of all the waits.
type waitCursor struct {
	parts []*Summary
	pos   []int
	heap  []int // parts with waits left, the smallest head first
}

func newWaitCursor(parts []*Summary) *waitCursor {
	c := &waitCursor{parts: parts, pos: make([]int, len(parts))}
	for p := range parts {
		if len(parts[p].waits) > 0 {
			c.push(p)
		}
	}
	return c
}

// head returns part p's current wait.
func (c *waitCursor) head(p int) *sumWait { return &c.parts[p].waits[c.pos[p]] }

func (c *waitCursor) less(i, j int) bool {
	return compareWaits(c.head(c.heap[i]), c.head(c.heap[j])) < 0
}

func (c *waitCursor) push(p int) {
	c.heap = append(c.heap, p)
	for i := len(c.heap) - 1; i > 0; {
		up := (i - 1) / 2
		if !c.less(i, up) {
			break
		}
		c.heap[i], c.heap[up] = c.heap[up], c.heap[i]
		i = up
	}
}

// pop removes and returns the part with the smallest head.
func (c *waitCursor) pop() int {
	top := c.heap[0]
	last := len(c.heap) - 1
	c.heap[0] = c.heap[last]
	c.heap = c.heap[:last]
	for i := 0; ; {
		l, r, m := 2*i+1, 2*i+2, i
		if l < len(c.heap) && c.less(l, m) {
			m = l
		}
		if r < len(c.heap) && c.less(r, m) {
			m = r
		}
		if m == i {
			break
		}
		c.heap[i], c.heap[m] = c.heap[m], c.heap[i]
		i = m
	}
	return top
}

// advance moves part p past its current wait.
func (c *waitCursor) advance(p int) {
	c.pos[p]++
	if c.pos[p] < len(c.parts[p].waits) {
		c.push(p)
	}
}

// next returns the next wait, merged over the parts that list it, with its
// job's dimension values; false when none is left.
func (c *waitCursor) next() (sumWait, *[5]string, bool) {
	if len(c.heap) == 0 {
		return sumWait{}, nil, false
	}
	p := c.pop()
	w := *c.head(p)
	dims := &c.parts[p].dims[w.dims]
	c.advance(p)
	for len(c.heap) > 0 && compareWaits(c.head(c.heap[0]), &w) == 0 {
		q := c.pop()
		o := c.head(q)
		w.ot += o.ot
		w.rel += o.rel
		w.arr += o.arr
		if w.end == noTime {
			w.end = o.end
		}
		c.advance(q)
	}
	return w, dims, true
}

// JobDetail is what a report lists about a starving job that summaries do
// not keep: its current state and the reason of its latest wait event that
// started before the report end (ties: the alphabetically first reason),
// among the events overlapping the window or ending at its start.
type JobDetail struct {
	State      string
	LastReason string
}

// DetailFunc returns the details of the given jobs (the jobs whose wait is
// open at the report end, to decide which are stuck, then the listed starving
// jobs not asked before); a job it leaves out gets empty fields.
type DetailFunc func(jobIDs []string) (map[string]JobDetail, error)

// Assemble computes the report over opts.Window from the summaries of
// consecutive segments that cover exactly [Window.From, min(Window.To, Now)),
// with the queues' targets read at the same time, and asks details for the
// last reason of the jobs still waiting at the end (which decides the stuck
// jobs) and the state and last reason of the starving jobs it lists. It gives Compute's
// report on the same records. Errors: bad options (as Compute), summaries
// that do not cover the window, are not grouped by every key opts.GroupBy
// names or by pool (the reason shares are per pool), or list waits only
// from longer than RequiredMinWait, bad targets, or details' error. base
// holds the pools' capacity and the project weights the shares need.
func Assemble(opts Options, targets []QueueTarget, base ShareBase, parts []*Summary, details DetailFunc) (Report, error) {
	o, err := opts.normalized()
	if err != nil {
		return Report{}, err
	}
	m, err := mergeShallow(parts)
	if err != nil {
		return Report{}, err
	}
	end := min(o.Window.To.UnixNano(), o.Now.UnixNano())
	if m.from != o.Window.From.UnixNano() || m.to != end {
		return Report{}, fmt.Errorf("assemble: the summaries cover %s – %s, not the window's %s – %s",
			time.Unix(0, m.from).UTC().Format(time.RFC3339Nano), time.Unix(0, m.to).UTC().Format(time.RFC3339Nano),
			o.Window.From.Format(time.RFC3339Nano), time.Unix(0, end).UTC().Format(time.RFC3339Nano))
	}
	for _, k := range append([]string{KeyPool}, o.GroupBy...) { // the reason shares are per pool
		if !slices.Contains(m.groupBy, k) {
			return Report{}, fmt.Errorf("assemble: group_by %s: the summaries are grouped by %v only", k, m.groupBy)
		}
	}
	need, err := RequiredMinWait(o, targets)
	if err != nil {
		return Report{}, err
	}
	if m.minWait > int64(need) {
		return Report{}, fmt.Errorf("assemble: the summaries list waits from %s, longer than the %s this report needs", time.Duration(m.minWait), need)
	}
	a, err := newAssembler(o, targets, end)
	if err != nil {
		return Report{}, err
	}
	a.addGroups(m)
	a.pools = summaryPoolTimes(m)
	a.addWaits(parts)
	r, err := a.report(details)
	if err == nil {
		setShares(&r, targets, base)
	}
	return r, err
}

// mergeShallow merges the parts' groups, leaving the waits to a waitCursor.
func mergeShallow(parts []*Summary) (*Summary, error) {
	bare := make([]*Summary, len(parts))
	for i, p := range parts {
		q := *p
		q.dims, q.waits = nil, nil
		bare[i] = &q
	}
	return Merge(bare...)
}

// assembler turns a merged summary into a Report.
type assembler struct {
	opts    Options
	end     int64
	grouped [5]bool
	maxWait map[string]int64   // per queue, ns
	target  map[string]float64 // per queue, normalised share
	groups  []sumGroup         // at the report's grouping, sorted by key
	gidx    map[[5]string]int
	extra   []groupExtra // per group: what the listed waits add
	cands   []starvCand
	byDims  map[*[5]string]jobClass
	// open holds the jobs whose last listed wait is open at the report end,
	// with that wait: their signals wait until their latest reason tells
	// whether they are stuck (resolveOpen).
	open  []openCand
	stuck []stuckCand
	det   map[string]JobDetail // details already asked for, by job ID
	pools []poolTime           // per pool: the reason times of the reason shares
}

// openCand is a job whose last wait is open at the report end.
type openCand struct {
	c    starvCand
	last sumWait
}

// groupExtra is a group's job-level metrics, computed from the listed waits.
type groupExtra struct {
	longest         waitRef
	longestOngoing  bool
	overObjective   int
	starving, ot    int
	released, tierS int
	stuck           int
}

// starvCand is a starving job.
type starvCand struct {
	job          string
	dims         [5]string
	group        int
	best         sumWait
	bestLen      int64
	ongoing      bool
	bits         uint8
	ot, rel, arr int32
}

func newAssembler(o Options, targets []QueueTarget, end int64) (*assembler, error) {
	a := &assembler{opts: o, end: end, maxWait: map[string]int64{}, target: map[string]float64{}}
	for i, k := range GroupKeys {
		a.grouped[i] = slices.Contains(o.GroupBy, k)
	}
	var sum float64
	for _, t := range targets {
		if _, dup := a.maxWait[t.Queue]; dup {
			return nil, fmt.Errorf("targets: queue %q given twice", t.Queue)
		}
		if t.ServiceShare < 0 || math.IsNaN(t.ServiceShare) || math.IsInf(t.ServiceShare, 0) {
			return nil, fmt.Errorf("targets: queue %q: service_share must be a finite number ≥ 0, got %v", t.Queue, t.ServiceShare)
		}
		if t.MaxWait < 0 {
			return nil, fmt.Errorf("targets: queue %q: max_wait must not be negative", t.Queue)
		}
		if err := t.checkShares(); err != nil {
			return nil, err
		}
		a.maxWait[t.Queue] = int64(t.MaxWait)
		sum += t.ServiceShare
	}
	if sum > 0 {
		for _, t := range targets {
			a.target[t.Queue] = t.ServiceShare / sum
		}
	}
	return a, nil
}

// project keeps the values of the report's grouping.
func (a *assembler) project(k [5]string) [5]string {
	var out [5]string
	for d := range k {
		if a.grouped[d] {
			out[d] = k[d]
		}
	}
	return out
}

// addGroups regroups the summary's groups at the report's grouping, keeping
// the finer groups for the service-share denominators.
func (a *assembler) addGroups(m *Summary) {
	a.groups = mergeGroups([]*Summary{m}, a.project)
	a.gidx = make(map[[5]string]int, len(a.groups))
	for i, g := range a.groups {
		a.gidx[g.key] = i
	}
	a.extra = make([]groupExtra, len(a.groups))
	for i := range a.groups {
		g := &a.groups[i]
		e := &a.extra[i]
		e.longest = g.bestClosed
		if g.bestOngoing.better(e.longest) {
			e.longest, e.longestOngoing = g.bestOngoing, true
		}
	}
}

// addWaits computes the job-level metrics from the listed waits of the
// parts: each job's longest wait, whether it is over its queue's objective,
// and its starvation signals over the waits that reach its floor.
func (a *assembler) addWaits(parts []*Summary) {
	var job []sumWait
	var dims *[5]string
	a.byDims = map[*[5]string]jobClass{}
	for cur := newWaitCursor(parts); ; {
		w, d, ok := cur.next()
		if len(job) > 0 && (!ok || w.job != job[0].job) {
			a.addJob(job, dims)
			job = job[:0]
		}
		if !ok {
			return
		}
		job, dims = append(job, w), d
	}
}

// jobClass is what a job's dimension values decide: its group, its queue's
// objective and its starvation floor.
type jobClass struct {
	group          int
	maxWait, floor int64
}

// class returns the class of jobs with dimension values d, remembered by the
// address of d (one per part and distinct values), which is cheaper than
// hashing the values for every job.
func (a *assembler) class(d *[5]string) jobClass {
	if c, ok := a.byDims[d]; ok {
		return c
	}
	mw := a.maxWait[d[0]]
	c := jobClass{group: a.gidx[a.project(*d)], maxWait: mw, floor: a.opts.starvationFloor(mw)}
	a.byDims[d] = c
	return c
}

// addJob adds one job's listed waits (at least one); d are its dimension values.
func (a *assembler) addJob(ws []sumWait, d *[5]string) {
	dims := *d
	cl := a.class(d)
	gi, mw, floor := cl.group, cl.maxWait, cl.floor
	e := &a.extra[gi]
	c := starvCand{job: ws[0].job, dims: dims, group: gi, bestLen: -1}
	for _, w := range ws {
		length, ongoing := a.measure(&w)
		ref := waitRef{length: length, start: w.start, job: w.job}
		if c.bestLen < 0 || ref.better(waitRef{length: c.bestLen, start: c.best.start, job: w.job}) {
			c.best, c.bestLen, c.ongoing = w, length, ongoing
		}
		if length >= floor {
			c.ot, c.rel, c.arr = max(c.ot, w.ot), max(c.rel, w.rel), max(c.arr, w.arr)
		}
	}
	ref := waitRef{length: c.bestLen, start: c.best.start, job: c.job}
	if ref.better(e.longest) {
		e.longest, e.longestOngoing = ref, c.ongoing
	}
	if mw > 0 && c.bestLen > mw {
		e.overObjective++
	}
	if last := ws[len(ws)-1]; last.end == noTime || last.end > a.end {
		a.open = append(a.open, openCand{c: c, last: last})
		return
	}
	a.countSignals(c)
}

// countSignals gives starvation candidate c its signals against the
// thresholds and adds them to its group.
func (a *assembler) countSignals(c starvCand) {
	e := &a.extra[c.group]
	if int(c.ot) >= a.opts.OvertakenThreshold {
		c.bits |= sigOvertaken
		e.ot++
	}
	if int(c.rel) >= a.opts.StarvationReleases {
		c.bits |= sigReleases
		e.released++
	}
	if int(c.arr) >= a.opts.TierArrivalThreshold {
		c.bits |= sigArrivals
		e.tierS++
	}
	if c.bits != 0 {
		e.starving++
		a.cands = append(a.cands, c)
	}
}

// measure returns a listed wait's length to its end or the report end, and
// whether it was still open at the report end.
func (a *assembler) measure(w *sumWait) (int64, bool) {
	if w.end == noTime || w.end > a.end {
		return a.end - w.start, true
	}
	return w.end - w.start, false
}

// report builds the Report: groups in key order, the total, and the listed
// starving jobs with their details.
func (a *assembler) report(details DetailFunc) (Report, error) {
	keys := make([]map[string]string, len(a.groups))
	for i, g := range a.groups {
		keys[i] = a.keyMap(g.key)
	}
	order := make([]int, len(a.groups))
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(x, y int) int { return compareKeyMaps(keys[x], keys[y]) })
	if err := a.resolveOpen(keys, details); err != nil {
		return Report{}, err
	}
	starving, err := a.starving(keys, details)
	if err != nil {
		return Report{}, err
	}
	r := Report{Options: a.opts, End: time.Unix(0, a.end).UTC(), Groups: make([]Group, 0, len(a.groups)), Starving: starving,
		Stuck: stuckList(a.stuck, a.opts.StarvingLimit), ReasonShares: reasonShares(a.pools)}
	var total sumGroup
	var totalExtra groupExtra
	var initial, requeue [][]int64
	pool, queue, queuePool := map[string]secAcc{}, map[string]secAcc{}, map[[2]string]secAcc{}
	for _, i := range order {
		g, e := &a.groups[i], &a.extra[i]
		addTotal(&total, &totalExtra, g, e)
		initial, requeue = append(initial, g.initial), append(requeue, g.requeue)
		addShare(pool, g.key[3], g.gpu)
		addShare(queue, g.key[0], g.gpu)
		qp := queuePool[[2]string{g.key[0], g.key[3]}]
		qp.merge(g.gpu)
		queuePool[[2]string{g.key[0], g.key[3]}] = qp
	}
	r.Total = a.group(&total, &totalExtra, map[string]string{}, initial, requeue, total.gpu)
	if len(a.opts.GroupBy) == 0 {
		return r, nil
	}
	for _, i := range order {
		g := &a.groups[i]
		den := total.gpu
		if a.grouped[3] {
			den = pool[g.key[3]]
		}
		grp := a.group(g, &a.extra[i], keys[i], [][]int64{g.initial}, [][]int64{g.requeue}, den)
		if a.grouped[0] {
			delivered := queue[g.key[0]]
			if a.grouped[3] {
				delivered = queuePool[[2]string{g.key[0], g.key[3]}]
			}
			a.setTarget(&grp, g.key[0], delivered, den)
		}
		r.Groups = append(r.Groups, grp)
	}
	return r, nil
}

func addShare(m map[string]secAcc, k string, v secAcc) {
	s := m[k]
	s.merge(v)
	m[k] = s
}

// addTotal adds group g to the total.
func addTotal(t *sumGroup, te *groupExtra, g *sumGroup, e *groupExtra) {
	t.alive += g.alive
	t.zeroAtFrom += g.zeroAtFrom
	t.submitted += g.submitted
	t.cancelled += g.cancelled
	t.waitsEnded += g.waitsEnded
	t.cww += g.cww
	t.gpu.merge(g.gpu)
	t.reasons = mergeReasons(t.reasons, g.reasons)
	t.ongoing += g.ongoing
	if e.longest.better(te.longest) {
		te.longest, te.longestOngoing = e.longest, e.longestOngoing
	}
	te.overObjective += e.overObjective
	te.starving += e.starving
	te.ot += e.ot
	te.released += e.released
	te.tierS += e.tierS
	te.stuck += e.stuck
}

// group builds one Group as Compute's group does; den is the GPU-seconds the
// service share is relative to.
func (a *assembler) group(g *sumGroup, e *groupExtra, key map[string]string, initial, requeue [][]int64, den secAcc) Group {
	out := Group{
		Key: key, Jobs: g.alive + g.submitted - g.zeroAtFrom, Submitted: g.submitted, Cancelled: g.cancelled,
		StillWaiting: g.ongoing, JobsOverObjective: e.overObjective,
		WaitsEnded: g.waitsEnded, CancelledWhileWaiting: g.cww,
		GPUSeconds:        g.gpu.seconds() / scheduling.MilliPerGPU,
		WaitReasonSeconds: make(map[string]float64, len(g.reasons)),
		StarvingJobs:      e.starving, OvertakenJobs: e.ot, ReleaseStarvedJobs: e.released, TierStarvedJobs: e.tierS,
		StuckJobs: e.stuck,
	}
	out.Started, out.WaitP50S, out.WaitP95S, out.WaitP99S, out.WaitMaxS = waitStats(initial)
	out.RequeueStarts, out.RequeueWaitP50S, out.RequeueWaitP95S, out.RequeueWaitP99S, out.RequeueWaitMaxS = waitStats(requeue)
	if a.opts.WaitHistogram {
		out.WaitHistogram = waitHistogram(initial)
	}
	if e.longest.job != "" {
		out.LongestWaitS = secondsPtr(e.longest.length)
		out.LongestWaitJobID = e.longest.job
		out.LongestWaitOngoing = e.longestOngoing
	}
	if g.waitsEnded > 0 {
		out.CancellationRate = floatPtr(float64(g.cww) / float64(g.waitsEnded))
	}
	if !den.isZero() {
		out.ServiceShare = floatPtr(g.gpu.seconds() / den.seconds())
	}
	for _, r := range g.reasons {
		if !r.sec.isZero() {
			out.WaitReasonSeconds[r.reason] = r.sec.seconds()
		}
	}
	return out
}

// setTarget sets a queue group's target share and compares the whole
// queue's delivered share in the same scope with it (Compute's setTarget).
func (a *assembler) setTarget(g *Group, q string, delivered, den secAcc) {
	t, ok := a.target[q]
	if !ok {
		return
	}
	g.TargetShare = floatPtr(t)
	if t > 0 && !den.isZero() {
		g.ShareVsTarget = floatPtr(delivered.seconds() / den.seconds() / t)
	}
}

// keyMap returns a group key by key name, for the report's grouping.
func (a *assembler) keyMap(k [5]string) map[string]string {
	m := make(map[string]string, len(a.opts.GroupBy))
	for d, name := range GroupKeys {
		if a.grouped[d] {
			m[name] = k[d]
		}
	}
	return m
}

// starving orders the starving jobs (longest wait first, then job ID), keeps
// the first StarvingLimit and describes them, asking details for what the
// summaries do not hold.
func (a *assembler) starving(keys []map[string]string, details DetailFunc) ([]StarvingJob, error) {
	slices.SortFunc(a.cands, func(x, y starvCand) int {
		if x.bestLen != y.bestLen {
			return cmp.Compare(y.bestLen, x.bestLen)
		}
		return strings.Compare(x.job, y.job)
	})
	if lim := a.opts.StarvingLimit; lim >= 0 && len(a.cands) > lim {
		a.cands = a.cands[:lim]
	}
	out := make([]StarvingJob, len(a.cands))
	if len(out) == 0 {
		return out, nil
	}
	ids := make([]string, 0, len(a.cands))
	for _, c := range a.cands {
		if _, ok := a.det[c.job]; !ok {
			ids = append(ids, c.job)
		}
	}
	if err := a.askDetails(ids, details); err != nil {
		return nil, err
	}
	for i, c := range a.cands {
		d := a.det[c.job]
		out[i] = StarvingJob{
			JobID: c.job, Key: keys[c.group], Queue: c.dims[0], Tier: c.dims[1], Pool: c.dims[3], Project: c.dims[4],
			State: d.State, WaitStart: time.Unix(0, c.best.start).UTC(), WaitS: float64(c.bestLen) / 1e9,
			WaitOngoing: c.ongoing, LastReason: d.LastReason, Signals: signalNames[c.bits],
			Overtaken: int(c.ot), Releases: int(c.rel), HigherTierArrivals: int(c.arr),
		}
	}
	return out, nil
}

// askDetails asks details for the jobs of ids and keeps the answers in
// a.det; a nil details answers nothing.
func (a *assembler) askDetails(ids []string, details DetailFunc) error {
	if a.det == nil {
		a.det = map[string]JobDetail{}
	}
	if details == nil || len(ids) == 0 {
		return nil
	}
	det, err := details(ids)
	if err != nil {
		return err
	}
	for id, d := range det {
		a.det[id] = d
	}
	return nil
}

// resolveOpen decides, for every job whose last wait is open at the report
// end, whether it is stuck (its latest reason earns no aging: StuckJob) —
// counted and listed as stuck, with no signal — or gets its starvation
// signals as any other job, as Compute decides it. The latest reasons come
// from details (JobDetail.LastReason), asked once for all of these jobs.
func (a *assembler) resolveOpen(keys []map[string]string, details DetailFunc) error {
	ids := make([]string, len(a.open))
	for i, o := range a.open {
		ids[i] = o.c.job
	}
	if err := a.askDetails(ids, details); err != nil {
		return err
	}
	for _, o := range a.open {
		reason := a.det[o.c.job].LastReason
		if !stuckReason(reason) {
			a.countSignals(o.c)
			continue
		}
		a.extra[o.c.group].stuck++
		d := o.c.dims
		length, _ := a.measure(&o.last)
		a.stuck = append(a.stuck, stuckCand{job: o.c.job, key: keys[o.c.group], queue: d[0], tier: d[1], pool: d[3],
			project: d[4], reason: reason, start: o.last.start, length: length})
	}
	return nil
}
