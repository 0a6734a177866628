package accounting

import (
	"time"

	"github.com/gpugov/gpugov/internal/vocab"
)

// WaitState is what segmentation needs of one pending job's wait events, as
// the store holds them.
type WaitState struct {
	// Open is true when the job has an open wait event (ended_at NULL);
	// Reason and Detail are that event's.
	Open   bool
	Reason vocab.WaitReason
	Detail string
	// WaitingSince is when the job's current wait began: its submit, or the
	// release that requeued it (jobs.waiting_since).
	WaitingSince time.Time
	// LastEnded is the end of the job's latest closed wait event; the zero
	// time when it has none.
	LastEnded time.Time
}

// WaitChanged reports whether a cycle's wait status for a pending job opens a
// new wait event: when the job has no open event, or the open event's reason
// differs. One continuous wait for one reason is one event however its
// detail's quantities change (docs/design.md §1, wait events): a status with
// the open event's reason extends it (WaitRefreshed says whether its text is
// rewritten).
func WaitChanged(open bool, curReason, reason vocab.WaitReason) bool {
	return !open || curReason != reason
}

// WaitRefreshed reports whether a status that WaitChanged does not call a
// change rewrites the open event's text in place: its detail differs from
// the event's. The event keeps its start. The store's events also hold the
// re-evaluation condition and the blocking job, which the simulator's do
// not, and it refreshes on a change of those too (store.ApplyCycle), so its
// refresh count (CycleOutcome.WaitRefreshes) can exceed the simulator's;
// events' starts, ends and reasons are the same on both sides.
func WaitRefreshed(curDetail, detail string) bool {
	return curDetail != detail
}

// NotYetEvaluatedSince returns the start of the closed vocab.ReasonNotYetEvaluated
// event a cycle at now writes for a job it evaluates (gives a reason or
// places) while the job has no open wait event: the later of WaitingSince
// and LastEnded. ok is false when no such event is due: the job has an open
// event (it was evaluated before), or that start is not before now.
func NotYetEvaluatedSince(st WaitState, now time.Time) (since time.Time, ok bool) {
	if st.Open {
		return time.Time{}, false
	}
	since = st.WaitingSince
	if st.LastEnded.After(since) {
		since = st.LastEnded
	}
	return since, since.Before(now)
}

// CloseAt is the end a wait event opened at start gets when it is closed at
// at: at, or start when at is before it, so that an event never ends before
// it began.
func CloseAt(start, at time.Time) time.Time {
	if at.Before(start) {
		return start
	}
	return at
}

// WaitStep is what one cycle's outcome does to a pending job's wait events,
// all at the cycle's instant now, in this order.
type WaitStep struct {
	// NotYetEvaluated is true when a closed vocab.ReasonNotYetEvaluated event
	// [NotYetEvaluatedFrom, now) is written first.
	NotYetEvaluated     bool
	NotYetEvaluatedFrom time.Time
	// Close is true when the open event is closed (at CloseAt(its start, now)).
	Close bool
	// Open is true when a new event for the status's reason and detail opens at now.
	Open bool
	// Refresh is true when the open event continues (same reason) and takes
	// the status's detail in place, keeping its start (WaitRefreshed).
	Refresh bool
}

// WaitTransition decides what a cycle at now does to a pending job's wait
// events, as the store's ApplyCycle does: a placement (placed true) writes
// the not-yet-evaluated event when due and closes the open event; a wait
// status whose reason WaitChanged calls a change writes the not-yet-evaluated
// event when due, closes the open event and opens one for the new status; a
// status with the open event's reason only refreshes its detail when that
// differs (WaitRefreshed), and otherwise does nothing. The simulator calls it
// as a whole; the store applies its two parts where it holds the rows they
// read: WaitChanged before it updates the job rows, NotYetEvaluatedSince
// after the update has locked them (store.ApplyCycle).
func WaitTransition(st WaitState, placed bool, reason vocab.WaitReason, detail string, now time.Time) WaitStep {
	if !placed && !WaitChanged(st.Open, st.Reason, reason) {
		return WaitStep{Refresh: WaitRefreshed(st.Detail, detail)}
	}
	var s WaitStep
	if since, ok := NotYetEvaluatedSince(st, now); ok {
		s.NotYetEvaluated, s.NotYetEvaluatedFrom = true, since
	}
	s.Close = st.Open
	s.Open = !placed
	return s
}
