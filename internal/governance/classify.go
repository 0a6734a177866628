// Package governance holds gpugov's pure reclaim decisions: the
// classification of an allocation from its evidence, and the mode a finding
// is handled in (the effective-run-loss formula is internal/accounting's).
// Their configuration (each pool's automation stage, the low-risk queues,
// protection windows, the reclaim scan and its modes) is the policy's
// (internal/policy). It imports neither Temporal nor pgx.
package governance

import (
	"fmt"
	"slices"
	"strings"
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
	// MemoryUsedMiB is the GPU memory in use at At (NVML memory.used, MiB).
	MemoryUsedMiB int64
}

// Completion is the owner's business-complete declaration of an
// allocation (POST /v1/jobs/{id}/complete): the work is done, only cleanup
// still holds the GPUs.
type Completion struct {
	By     string // the token's name
	At     time.Time
	Reason string
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
	// LastProgressAt is when the run's reported step was last seen to
	// advance (progress lines of the job protocol, the simulated executor's
	// steps, as heartbeated by the run activity and observed by the reclaim
	// scan): output. Nil when it was never seen to advance.
	LastProgressAt *time.Time
	// Completion is the owner's declaration that the work is done; nil when none.
	Completion *Completion
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
	// NotifyAtMost, when not empty, says why the finding must not be released
	// automatically (an idle GPU that burst or holds memory): its mode is
	// capped at notify (DecideFindingMode).
	NotifyAtMost string
	// GPUs is the per-GPU measure of an idle finding's window (nil for the
	// other classes).
	GPUs []GPUWindow
}

// GPUWindow is one GPU's utilisation over an observation window
// (MeasureWindow): the samples taken in it, their mean and peak, the bursts
// above the idle threshold and the most GPU memory in use.
type GPUWindow struct {
	GPUUUID string
	Samples int
	// MeanPercent is the mean of the samples' utilisation (the agents sample
	// at a fixed interval, so it is the window's time average).
	MeanPercent float64
	PeakPercent int
	// Bursts counts the maximal runs of consecutive samples (in time order)
	// above the idle threshold.
	Bursts int
	// MaxMemoryMiB is the most GPU memory in use in any sample.
	MaxMemoryMiB int64
	// First and Last are the times of the window's first and last sample.
	First, Last time.Time
}

// Classify decides whether the allocation is reclaimable at now and why.
// In order: completed (its run succeeded or its job did, yet the GPUs are
// held; or its owner declared the work done, only cleanup holding the
// GPUs), failed (its run ended otherwise, its job failed or was cancelled, no
// run started within the observation window of the grant, or its run's
// executor has not heartbeated for longer than the observation window — the
// agent crashed or lost contact), idle (the idle rule, docs/design.md §3
// "The idle rule": its run has been going for the whole window, made no
// checkpoint and reported no progress in it, and every GPU it holds has
// utilisation samples spanning the window whose mean is at or below the idle
// threshold with at most reclaim.idle_max_bursts bursts above it; missing
// samples are no evidence of idleness, and protected jobs, queues and
// windows are never idle; an idle GPU that burst or holds more than
// reclaim.idle_memory_mib is notify-at-most). It returns false when the
// allocation is not reclaimable.
func Classify(ev *Evidence, c *policy.Policy, now time.Time) (Finding, bool) {
	window := policy.Seconds(c.Reclaim.ObservationWindowSeconds)
	switch {
	case ev.RunOutcome == vocab.RunSucceeded || ev.JobState == vocab.JobSucceeded:
		return Finding{Class: vocab.ClassCompleted, Basis: fmt.Sprintf("run %s succeeded%s but %.3g GPU(s) are still held", orNone(ev.RunID),
			endedText(ev.RunEndedAt), ev.GPUs)}, true
	case ev.Completion != nil:
		return Finding{Class: vocab.ClassCompleted, Basis: fmt.Sprintf("the owner (%s) declared the work done at %s (%s) but %.3g GPU(s) are still held for cleanup by run %s",
			ev.Completion.By, ev.Completion.At.UTC().Format(time.RFC3339), orNone(ev.Completion.Reason), ev.GPUs, orNone(ev.RunID))}, true
	case ev.RunEndedAt != nil:
		return Finding{Class: vocab.ClassFailed, Basis: fmt.Sprintf("run %s ended %s%s but %.3g GPU(s) are still held", ev.RunID, ev.RunOutcome,
			endedText(ev.RunEndedAt), ev.GPUs)}, true
	case ev.JobState == vocab.JobFailed || ev.JobState == vocab.JobCancelled:
		return Finding{Class: vocab.ClassFailed, Basis: fmt.Sprintf("job is %s but %.3g GPU(s) are still held", ev.JobState, ev.GPUs)}, true
	case ev.RunID == "" && now.Sub(ev.GrantedAt) >= window:
		return Finding{Class: vocab.ClassFailed, Basis: fmt.Sprintf("granted at %s, no run started within the %s observation window",
			ev.GrantedAt.UTC().Format(time.RFC3339), window)}, true
	case heartbeatLost(ev, now, window):
		return Finding{Class: vocab.ClassFailed, Basis: fmt.Sprintf("run %s has not heartbeated for %s (last heartbeat at %s), longer than the %s observation window: its executor is lost but %.3g GPU(s) are still held",
			ev.RunID, now.Sub(*ev.LastHeartbeatAt).Round(time.Second), ev.LastHeartbeatAt.UTC().Format(time.RFC3339), window, ev.GPUs)}, true
	}
	return idle(ev, c, now, window)
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

// idle applies the idle rule (docs/design.md §3 "The idle rule"; see
// Classify). Its sources: Run:ai's idle-GPU time limit calls a workload
// idle while its GPU utilisation stays at zero for the whole period (any
// busy 30-second interval resets the count), which keeps a job with one
// burst per period for ever — reclaim.idle_max_bursts 0 is that rule;
// Princeton's jobstats judges a job by its mean GPU utilisation and its GPU
// memory use — the mean bound and reclaim.idle_memory_mib. A burst must be
// short: it may not lift the mean above the threshold.
func idle(ev *Evidence, c *policy.Policy, now time.Time, window time.Duration) (Finding, bool) {
	from := now.Add(-window)
	switch {
	case ev.RunID == "" || ev.Protected || c.InProtectionWindow(ev.Queue, now) != "":
		return Finding{}, false
	case ev.RunStartedAt.After(from):
		return Finding{}, false
	case ev.LastCheckpointAt != nil && !ev.LastCheckpointAt.Before(from):
		return Finding{}, false
	case ev.LastProgressAt != nil && !ev.LastProgressAt.Before(from):
		return Finding{}, false
	case len(ev.GPUUUIDs) == 0:
		return Finding{}, false
	}
	threshold := c.Reclaim.IdleGPUPercent
	f := Finding{Class: vocab.ClassIdle, GPUs: make([]GPUWindow, 0, len(ev.GPUUUIDs))}
	// Samples must span the window on every GPU: the first within a quarter
	// window of its start, the last within a quarter window of now.
	slack := window / 4
	var mean float64
	peak, bursts := 0, 0
	var memory int64
	for _, uuid := range ev.GPUUUIDs {
		w := MeasureWindow(ev.Samples, uuid, from, threshold)
		if w.Samples == 0 || w.First.After(from.Add(slack)) || w.Last.Before(now.Add(-slack)) {
			return Finding{}, false
		}
		if w.MeanPercent > float64(threshold) || w.Bursts > c.Reclaim.IdleMaxBursts {
			return Finding{}, false
		}
		f.GPUs = append(f.GPUs, w)
		mean, peak = max(mean, w.MeanPercent), max(peak, w.PeakPercent)
		bursts, memory = max(bursts, w.Bursts), max(memory, w.MaxMemoryMiB)
	}
	var soft []string
	if bursts > 0 {
		soft = append(soft, fmt.Sprintf("%d burst(s) above %d%% in the window (peak %d%%): short work, such as an evaluation or an interactive user",
			bursts, threshold, peak))
	}
	if memory > c.Reclaim.IdleMemoryMiB {
		soft = append(soft, fmt.Sprintf("%d MiB of GPU memory held, above %d MiB: a model or session is loaded", memory, c.Reclaim.IdleMemoryMiB))
	}
	f.NotifyAtMost = strings.Join(soft, "; ")
	f.Basis = fmt.Sprintf("run %s reported no progress and made no checkpoint, and its %d GPU(s) averaged at most %.1f%% utilisation (threshold %d%%) with at most %d burst(s) above it (%d allowed; peak %d%%) and up to %d MiB of memory in use, over the %s observation window",
		ev.RunID, len(ev.GPUUUIDs), mean, threshold, bursts, c.Reclaim.IdleMaxBursts, peak, memory, window)
	if f.NotifyAtMost != "" {
		f.Basis += "; not released without notice: " + f.NotifyAtMost
	}
	return f, true
}

// MeasureWindow measures GPU uuid's samples taken at or after from: their
// count, mean and peak utilisation, the bursts (maximal runs of consecutive
// samples, in time order, above threshold percent) and the most memory in
// use. A zero Samples means none was taken.
func MeasureWindow(samples []Sample, uuid string, from time.Time, threshold int) GPUWindow {
	var mine []Sample
	for _, s := range samples {
		if s.GPUUUID == uuid && !s.At.Before(from) {
			mine = append(mine, s)
		}
	}
	slices.SortFunc(mine, func(a, b Sample) int { return a.At.Compare(b.At) })
	w := GPUWindow{GPUUUID: uuid, Samples: len(mine)}
	if len(mine) == 0 {
		return w
	}
	w.First, w.Last = mine[0].At, mine[len(mine)-1].At
	sum, above := 0, false
	for _, s := range mine {
		sum += s.GPUPercent
		w.PeakPercent = max(w.PeakPercent, s.GPUPercent)
		w.MaxMemoryMiB = max(w.MaxMemoryMiB, s.MemoryUsedMiB)
		if s.GPUPercent > threshold && !above {
			w.Bursts++
		}
		above = s.GPUPercent > threshold
	}
	w.MeanPercent = float64(sum) / float64(len(mine))
	return w
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

// DecideFindingMode is DecideMode for the evidence's pool, queue, stage and
// protection and the finding's class, with the finding's NotifyAtMost
// applied: an auto mode becomes notify (the owner is told and may keep the
// GPUs), so an idle GPU that burst or holds memory is never released
// without notice. Report, notify and confirm stay as they are.
func DecideFindingMode(c *policy.Policy, ev *Evidence, f Finding) ModeDecision {
	d := DecideMode(c, ev.Stage, ev.Pool, ev.Queue, f.Class, ev.Protected)
	if f.NotifyAtMost != "" && d.Mode == vocab.ModeAuto {
		d.Mode, d.Why = vocab.ModeNotify, d.Why+"; capped at notify: "+f.NotifyAtMost
	}
	return d
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
