// Package vocab holds gpugov's shared terms: job states, run outcomes,
// preemption and reclaim states, reclaim classes and modes, automation stages,
// tiers, API roles and the wait-reason catalogue (docs/design.md §1). It is
// pure: no I/O, no clock, and it imports nothing from this repository, so the
// scheduling core, the store, the workflows, the API and the simulator all
// name these values from one place.
//
// Each set is a named string type (Tier is ordered and therefore an int) with
// its constants and a slice listing every value in a stable order. The
// database's CHECK constraints and the OpenAPI document's enums list the same
// values; store/vocab_drift_test.go and api/vocab_drift_test.go fail when one
// of them drifts from this package.
package vocab

import "slices"

// JobState is the life-cycle state of a job (jobs.state).
type JobState string

// The job states. submitted and waiting are pending; placed (allocation
// granted, run not started) and running hold GPUs; the rest are final.
const (
	JobSubmitted JobState = "submitted"
	JobWaiting   JobState = "waiting"
	JobPlaced    JobState = "placed"
	JobRunning   JobState = "running"
	JobSucceeded JobState = "succeeded"
	JobFailed    JobState = "failed"
	JobCancelled JobState = "cancelled"
)

// JobStates lists every job state in life-cycle order.
var JobStates = []JobState{JobSubmitted, JobWaiting, JobPlaced, JobRunning, JobSucceeded, JobFailed, JobCancelled}

// Final reports whether the state is succeeded, failed or cancelled.
func (s JobState) Final() bool {
	return s == JobSucceeded || s == JobFailed || s == JobCancelled
}

// Pending reports whether the state is submitted or waiting: the job is in
// the scheduler's pending set.
func (s JobState) Pending() bool { return s == JobSubmitted || s == JobWaiting }

// HoldsGPUs reports whether the state is placed or running: the job has an
// active allocation.
func (s JobState) HoldsGPUs() bool { return s == JobPlaced || s == JobRunning }

// Valid reports whether s is one of JobStates.
func (s JobState) Valid() bool { return slices.Contains(JobStates, s) }

// RunOutcome is how a run (one execution attempt of a job on an allocation)
// ended (runs.outcome), or, for RunRequeued, how a placement was given back.
type RunOutcome string

// The run outcomes. The executor reports succeeded, failed or cancelled; the
// job workflow reports preempted for a run a preemption stopped.
const (
	RunSucceeded RunOutcome = "succeeded" // the job's work is done
	RunFailed    RunOutcome = "failed"    // the job's process exited with an error
	RunCancelled RunOutcome = "cancelled" // the run was stopped on request (cancel, preemption)
	RunPreempted RunOutcome = "preempted" // the job goes back to waiting, keeping its aging credit
	// RunRequeued is accepted by the store's ReleasePlacement only: the job
	// goes back to waiting without having run. It is never stored in
	// runs.outcome, so RunOutcomes does not list it.
	RunRequeued RunOutcome = "requeued"
)

// RunOutcomes lists the outcomes a stored run may end with (runs.outcome).
var RunOutcomes = []RunOutcome{RunSucceeded, RunFailed, RunCancelled, RunPreempted}

// PreemptionState is where a preemption record stands (preemptions.state).
type PreemptionState string

// The preemption states.
const (
	PreemptionInProgress PreemptionState = "in_progress" // the PreemptionWorkflow is running its steps
	PreemptionReleased   PreemptionState = "released"    // the victim's GPUs were released
	PreemptionAborted    PreemptionState = "aborted"     // no valid checkpoint in the grace period and policy said abort, or the victim ended
	PreemptionObserved   PreemptionState = "observed"    // a "would preempt" record of an observe-stage pool
)

// PreemptionStates lists every preemption state.
var PreemptionStates = []PreemptionState{PreemptionInProgress, PreemptionReleased, PreemptionAborted, PreemptionObserved}

// PreemptionOutcome is how a preemption record ended (preemptions.outcome),
// set when the record is final.
type PreemptionOutcome string

// The preemption outcomes.
const (
	PreemptionCompleted         PreemptionOutcome = "completed"             // all five steps ran; the next run resumed at the saved step and progressed past it
	PreemptionResumeFailed      PreemptionOutcome = "resume_failed"         // the next run started from another step (recovery evidence downgraded), or started right but did not progress past it
	PreemptionResumeNotObserved PreemptionOutcome = "resume_not_observed"   // released, but no next run (or no pass of the notice step) within the bound
	PreemptionAbortedNoCkpt     PreemptionOutcome = "aborted_no_checkpoint" // no checkpoint within the grace period and policy said abort
	PreemptionAbortedIneligible PreemptionOutcome = "aborted_ineligible"    // the victim became protected, not checkpointable or not running
	PreemptionVictimEnded       PreemptionOutcome = "victim_ended"          // the victim's run ended by itself before the release
	PreemptionWouldPreempt      PreemptionOutcome = "would_preempt"         // observe stage: recorded only
)

// PreemptionOutcomes lists every preemption outcome.
var PreemptionOutcomes = []PreemptionOutcome{
	PreemptionCompleted, PreemptionResumeFailed, PreemptionResumeNotObserved, PreemptionAbortedNoCkpt,
	PreemptionAbortedIneligible, PreemptionVictimEnded, PreemptionWouldPreempt,
}

// ReclaimState is where a reclaim stands (reclaims.state).
type ReclaimState string

// The reclaim states.
const (
	ReclaimOpen         ReclaimState = "open"                  // classified, mode not acted on yet
	ReclaimReported     ReclaimState = "reported"              // report mode (or a stage that only records): nothing touched
	ReclaimNotified     ReclaimState = "notified"              // notify mode: the owner was told, the window runs
	ReclaimAwaitConfirm ReclaimState = "awaiting_confirmation" // confirm mode: waits for an operator
	ReclaimReleased     ReclaimState = "released"              // the GPUs were released
	ReclaimKept         ReclaimState = "kept"                  // the owner disputed it (a false reclaim): nothing released
	ReclaimExpired      ReclaimState = "expired"               // no operator confirmed within the window: nothing released
	ReclaimResolved     ReclaimState = "resolved"              // the allocation was released by its own job before the reclaim acted
)

// ReclaimStates lists every reclaim state.
var ReclaimStates = []ReclaimState{
	ReclaimOpen, ReclaimReported, ReclaimNotified, ReclaimAwaitConfirm,
	ReclaimReleased, ReclaimKept, ReclaimExpired, ReclaimResolved,
}

// ReclaimClass is a reclaim class (docs/design.md §1): why an allocation's
// GPUs may be taken back.
type ReclaimClass string

// The reclaim classes.
const (
	ClassFailed    ReclaimClass = "failed"    // the run ended or is unrecoverable, GPUs still held
	ClassIdle      ReclaimClass = "idle"      // running, no progress or utilisation for the observation window, not protected
	ClassCompleted ReclaimClass = "completed" // work done, cleanup (release) not run
)

// ReclaimClasses lists every reclaim class.
var ReclaimClasses = []ReclaimClass{ClassFailed, ClassIdle, ClassCompleted}

// String renders a class for messages.
func (k ReclaimClass) String() string { return string(k) }

// Valid reports whether k is one of ReclaimClasses.
func (k ReclaimClass) Valid() bool { return slices.Contains(ReclaimClasses, k) }

// ReclaimMode is a reclaim mode (docs/design.md §1): what a reclaim does.
type ReclaimMode string

// The reclaim modes.
const (
	ModeReport  ReclaimMode = "report"  // record only
	ModeNotify  ReclaimMode = "notify"  // tell the owner, wait the notice window, release unless they keep it
	ModeAuto    ReclaimMode = "auto"    // release at once
	ModeConfirm ReclaimMode = "confirm" // an operator must approve
)

// ReclaimModes lists every reclaim mode.
var ReclaimModes = []ReclaimMode{ModeReport, ModeNotify, ModeAuto, ModeConfirm}

// Valid reports whether m is one of ReclaimModes.
func (m ReclaimMode) Valid() bool { return slices.Contains(ReclaimModes, m) }

// AutomationStage is a pool's rollout stage for preemption and reclaim
// (docs/design.md §1).
type AutomationStage string

// The automation stages.
const (
	StageObserve  AutomationStage = "observe"  // record "would preempt", change nothing
	StageTrial    AutomationStage = "trial"    // act only on victims in low-risk queues
	StageAutomate AutomationStage = "automate" // act on every eligible victim
)

// AutomationStages lists every stage, narrowest first.
var AutomationStages = []AutomationStage{StageObserve, StageTrial, StageAutomate}

// Valid reports whether s is one of AutomationStages.
func (s AutomationStage) Valid() bool { return slices.Contains(AutomationStages, s) }

// QuotaRequestState is where a quota request stands (docs/design.md §3,
// "Act on a wait": a project asks for more quota, an admin decides).
type QuotaRequestState string

// The quota request states.
const (
	QuotaRequestPending  QuotaRequestState = "pending"  // asked, not decided yet
	QuotaRequestApproved QuotaRequestState = "approved" // an admin approved it; the quota was changed
	QuotaRequestDenied   QuotaRequestState = "denied"   // an admin denied it; nothing changed
)

// QuotaRequestStates lists every quota request state, the open one first.
var QuotaRequestStates = []QuotaRequestState{QuotaRequestPending, QuotaRequestApproved, QuotaRequestDenied}

// Valid reports whether s is one of QuotaRequestStates.
func (s QuotaRequestState) Valid() bool { return slices.Contains(QuotaRequestStates, s) }

// Audit actors of the actions gpugov takes by itself (audit_log.actor); a
// person's or a client's action records its principal instead.
const (
	ActorScheduler = "scheduler" // everything a scheduling cycle records: placements, preemption starts
	ActorReclaim   = "reclaim"   // reclaim notices and releases
)

// Role is what an API bearer token may do.
type Role string

// The roles: three for people, least privileged first, and one for node agents.
const (
	// RoleSubmitter sees and changes only its own project's jobs.
	RoleSubmitter Role = "submitter"
	// RoleOperator sees and changes every project's jobs and may set protection.
	RoleOperator Role = "operator"
	// RoleAdmin has every operator right; it exists so that administration
	// endpoints added later have a role to require.
	RoleAdmin Role = "admin"
	// RoleAgent is a node agent's: it may call only the node-agent routes
	// (inventory, samples, run specs, checkpoints), so a token on every GPU
	// node cannot submit, see or cancel jobs.
	RoleAgent Role = "agent"
)

// Roles lists every role, people's least privileged first, then the agent's.
var Roles = []Role{RoleSubmitter, RoleOperator, RoleAdmin, RoleAgent}

// SeesAllProjects reports whether the role may see and change every
// project's jobs (operator and admin).
func (r Role) SeesAllProjects() bool { return r == RoleOperator || r == RoleAdmin }

// Valid reports whether r is one of Roles.
func (r Role) Valid() bool { return slices.Contains(Roles, r) }

// EndsJobAs returns the final job state a run that ended with o leaves its job
// in when no preemption or requeue follows: succeeded, failed or cancelled for
// those outcomes, "" for preempted and requeued (the job waits again).
func (o RunOutcome) EndsJobAs() JobState {
	switch o {
	case RunSucceeded:
		return JobSucceeded
	case RunFailed:
		return JobFailed
	case RunCancelled:
		return JobCancelled
	}
	return ""
}

// NextEvalKind says what a waiting job's expected next re-evaluation rests
// on (docs/design.md §1, "next re-evaluation"; scheduling.NextEvaluation).
type NextEvalKind string

// The kinds of next re-evaluation.
const (
	// NextEvalTimer: the scheduler's next timer cycle; nothing known to
	// change the outcome before it.
	NextEvalTimer NextEvalKind = "timer"
	// NextEvalAgingOvertake: the instant aging lifts the job's rank above
	// the job directly ahead of it in its pool (that job aging too).
	NextEvalAgingOvertake NextEvalKind = "aging_overtake"
	// NextEvalReleaseEstimate: the earliest end of a running job that would
	// free what the job needs, from its declared run time: an estimate.
	NextEvalReleaseEstimate NextEvalKind = "release_estimate"
)

// NextEvalKinds lists every kind of next re-evaluation.
var NextEvalKinds = []NextEvalKind{NextEvalTimer, NextEvalAgingOvertake, NextEvalReleaseEstimate}

// Valid reports whether k is one of NextEvalKinds.
func (k NextEvalKind) Valid() bool { return slices.Contains(NextEvalKinds, k) }

// SchedulingAction is what the last scheduling cycle that decided about a
// job did with it (docs/design.md §1, "last scheduling action"; the store's
// LastDecision reads it from the cycle's decisions and the job's explanation).
type SchedulingAction string

// The scheduling actions.
const (
	ActionPlaced             SchedulingAction = "placed"              // granted GPUs
	ActionPlacementRefused   SchedulingAction = "placement_refused"   // planned, refused when the cycle was applied (capacity taken, request amended, …)
	ActionPreemptionStarted  SchedulingAction = "preemption_started"  // preemption of running jobs started for it
	ActionPreemptionProposed SchedulingAction = "preemption_proposed" // preemption proposed, not carried out (the pool's stage)
	ActionHeldByReservation  SchedulingAction = "held_by_reservation" // fits only on GPUs reserved for a higher-ranked job
	ActionLeftWaiting        SchedulingAction = "left_waiting"        // evaluated against capacity and quota and left waiting
	ActionSkipped            SchedulingAction = "skipped"             // not considered for GPUs: held, prerequisite not ready, pool unavailable
)

// SchedulingActions lists every scheduling action.
var SchedulingActions = []SchedulingAction{ActionPlaced, ActionPlacementRefused, ActionPreemptionStarted,
	ActionPreemptionProposed, ActionHeldByReservation, ActionLeftWaiting, ActionSkipped}

// Valid reports whether a is one of SchedulingActions.
func (a SchedulingAction) Valid() bool { return slices.Contains(SchedulingActions, a) }
