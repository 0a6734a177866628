package accounting

import (
	"time"

	"github.com/gpugov/gpugov/internal/vocab"
)

// AgingClock is a pending job's eligible wait: the seconds it waited for
// GPUs, which alone earn aging credit (docs/design.md §1, wait reasons:
// vocab.ReasonInfo.EarnsAging). Time in a reason that asks somebody to act —
// held, environment_not_ready, pool_unavailable, no_matching_capacity —
// pauses the clock. The store keeps it as jobs.accrued_aging_s and
// jobs.aging_since, the simulator in its job records; both advance it with
// the methods below at the same instants (submit or requeue, each
// scheduling cycle's wait status, placement), so their credits agree.
type AgingClock struct {
	// AccruedS is the eligible seconds of the stretches already closed: earlier
	// waits (kept across preemption requeues) and the paused-off parts of
	// this wait.
	AccruedS float64
	// Since is the start of the current eligible stretch; the zero time while
	// the clock is paused (or the job is not pending).
	Since time.Time
}

// Running reports whether the clock counts time now (a current eligible stretch).
func (c AgingClock) Running() bool { return !c.Since.IsZero() }

// EligibleS returns the eligible wait seconds at now: AccruedS plus the
// current stretch (now − Since, none when now is before Since or paused).
func (c AgingClock) EligibleS(now time.Time) float64 {
	if c.Running() && now.After(c.Since) {
		return c.AccruedS + now.Sub(c.Since).Seconds()
	}
	return c.AccruedS
}

// Start starts an eligible stretch at at (submit, requeue, or a reason that
// earns aging); a running clock is left as it is.
func (c AgingClock) Start(at time.Time) AgingClock {
	if !c.Running() {
		c.Since = at
	}
	return c
}

// Stop closes the current stretch at at, carrying it into AccruedS (a
// placement, or a reason that earns no aging); a paused clock is left as it is.
func (c AgingClock) Stop(at time.Time) AgingClock {
	if c.Running() {
		c.AccruedS, c.Since = c.EligibleS(at), time.Time{}
	}
	return c
}

// OnReason applies a scheduling cycle's wait status at now: a reason that
// earns aging starts (or keeps) the clock, any other stops it. Applying the
// same reason again changes nothing, so it may run on every cycle or only
// on wait-event transitions with the same result.
func (c AgingClock) OnReason(r vocab.WaitReason, now time.Time) AgingClock {
	if r.EarnsAging() {
		return c.Start(now)
	}
	return c.Stop(now)
}
