package scheduling

import (
	"math"
	"strconv"

	"github.com/gpugov/gpugov/internal/vocab"
)

// Queue service shares (docs/design.md §4, "Queue service shares"): a
// queue's MinShare and MaxShare are fractions of each pool's usable GPUs.
// A queue's use of a pool is the milli-GPU of its running jobs' allocations
// there plus this cycle's placements; an allocation whose job is not in
// Snapshot.Running has no known queue and counts against none.

// shareRow is one queue's share accounting in one pool for a cycle.
type shareRow struct {
	queue    *Queue
	pool     *poolState
	poolCap  int64 // the pool's usable milli-GPU (healthy GPUs on schedulable nodes)
	minMilli int64 // MinShare × poolCap, rounded; 0 when the queue has no minimum
	maxMilli int64 // MaxShare × poolCap, rounded; −1 when the queue has no cap
	used     int64 // milli-GPU the queue holds in the pool, this cycle's placements included
}

// belowMin reports whether the queue holds less than its guaranteed minimum.
func (r *shareRow) belowMin() bool { return r != nil && r.minMilli > 0 && r.used < r.minMilli }

// shareState is every (queue, pool) row of a cycle; nil when no queue of
// the snapshot has a MinShare or a MaxShare.
type shareState struct {
	rows    map[[2]string]*shareRow // by (queue, pool)
	hasMin  bool                    // some queue has a MinShare: Plan orders in two passes
	poolCap map[*poolState]int64
	last    *shareRow // the row entryRow returned last (pending jobs come in runs of one queue)
}

// newShareState builds the rows of the queues with shares and charges the
// running jobs' allocations to them; nil when no queue has a share.
func newShareState(s *Snapshot, queues map[string]*Queue, ci *capacityIndex) *shareState {
	var shares, hasMin bool
	for i := range s.Queues {
		if q := &s.Queues[i]; queues[q.Name] == q { // the first queue of a name is the one Plan uses
			shares = shares || q.MinShare > 0 || q.MaxShare > 0
			hasMin = hasMin || q.MinShare > 0
		}
	}
	if !shares {
		return nil
	}
	ss := &shareState{rows: make(map[[2]string]*shareRow), poolCap: make(map[*poolState]int64), hasMin: hasMin}
	for i := range s.Running {
		r := &s.Running[i]
		if q := queues[r.Queue]; q != nil && (q.MinShare > 0 || q.MaxShare > 0) {
			if ps := ci.pools[allocationPool(&r.Allocation, ci)]; ps != nil {
				ss.row(q, ps).used += allocationMilli(&r.Allocation)
			}
		}
	}
	return ss
}

// row returns the row of queue q in pool ps, creating it.
func (ss *shareState) row(q *Queue, ps *poolState) *shareRow {
	key := [2]string{q.Name, ps.name}
	if r, ok := ss.rows[key]; ok {
		return r
	}
	pc, ok := ss.poolCap[ps]
	if !ok {
		for i := range ps.gpus {
			if ps.gpus[i].usable {
				pc += MilliPerGPU
			}
		}
		ss.poolCap[ps] = pc
	}
	r := &shareRow{queue: q, pool: ps, poolCap: pc, maxMilli: -1}
	if q.MinShare > 0 {
		r.minMilli = int64(math.Round(q.MinShare * float64(pc)))
	}
	if q.MaxShare > 0 {
		r.maxMilli = int64(math.Round(math.Min(q.MaxShare, 1) * float64(pc)))
	}
	ss.rows[key] = r
	return r
}

// entryRow returns the row of a pending job's queue in its pool, or nil when
// the queue has no share (or the snapshot none).
func (ss *shareState) entryRow(queues map[string]*Queue, queue string, ps *poolState) *shareRow {
	if ss == nil || ps == nil {
		return nil
	}
	if r := ss.last; r != nil && r.pool == ps && r.queue.Name == queue {
		return r
	}
	q := queues[queue]
	if q == nil || (q.MinShare <= 0 && q.MaxShare <= 0) {
		return nil
	}
	ss.last = ss.row(q, ps)
	return ss.last
}

// overCap reports whether need more milli-GPU would take the queue past its cap.
func (r *shareRow) overCap(need int64) bool {
	return r != nil && r.maxMilli >= 0 && need > 0 && r.used+need > r.maxMilli
}

// charge adds a placement of this cycle to the queue's use.
func (r *shareRow) charge(milli int64) {
	if r != nil {
		r.used += milli
	}
}

// appendGPUs renders milli-GPU as GPUs: "16", "2.5".
func appendGPUs(b []byte, milli int64) []byte {
	b = strconv.AppendInt(b, milli/MilliPerGPU, 10)
	if frac := milli % MilliPerGPU; frac != 0 {
		s := strconv.FormatFloat(float64(frac)/MilliPerGPU, 'f', -1, 64)
		b = append(b, s[1:]...) // ".5"
	}
	return b
}

// appendShare renders "queue experiment at its max_share 0.25 of pool a100: 16 of 64 GPUs".
func (r *shareRow) appendShare(b []byte, what string, share float64, milli int64) []byte {
	b = append(b, "queue "...)
	b = append(b, r.queue.Name...)
	b = append(b, what...)
	b = strconv.AppendFloat(b, share, 'g', -1, 64)
	b = append(b, " of pool "...)
	b = append(b, r.pool.name...)
	b = append(b, ": "...)
	b = appendGPUs(b, milli)
	b = append(b, " of "...)
	b = appendGPUs(b, r.poolCap)
	return append(b, " GPUs"...)
}

// capStatus explains a job its queue's cap holds back (quota_exhausted).
func (r *shareRow) capStatus(need int64) (string, string) {
	b := make([]byte, 0, 200)
	b = r.appendShare(b, " at its max_share ", r.queue.MaxShare, r.maxMilli)
	b = append(b, "; the queue holds "...)
	b = appendGPUs(b, r.used)
	b = append(b, " GPUs there and the job needs "...)
	b = appendGPUs(b, need)
	b = append(b, " more"...)
	pool := r.pool.name
	if need > r.maxMilli {
		b = append(b, "; the request alone is larger than the cap"...)
		return string(b), "when queue " + r.queue.Name + "'s max_share is raised to fit the request in pool " + pool +
			"; waiting will not help"
	}
	re := make([]byte, 0, 120)
	re = append(re, "when queue "...)
	re = append(re, r.queue.Name...)
	re = append(re, " holds at most "...)
	re = appendGPUs(re, r.maxMilli-need)
	re = append(re, " GPUs in pool "...)
	re = append(re, pool...)
	re = append(re, " or its max_share is raised"...)
	return string(b), string(re)
}

// boostNote is Priority.MinShareBoost for a job served first because its
// queue is below its minimum.
func (r *shareRow) boostNote() string {
	b := make([]byte, 0, 120)
	b = r.appendShare(b, " below its min_share ", r.queue.MinShare, r.minMilli)
	b = append(b, " guaranteed, "...)
	b = appendGPUs(b, r.used)
	b = append(b, " in use"...)
	return string(b)
}

// firstPass reports whether a job is served in the first pass: production
// jobs keep their place ahead of everything, and a job whose queue is below
// its minimum in the job's pool joins them.
func (je *jobEntry) firstPass() bool {
	return je.tier == vocab.TierProduction || je.share.belowMin()
}
