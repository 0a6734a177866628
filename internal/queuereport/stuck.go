package queuereport

import (
	"cmp"
	"slices"
	"strings"
	"time"

	"github.com/gpugov/gpugov/internal/vocab"
)

// StuckJob is one job that is stuck, needing action, at the report end: its
// last wait is still open and the reason of its latest wait event
// (StarvingJob.LastReason's definition) is one that earns no aging —
// held, environment_not_ready, pool_unavailable, no_matching_capacity
// (vocab.ReasonInfo.EarnsAging). Waiting will not end such a wait, so the
// job carries no starvation signal and is listed here instead, with its owner
// (the project) and the reason's next action (docs/design.md §1 and §6).
type StuckJob struct {
	JobID   string            `json:"job_id"`
	Key     map[string]string `json:"key"` // the job's group key (shared with its Group: read-only)
	Queue   string            `json:"queue"`
	Tier    string            `json:"tier"`
	Pool    string            `json:"pool"`
	Project string            `json:"project"` // the owner, who is asked to act (or an operator, for pool_unavailable)
	Reason  string            `json:"reason"`
	Action  string            `json:"action"` // the reason's next action (vocab.WaitReason.NextAction)
	// WaitStart is the start of the open wait and WaitS its length to the
	// report end, in seconds.
	WaitStart time.Time `json:"wait_start"`
	WaitS     float64   `json:"wait_s"`
}

// stuckReason reports whether a job whose latest wait event has reason name
// is stuck when its wait is open: a known reason that earns no aging.
func stuckReason(name string) bool {
	r := vocab.WaitReason(name)
	return r.Known() && !r.EarnsAging()
}

// stuckCand is a stuck job before listing: its open wait's start and length
// (ns) and its reason.
type stuckCand struct {
	job           string
	key           map[string]string
	queue, tier   string
	pool, project string
	reason        string
	start, length int64
}

// stuckList orders the stuck jobs (longest wait first, then job ID) and
// keeps the first limit of them (all when limit is NoStarvingLimit): the
// same order and limit as the starving list.
func stuckList(cands []stuckCand, limit int) []StuckJob {
	slices.SortFunc(cands, func(a, b stuckCand) int {
		if a.length != b.length {
			return cmp.Compare(b.length, a.length)
		}
		return strings.Compare(a.job, b.job)
	})
	if limit >= 0 && len(cands) > limit {
		cands = cands[:limit]
	}
	out := make([]StuckJob, len(cands))
	for i, c := range cands {
		out[i] = StuckJob{JobID: c.job, Key: c.key, Queue: c.queue, Tier: c.tier, Pool: c.pool, Project: c.project,
			Reason: c.reason, Action: vocab.WaitReason(c.reason).NextAction(),
			WaitStart: time.Unix(0, c.start).UTC(), WaitS: float64(c.length) / 1e9}
	}
	return out
}

// stuckWait returns the index of job j's open last wait when the job is
// stuck at the report end, or -1.
func (c *computer) stuckWait(j int) int32 {
	n := c.waitCount[j]
	if n == 0 || c.lastRsn[j] < 0 || !stuckReason(c.reasons.names[c.lastRsn[j]]) {
		return -1
	}
	i := c.waitFirst[j] + n - 1
	if _, ongoing := c.effEnd(&c.waits[i]); !ongoing {
		return -1
	}
	return i
}
