package vocab

import "slices"

// PreemptionKind is what a preemption record is for (preemptions.kind).
type PreemptionKind string

// The preemption kinds.
const (
	// PreemptionForJob: a scheduling cycle preempted the victim for a
	// higher-priority (or lending) job, named by for_job_id.
	PreemptionForJob PreemptionKind = "preemption"
	// PreemptionDrill: a resume drill (docs/design.md §5, "Resume drills"):
	// the full preemption workflow on a running checkpointable job with no
	// beneficiary, to earn (or refute) its recovery profile's evidence.
	PreemptionDrill PreemptionKind = "drill"
)

// PreemptionKinds lists every preemption kind.
var PreemptionKinds = []PreemptionKind{PreemptionForJob, PreemptionDrill}

// Valid reports whether k is one of PreemptionKinds.
func (k PreemptionKind) Valid() bool { return slices.Contains(PreemptionKinds, k) }

// StageChangeOutcome is what became of one attempt to change a pool's
// automation stage (pool_stage_changes.outcome; docs/design.md §4,
// "Pool readiness").
type StageChangeOutcome string

// The stage change outcomes.
const (
	// StageChangeApplied: the stage changed: a narrowing, or a widening
	// whose readiness passed.
	StageChangeApplied StageChangeOutcome = "applied"
	// StageChangeOverridden: a widening applied although readiness failed,
	// because an admin overrode it with a reason.
	StageChangeOverridden StageChangeOutcome = "overridden"
	// StageChangeRefused: a widening refused because readiness failed; the
	// stored stage was kept.
	StageChangeRefused StageChangeOutcome = "refused"
	// StageChangeInitial: the first stage serve gave a pool without stage
	// history when it started (a new pool has no history to measure), or
	// the stage a pool had when stage history began (migration 00261).
	StageChangeInitial StageChangeOutcome = "initial"
)

// StageChangeOutcomes lists every stage change outcome.
var StageChangeOutcomes = []StageChangeOutcome{StageChangeApplied, StageChangeOverridden, StageChangeRefused, StageChangeInitial}

// StageRank orders the automation stages by how much they let automation
// act: observe 0, trial 1, automate 2; -1 for an unknown stage.
func StageRank(s AutomationStage) int { return slices.Index(AutomationStages, s) }

// Widens reports whether moving from stage from to stage to widens
// automation (observe → trial → automate). An unknown stage widens
// nothing and is widened by every known one.
func Widens(from, to AutomationStage) bool { return StageRank(to) > StageRank(from) }

// ReadinessCheck names one check of a pool's readiness (docs/design.md §4,
// "Pool readiness"): four preconditions and four questions about the last
// window against the one before.
type ReadinessCheck string

// The readiness checks, preconditions first.
const (
	// ReadinessWaitReasons: wait reasons are stably recorded — the share of
	// waiting job-time carrying a scheduler's reason, and the share still
	// not_yet_evaluated.
	ReadinessWaitReasons ReadinessCheck = "wait_reasons_recorded"
	// ReadinessRunningIdle: running and idle are distinguishable — the
	// share of running allocations with fresh utilisation samples or
	// progress.
	ReadinessRunningIdle ReadinessCheck = "running_idle_distinguishable"
	// ReadinessProtection: protection is explicit — every queue of the pool
	// sets protected or low_risk in the policy.
	ReadinessProtection ReadinessCheck = "protection_explicit"
	// ReadinessSaveRestore: save and restore are proven — every
	// checkpointable recovery profile of the pool has its verified resumes
	// and a failure rate within the policy's bound.
	ReadinessSaveRestore ReadinessCheck = "save_restore_proven"
	// ReadinessLongestWait: is the longest wait down (not up) against the
	// window before?
	ReadinessLongestWait ReadinessCheck = "longest_wait_down"
	// ReadinessLowPriority: are low-priority jobs still served — every
	// queue's minimum share met, nobody starving?
	ReadinessLowPriority ReadinessCheck = "low_priority_served"
	// ReadinessKeyJobs: are key jobs still guaranteed — production and
	// key-project start waits within their objective?
	ReadinessKeyJobs ReadinessCheck = "key_jobs_guaranteed"
	// ReadinessLossBudget: are recompute and recovery loss within the
	// policy's daily budget?
	ReadinessLossBudget ReadinessCheck = "recovery_loss_within_budget"
)

// ReadinessChecks lists every readiness check in the order reports list them.
var ReadinessChecks = []ReadinessCheck{ReadinessWaitReasons, ReadinessRunningIdle, ReadinessProtection,
	ReadinessSaveRestore, ReadinessLongestWait, ReadinessLowPriority, ReadinessKeyJobs, ReadinessLossBudget}

// Precondition reports whether c is one of the four preconditions (the
// rest are the questions over the last window against the one before).
func (c ReadinessCheck) Precondition() bool {
	return c == ReadinessWaitReasons || c == ReadinessRunningIdle || c == ReadinessProtection || c == ReadinessSaveRestore
}
