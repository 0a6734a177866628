package vocab

import "slices"

// NotificationKind is the type of a submitter notification, the "type" of
// its webhook body (docs/design.md §3, notifications).
type NotificationKind string

// The notification kinds: every transition of a job that is meant for its
// submitter, and the experiment events meant for the admins.
const (
	// NotifyWaitReason: the job's wait reason became one that asks the
	// submitter to act (WaitReason.NotifiesSubmitter): spec
	// (no_matching_capacity), quota (quota_exhausted) or environment
	// (environment_not_ready).
	NotifyWaitReason NotificationKind = "job.wait_reason"
	// NotifyPlaced: a scheduling cycle granted the job GPUs.
	NotifyPlaced NotificationKind = "job.placed"
	// NotifyPreemptionNotice: the job's run was told to checkpoint and stop
	// for a higher-priority job.
	NotifyPreemptionNotice NotificationKind = "job.preemption_notice"
	// NotifyReclaimNotice: the job's allocation will be reclaimed at a
	// deadline unless its owner keeps it.
	NotifyReclaimNotice NotificationKind = "job.reclaim_notice"
	// NotifyResumed: after a preemption, the job's next run started (from
	// the saved checkpoint, or not: the body says).
	NotifyResumed NotificationKind = "job.resumed"
	// NotifyExperimentRolledBack: a policy experiment breached a rollback
	// condition and its baseline was restored; meant for the admins
	// (recipient policy.AdminsRecipient, no job), with the numbers that
	// breached.
	NotifyExperimentRolledBack NotificationKind = "experiment.rolled_back"
)

// NotificationKinds lists every notification kind.
var NotificationKinds = []NotificationKind{NotifyWaitReason, NotifyPlaced, NotifyPreemptionNotice, NotifyReclaimNotice, NotifyResumed,
	NotifyExperimentRolledBack}

// NotificationState is where a notification of the outbox is in its delivery.
type NotificationState string

// The notification states. pending is the only one that changes; the others are final.
const (
	// NotificationPending: written with its transition, not delivered yet.
	NotificationPending NotificationState = "pending"
	// NotificationDelivered: the project's webhook answered 2xx.
	NotificationDelivered NotificationState = "delivered"
	// NotificationDead: every delivery attempt failed; the last error is kept
	// (the dead-letter record).
	NotificationDead NotificationState = "dead"
	// NotificationUnrouted: the project has no webhook in the policy; nothing
	// was sent and the row is kept only to be read (and pruned by retention).
	NotificationUnrouted NotificationState = "unrouted"
)

// NotificationStates lists every notification state.
var NotificationStates = []NotificationState{NotificationPending, NotificationDelivered, NotificationDead, NotificationUnrouted}

// Valid reports whether s is one of NotificationStates.
func (s NotificationState) Valid() bool { return slices.Contains(NotificationStates, s) }

// NotifiesSubmitter reports whether a job's wait reason becoming r is a
// notification for its submitter (NotifyWaitReason): the reasons whose next
// action is the submitter's — fix the request (no_matching_capacity), the
// quota (quota_exhausted) or a prerequisite (environment_not_ready).
func (r WaitReason) NotifiesSubmitter() bool {
	return r == ReasonNoMatchingCapacity || r == ReasonQuotaExhausted || r == ReasonEnvironmentNotReady
}
