package replay

import (
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/gpugov/gpugov/api"
	"github.com/gpugov/gpugov/internal/vocab"
)

// tracker holds what the replay knows about its jobs; the dispatcher, the
// cancellations and the poll loop update it concurrently.
type tracker struct {
	mu          sync.Mutex
	byID        map[string]*trackedJob
	order       []*trackedJob // in submission order
	rejected    []Rejection
	cancelErrs  []string
	live        progressCounts
	dispatched  bool          // every submission and cancellation is done
	settleTime  time.Duration // how long the live jobs must stay unchanged to be settled
	prevKey     string        // the live jobs' states at the previous look after dispatch
	looks       int           // looks since dispatch finished
	stableSince time.Time     // when prevKey was first seen
	settled     bool
}

// trackedJob is one submitted job.
type trackedJob struct {
	sub   *Submission
	jobID string
	// seenStart is the instant the job's allocation was granted (updated_at
	// while placed) or its run started (updated_at while running, before any
	// checkpoint), as first seen by a look; nil when no look caught it.
	seenStart *time.Time
}

// Rejection is a submission the API refused.
type Rejection struct {
	Pod   string
	Error string
}

// progressCounts are the counts of one progress line.
type progressCounts struct {
	submitted, rejected                     int
	unseen, waiting, placed, running, ended int
}

func newTracker(n int, settleTime time.Duration) *tracker {
	return &tracker{byID: make(map[string]*trackedJob, n), settleTime: settleTime}
}

func (t *tracker) submitted(s *Submission, job *api.Job) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if _, dup := t.byID[job.ID]; dup {
		return // two pods cannot share a key; a repeat is the same job
	}
	tj := &trackedJob{sub: s, jobID: job.ID}
	t.byID[job.ID] = tj
	t.order = append(t.order, tj)
}

func (t *tracker) reject(s *Submission, err error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.rejected = append(t.rejected, Rejection{Pod: s.Key, Error: err.Error()})
}

// cancelled records the outcome of a cancellation; only failures are kept.
func (t *tracker) cancelled(err error) {
	if err == nil {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.cancelErrs = append(t.cancelErrs, err.Error())
}

// markDispatched notes that nothing more will be submitted or cancelled; the
// settling check starts from the next look.
func (t *tracker) markDispatched() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.dispatched = true
	t.looks, t.prevKey = 0, ""
}

// observe takes one look's live jobs at now: it records first-seen starts,
// the progress counts, and whether the jobs have settled — after dispatch,
// every live job of the replay waits with a reason and nothing changed for
// settleTime (long enough for the scheduler's timer to have run a cycle, so
// that a reason given just before a release is not taken as final), or none
// is left.
func (t *tracker) observe(live []api.Job, now time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	c := progressCounts{submitted: len(t.order), rejected: len(t.rejected)}
	var key []string
	allWaiting := true
	for i := range live {
		j := &live[i]
		tj := t.byID[j.ID]
		if tj == nil {
			continue
		}
		reason := ""
		if j.Explanation != nil {
			reason = j.Explanation.Reason
		}
		switch j.State {
		case vocab.JobSubmitted:
			c.unseen++
			c.waiting++
			allWaiting = false
		case vocab.JobWaiting:
			c.waiting++
			allWaiting = allWaiting && reason != ""
		case vocab.JobPlaced:
			c.placed++
			allWaiting = false
		case vocab.JobRunning:
			c.running++
			allWaiting = false
		}
		tj.noteStart(j)
		key = append(key, j.ID+"="+string(j.State)+"/"+reason)
	}
	c.ended = len(t.order) - c.waiting - c.placed - c.running
	t.live = c
	if !t.dispatched {
		return
	}
	slices.Sort(key)
	k := strings.Join(key, ",")
	t.looks++
	if t.looks == 1 || k != t.prevKey {
		t.prevKey, t.stableSince = k, now
	}
	// With no live job left nothing can change any more.
	t.settled = len(key) == 0 || (allWaiting && now.Sub(t.stableSince) >= t.settleTime)
}

// noteStart records the first start instant a look can see: updated_at is
// the placement instant while the job is placed and the run's start while it
// runs — until a checkpoint or a cancel request moves it.
func (tj *trackedJob) noteStart(j *api.Job) {
	if tj.seenStart != nil || j.CancelRequested {
		return
	}
	if j.State == vocab.JobPlaced || (j.State == vocab.JobRunning && j.Recovery.LastCheckpoint == nil) {
		at := j.UpdatedAt
		tj.seenStart = &at
	}
}

func (t *tracker) isSettled() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.settled
}

func (t *tracker) progress() progressCounts {
	t.mu.Lock()
	defer t.mu.Unlock()
	c := t.live
	c.submitted, c.rejected = len(t.order), len(t.rejected)
	return c
}
