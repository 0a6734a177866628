// Package governance holds gpugov's pure reclaim decisions: the
// classification of an allocation from its evidence, and the mode a finding
// is handled in (the effective-run-loss formula is internal/accounting's).
// Their configuration (each pool's automation stage, the low-risk queues,
// protection windows, the reclaim scan and its modes) is the policy's
// (internal/policy). It imports neither Temporal nor pgx.
package governance

import (
	"fmt"
	"time"

	"github.com/gpugov/gpugov/internal/policy"
	"github.com/gpugov/gpugov/internal/vocab"
)

// Sample is one utilisation measurement of one GPU (store.GPUSample's fields
// the classification needs).
type Sample struct {
	GPUUUID    string
	At         time.Time
	GPUPercent int
}

// Evidence is what the reclaim scan knows about one active allocation.
type Evidence struct {
	AllocationID string
	JobID        string
	Project      string
	Queue        string
	Tier         string // the job's tier name
	Pool         string
	Node         string
	GPUs         float64               // GPU equivalents held (milli-GPU / 1000)
	GPUUUIDs     []string              // the GPUs the allocation holds a share of
	Stage        vocab.AutomationStage // the pool's automation stage
	// Reclaimed is true when a reclaim is already recorded for the
	// allocation (one reclaim per allocation; the scan skips it).
	Reclaimed bool
	JobState  vocab.JobState
	// Protected is true when the job or its queue is protected.
	Protected bool
	GrantedAt time.Time
	// RunID is the allocation's run; "" when none started.
	RunID        string
	RunStartedAt time.Time
	RunEndedAt   *time.Time
	RunOutcome   vocab.RunOutcome // "" while running
	// LastCheckpointAt is the time of the run's newest checkpoint: progress.
	LastCheckpointAt *time.Time
	// LastHeartbeatAt is when the run's executor last heartbeated (its run
	// activity's last heartbeat as Temporal reports it); nil when unknown
	// (no pending run activity, or none heartbeated yet).
	LastHeartbeatAt *time.Time
	// Samples are the utilisation samples of GPUUUIDs in the observation window.
	Samples []Sample
}

// Finding is an allocation the scan would reclaim: its class and the basis,
// a sentence with the quantities, for the record and the owner's notice.
type Finding struct {
	Class vocab.ReclaimClass
	Basis string
}

// Classify decides whether the allocation is reclaimable at now and why.
// In order: completed (its run succeeded or its job did, yet the GPUs are
// held), failed (its run ended otherwise, its job failed or was cancelled, no
// run started within the observation window of the grant, or its run's
// executor has not heartbeated for longer than the observation window — the
// agent crashed or lost contact), idle (its run
// has been going for the whole window, made no checkpoint in it, and every
// GPU it holds has utilisation samples spanning the window all at or below
// the idle threshold; missing samples are no evidence of idleness, and
// protected jobs, queues and windows are never idle). It returns false when
// the allocation is not reclaimable.
func Classify(ev *Evidence, c *policy.Policy, now time.Time) (Finding, bool) {
	window := policy.Seconds(c.Reclaim.ObservationWindowSeconds)
	switch {
	case ev.RunOutcome == vocab.RunSucceeded || ev.JobState == vocab.JobSucceeded:
		return Finding{vocab.ClassCompleted, fmt.Sprintf("run %s succeeded%s but %.3g GPU(s) are still held", orNone(ev.RunID),
			endedText(ev.RunEndedAt), ev.GPUs)}, true
	case ev.RunEndedAt != nil:
		return Finding{vocab.ClassFailed, fmt.Sprintf("run %s ended %s%s but %.3g GPU(s) are still held", ev.RunID, ev.RunOutcome,
			endedText(ev.RunEndedAt), ev.GPUs)}, true
	case ev.JobState == vocab.JobFailed || ev.JobState == vocab.JobCancelled:
		return Finding{vocab.ClassFailed, fmt.Sprintf("job is %s but %.3g GPU(s) are still held", ev.JobState, ev.GPUs)}, true
	case ev.RunID == "" && now.Sub(ev.GrantedAt) >= window:
		return Finding{vocab.ClassFailed, fmt.Sprintf("granted at %s, no run started within the %s observation window",
			ev.GrantedAt.UTC().Format(time.RFC3339), window)}, true
	case heartbeatLost(ev, now, window):
		return Finding{vocab.ClassFailed, fmt.Sprintf("run %s has not heartbeated for %s (last heartbeat at %s), longer than the %s observation window: its executor is lost but %.3g GPU(s) are still held",
			ev.RunID, now.Sub(*ev.LastHeartbeatAt).Round(time.Second), ev.LastHeartbeatAt.UTC().Format(time.RFC3339), window, ev.GPUs)}, true
	}
	if basis, ok := idle(ev, c, now, window); ok {
		return Finding{vocab.ClassIdle, basis}, true
	}
	return Finding{}, false
}

// heartbeatLost reports whether the allocation's run is still going but its
// executor's last known heartbeat is older than the observation window.
func heartbeatLost(ev *Evidence, now time.Time, window time.Duration) bool {
	return ev.RunID != "" && ev.RunEndedAt == nil && ev.LastHeartbeatAt != nil && now.Sub(*ev.LastHeartbeatAt) > window
}

// HeartbeatAge returns how long before now the run last heartbeated, and
// false when that is unknown.
func (ev *Evidence) HeartbeatAge(now time.Time) (time.Duration, bool) {
	if ev.LastHeartbeatAt == nil {
		return 0, false
	}
	return now.Sub(*ev.LastHeartbeatAt), true
}

// idle applies the idle rule; see Classify.
func idle(ev *Evidence, c *policy.Policy, now time.Time, window time.Duration) (string, bool) {
	from := now.Add(-window)
	switch {
	case ev.RunID == "" || ev.Protected || c.InProtectionWindow(ev.Queue, now) != "":
		return "", false
	case ev.RunStartedAt.After(from):
		return "", false
	case ev.LastCheckpointAt != nil && !ev.LastCheckpointAt.Before(from):
		return "", false
	case len(ev.GPUUUIDs) == 0:
		return "", false
	}
	// Samples must span the window on every GPU: the first within a quarter
	// window of its start, the last within a quarter window of now.
	slack := window / 4
	peak := 0
	for _, uuid := range ev.GPUUUIDs {
		var first, last time.Time
		for _, s := range ev.Samples {
			if s.GPUUUID != uuid || s.At.Before(from) {
				continue
			}
			if first.IsZero() || s.At.Before(first) {
				first = s.At
			}
			if s.At.After(last) {
				last = s.At
			}
			if s.GPUPercent > c.Reclaim.IdleGPUPercent {
				return "", false
			}
			peak = max(peak, s.GPUPercent)
		}
		if first.IsZero() || first.After(from.Add(slack)) || last.Before(now.Add(-slack)) {
			return "", false
		}
	}
	return fmt.Sprintf("run %s has made no checkpoint and its %d GPU(s) stayed at or below %d%% utilisation (peak %d%%) for the %s observation window",
		ev.RunID, len(ev.GPUUUIDs), c.Reclaim.IdleGPUPercent, peak, window), true
}

func orNone(s string) string {
	if s == "" {
		return "(none)"
	}
	return s
}

func endedText(t *time.Time) string {
	if t == nil {
		return ""
	}
	return " at " + t.UTC().Format(time.RFC3339)
}

// ModeDecision is the mode a finding is handled in and why.
type ModeDecision struct {
	Mode       vocab.ReclaimMode
	Configured vocab.ReclaimMode // what the rules say, before stage and protection
	Stage      vocab.AutomationStage
	Why        string
}

// DecideMode gives a finding's mode from the policy's reclaim rules and the
// pool's stage: observe (or an unknown stage) records only (report); trial
// acts only on the policy's low-risk queues and reports the rest; protected
// work is never released without an operator (confirm) unless it is only
// reported.
func DecideMode(c *policy.Policy, stage vocab.AutomationStage, pool, queue string, class vocab.ReclaimClass, protected bool) ModeDecision {
	d := ModeDecision{Configured: c.ConfiguredMode(pool, queue, class), Stage: stage}
	switch {
	case stage != vocab.StageTrial && stage != vocab.StageAutomate:
		d.Mode, d.Why = vocab.ModeReport, fmt.Sprintf("pool %s is in the %s stage: recorded only", pool, orNone(string(stage)))
	case stage == vocab.StageTrial && !c.LowRisk(queue):
		d.Mode, d.Why = vocab.ModeReport, fmt.Sprintf("pool %s is in the trial stage and queue %s is not low-risk: recorded only", pool, queue)
	case protected && d.Configured != vocab.ModeReport:
		d.Mode, d.Why = vocab.ModeConfirm, "protected work is released only on an operator's confirmation"
	default:
		d.Mode, d.Why = d.Configured, fmt.Sprintf("configured mode for pool %s, queue %s, class %s", pool, queue, class)
	}
	return d
}
