package workflows

import "sync"

// StartLedger is the set of jobs whose JobWorkflow this process saw Temporal
// accept (a start answered with a run, or "already started"): the reconciler
// skips them, so that a pass costs one Temporal call per job whose start is
// in doubt — answered 202, failed, or made by another process or an earlier
// run of this one — instead of one per pending job (docs/design.md §3, step
// 1 "Submit"). A workflow once started stays until it
// closes, and a closed one is never started again (JobStartOptions), so a
// recorded job needs no further start. Keys are job IDs. Each reconcile pass
// drops the jobs it did not list as pending (finished, or placed at the time)
// unless they were confirmed during the pass, so the ledger holds about the
// pending jobs, not every job ever started; a job dropped while placed and
// later requeued costs one more start call. The zero value is ready; it is
// safe for concurrent use; a nil *StartLedger records nothing.
type StartLedger struct {
	mu         sync.Mutex
	generation uint64            // the current reconcile pass
	started    map[string]uint64 // job ID → generation it was last confirmed or listed in
}

// Confirm records that jobID's workflow exists.
func (l *StartLedger) Confirm(jobID string) {
	if l == nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.started == nil {
		l.started = map[string]uint64{}
	}
	l.started[jobID] = l.generation
}

// Confirmed reports whether jobID's workflow is known to exist.
func (l *StartLedger) Confirmed(jobID string) bool {
	if l == nil {
		return false
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	_, ok := l.started[jobID]
	return ok
}

// Len is the number of jobs recorded.
func (l *StartLedger) Len() int {
	if l == nil {
		return 0
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.started)
}

// beginPass starts a reconcile pass and returns its generation.
func (l *StartLedger) beginPass() uint64 {
	if l == nil {
		return 0
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.generation++
	return l.generation
}

// listed reports whether the pending job jobID is recorded, and keeps it
// through the pass's endPass if so.
func (l *StartLedger) listed(jobID string) bool {
	if l == nil {
		return false
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, ok := l.started[jobID]; !ok {
		return false
	}
	l.started[jobID] = l.generation
	return true
}

// endPass drops the jobs neither listed nor confirmed since pass gen began.
// A pass that did not list every pending job (its store read failed) must not
// call it.
func (l *StartLedger) endPass(gen uint64) {
	if l == nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	for id, g := range l.started {
		if g < gen {
			delete(l.started, id)
		}
	}
}
