package vocab

import "slices"

// PolicyGroup is one variable group of a policy (docs/design.md §4,
// "Experiments"): the unit an experiment changes. A policy diff
// (policy.Diff) is grouped by it, and an experiment whose candidate differs
// from its baseline in more than one group is refused unless overridden.
type PolicyGroup string

// The policy variable groups, with the policy fields each covers.
const (
	// PolicyQueueService: queues[] tier, service share, wait objective,
	// min_share, max_share (and queues added or removed).
	PolicyQueueService PolicyGroup = "queue_service"
	// PolicyQuota: quotas[] (nominal quota and borrowing limit per project and pool).
	PolicyQuota PolicyGroup = "quota"
	// PolicyAging: aging.* and queues[].aging_cap_points / aging_ceiling_tier.
	PolicyAging PolicyGroup = "aging"
	// PolicyFairShare: fair_share.* (weight, half-life, project weights).
	PolicyFairShare PolicyGroup = "fair_share"
	// PolicyOrdering: tier_base, reservation.* and placement (the cycle's
	// fixed rules of order and placement; placement has no group of its own
	// because the stored groups are a closed list in the schema).
	PolicyOrdering PolicyGroup = "ordering"
	// PolicyPreemption: preemption.*.
	PolicyPreemption PolicyGroup = "preemption"
	// PolicyReclaim: reclaim.*.
	PolicyReclaim PolicyGroup = "reclaim"
	// PolicyAutomationStage: pools.*.stage.
	PolicyAutomationStage PolicyGroup = "automation_stage"
	// PolicyProtection: protection_windows and queues[].protected / low_risk.
	PolicyProtection PolicyGroup = "protection"
	// PolicyNotifications: notifications.* (webhooks and delivery schedule).
	PolicyNotifications PolicyGroup = "notifications"
)

// PolicyGroups lists every policy variable group in the order diffs list them.
var PolicyGroups = []PolicyGroup{PolicyQueueService, PolicyQuota, PolicyAging, PolicyFairShare, PolicyOrdering,
	PolicyPreemption, PolicyReclaim, PolicyAutomationStage, PolicyProtection, PolicyNotifications}

// Valid reports whether g is one of PolicyGroups.
func (g PolicyGroup) Valid() bool { return slices.Contains(PolicyGroups, g) }

// ExperimentState is where a policy experiment is in its life (experiments.state).
type ExperimentState string

// The experiment states: scheduled (waiting for its start) → baseline
// (measuring the baseline window) → running (the candidate in force, the
// rollback conditions checked) → finished (a verdict is recorded; a kept
// candidate stays in force until promoted or aborted) | aborted (an admin
// stopped it, or the policy changed outside it; the baseline is restored).
const (
	ExperimentScheduled ExperimentState = "scheduled"
	ExperimentBaseline  ExperimentState = "baseline"
	ExperimentRunning   ExperimentState = "running"
	ExperimentFinished  ExperimentState = "finished"
	ExperimentAborted   ExperimentState = "aborted"
)

// ExperimentStates lists every experiment state in life-cycle order.
var ExperimentStates = []ExperimentState{ExperimentScheduled, ExperimentBaseline, ExperimentRunning, ExperimentFinished, ExperimentAborted}

// Valid reports whether s is one of ExperimentStates.
func (s ExperimentState) Valid() bool { return slices.Contains(ExperimentStates, s) }

// Active reports whether the experiment holds its pools (no other experiment
// may run there): scheduled, baseline or running.
func (s ExperimentState) Active() bool {
	return s == ExperimentScheduled || s == ExperimentBaseline || s == ExperimentRunning
}

// ExperimentVerdict is how a finished experiment ended (experiments.verdict).
type ExperimentVerdict string

// The experiment verdicts.
const (
	// VerdictKept: the expected result was met and no rollback condition
	// was breached; the candidate stays in force until an admin promotes
	// it (the new baseline) or aborts (the baseline is restored).
	VerdictKept ExperimentVerdict = "kept"
	// VerdictRolledBack: a rollback condition was breached during the
	// window; the baseline was restored at once.
	VerdictRolledBack ExperimentVerdict = "rolled_back"
	// VerdictNotMet: no breach, but the expected result was not reached;
	// the baseline is restored (adjust the candidate and try again).
	VerdictNotMet ExperimentVerdict = "not_met"
	// VerdictInconclusive: too few jobs in a watched group for a verdict
	// (the numbers are recorded); the baseline is restored.
	VerdictInconclusive ExperimentVerdict = "inconclusive"
)

// ExperimentVerdicts lists every verdict.
var ExperimentVerdicts = []ExperimentVerdict{VerdictKept, VerdictRolledBack, VerdictNotMet, VerdictInconclusive}

// Valid reports whether v is one of ExperimentVerdicts.
func (v ExperimentVerdict) Valid() bool { return slices.Contains(ExperimentVerdicts, v) }
