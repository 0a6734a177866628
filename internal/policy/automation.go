package policy

import (
	"time"

	"github.com/gpugov/gpugov/internal/vocab"
)

// Drills is the resume drill rule (docs/design.md §5 "Resume drills"): a
// drill runs the whole preemption workflow on a running checkpointable job
// with no beneficiary, so that its recovery profile earns evidence before
// anything depends on it. Operators start drills by hand (`gpugov drill`);
// AutoInTrial lets the governance loop start them in pools in the trial
// stage.
type Drills struct {
	// AutoInTrial lets the governance loop drill, in each pool in the trial
	// stage, running jobs of low-risk queues whose recovery profile lacks
	// the evidence the preemption gate asks for — only while matching GPUs
	// are free, so that the resume is immediate, and one drill at a time
	// per pool.
	AutoInTrial bool `json:"auto_in_trial"`
	// PerProfilePerDay bounds the automatic drills per recovery profile in
	// any 24 hours (drills started by hand count toward it); at least 1.
	PerProfilePerDay int `json:"per_profile_per_day"`
}

// DefaultDrillsPerProfilePerDay is drills.per_profile_per_day's default:
// one drill gives a profile its first verified resume (the default
// preemption.min_verified_resumes is 1), so more a day only spends run time.
const DefaultDrillsPerProfilePerDay = 1

// DefaultDrills is the drill rule of a policy that sets none: automatic
// drills off, at most DefaultDrillsPerProfilePerDay per profile a day.
func DefaultDrills() Drills {
	return Drills{PerProfilePerDay: DefaultDrillsPerProfilePerDay}
}

// Automation holds what a pool must show before its automation stage may
// widen (observe → trial → automate; docs/design.md §4 "Pool readiness").
type Automation struct {
	// RecoveryLossBudgetGPUSecondsPerDay is the effective run loss
	// (accounting.EffectiveRunLoss: lost work, save/restore and recompute)
	// the pool's preemptions and drills may cost per day of the readiness
	// window, in GPU-seconds.
	RecoveryLossBudgetGPUSecondsPerDay float64 `json:"recovery_loss_budget_gpu_s_per_day"`
	// Readiness holds the readiness checks' window and thresholds.
	Readiness Readiness `json:"readiness"`
}

// MaxReadinessWindowSeconds bounds automation.readiness.window_s: the
// checks read two such windows of records in one queue report, which the
// store bounds at store.MaxReportWindow (90 days), so 45 days. Beyond it
// every readiness evaluation would fail, and with it every policy refresh
// that widens a stage (a store test holds the two bounds together).
const MaxReadinessWindowSeconds = vocab.MaxReadinessWindowSeconds

// Readiness holds the window and thresholds of a pool's readiness checks
// (governance.EvaluateReadiness). Shares are fractions 0..1.
type Readiness struct {
	// WindowSeconds is the last window the checks measure, compared with
	// the window of the same length before it; at most
	// MaxReadinessWindowSeconds.
	WindowSeconds float64 `json:"window_s"`
	// MinReasonShare is the least share of the pool's waiting after a
	// job's first evaluation (or still without one) that must carry a
	// scheduler's wait reason (wait_reasons_recorded); the service's own
	// latency before the first evaluation owes none.
	MinReasonShare float64 `json:"min_reason_share"`
	// MaxNotYetEvaluatedShare is the most share of all the pool's waiting
	// that may be of jobs still not evaluated at the window's end
	// (wait_reasons_recorded).
	MaxNotYetEvaluatedShare float64 `json:"max_not_yet_evaluated_share"`
	// MinObservedShare is the least share of the pool's running allocations
	// that must have a fresh utilisation sample or fresh progress
	// (running_idle_distinguishable).
	MinObservedShare float64 `json:"min_observed_share"`
	// FreshnessSeconds is how old a sample or a checkpoint may be and still
	// count as fresh.
	FreshnessSeconds float64 `json:"freshness_s"`
	// LongestWaitFloorSeconds: a longest wait at or below it is never a
	// regression (longest_wait_down), and a queue below its min_share none
	// of whose jobs waited longer is served (low_priority_served).
	LongestWaitFloorSeconds float64 `json:"longest_wait_floor_s"`
	// MaxLongestWaitGrowth is how much longer (a fraction) the last
	// window's longest wait may be than the one before's (longest_wait_down).
	MaxLongestWaitGrowth float64 `json:"max_longest_wait_growth"`
	// MaxStarvingJobs is the most jobs with a starvation signal the last
	// window may have (low_priority_served).
	MaxStarvingJobs int `json:"max_starving_jobs"`
	// MaxKeyJobsOverObjective is the most production and key-project jobs
	// whose wait exceeded their queue's objective in the last window
	// (key_jobs_guaranteed).
	MaxKeyJobsOverObjective int `json:"max_key_jobs_over_objective"`
}

// The readiness defaults (docs/design.md §4 "Pool readiness" gives each
// one's source).
const (
	// DefaultReadinessWindowSeconds: one day, the queue report's and the
	// queue gauges' window.
	DefaultReadinessWindowSeconds = 86400
	// DefaultMinReasonShare and DefaultMaxNotYetEvaluatedShare: four fifths
	// of the waiting the scheduler owes a reason explained by one, at most a
	// fifth of all waiting by jobs still waiting for a first evaluation.
	DefaultMinReasonShare          = 0.8
	DefaultMaxNotYetEvaluatedShare = 0.2
	// DefaultMinObservedShare: nine in ten running allocations observable.
	DefaultMinObservedShare = 0.9
	// DefaultFreshnessSeconds: ten minutes, 20 of the agent's 30 s refreshes.
	DefaultFreshnessSeconds = 600
	// DefaultLongestWaitFloorSeconds: five minutes.
	DefaultLongestWaitFloorSeconds = 300
	// DefaultMaxLongestWaitGrowth: 10 % longer than the window before.
	DefaultMaxLongestWaitGrowth = 0.1
	// DefaultRecoveryLossBudgetGPUSecondsPerDay: eight GPU-hours a day.
	DefaultRecoveryLossBudgetGPUSecondsPerDay = 8 * 3600
)

// DefaultAutomation is the readiness rule of a policy that sets none: the
// Default* constants above, no starving job and no key job over its
// objective allowed.
func DefaultAutomation() Automation {
	return Automation{
		RecoveryLossBudgetGPUSecondsPerDay: DefaultRecoveryLossBudgetGPUSecondsPerDay,
		Readiness: Readiness{
			WindowSeconds: DefaultReadinessWindowSeconds, MinReasonShare: DefaultMinReasonShare,
			MaxNotYetEvaluatedShare: DefaultMaxNotYetEvaluatedShare, MinObservedShare: DefaultMinObservedShare,
			FreshnessSeconds: DefaultFreshnessSeconds, LongestWaitFloorSeconds: DefaultLongestWaitFloorSeconds,
			MaxLongestWaitGrowth: DefaultMaxLongestWaitGrowth,
		},
	}
}

// DrillRule returns the policy's drill rule: Drills, or DefaultDrills for
// a version stored before the field existed (its body has none).
func (p *Policy) DrillRule() Drills {
	if p.Drills == nil {
		return DefaultDrills()
	}
	return *p.Drills
}

// AutomationRule returns the policy's readiness rule: Automation, or
// DefaultAutomation for a version stored before the field existed.
func (p *Policy) AutomationRule() Automation {
	if p.Automation == nil {
		return DefaultAutomation()
	}
	return *p.Automation
}

// Window returns the readiness window as a duration.
func (r Readiness) Window() time.Duration { return Seconds(r.WindowSeconds) }
