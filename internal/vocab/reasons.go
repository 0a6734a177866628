package vocab

import (
	"slices"
	"strings"
)

// WaitReason is the stable code of why a pending job is not running
// (docs/design.md §1, wait reasons). Every waiting job has exactly one current
// reason; wait events record each interval a job spent in one reason.
type WaitReason string

// The wait reasons, in the order of docs/design.md's table. Reasons lists
// what each means and implies.
const (
	ReasonEnvironmentNotReady       WaitReason = "environment_not_ready"
	ReasonQuotaExhausted            WaitReason = "quota_exhausted"
	ReasonNoMatchingCapacity        WaitReason = "no_matching_capacity"
	ReasonFragmented                WaitReason = "fragmented"
	ReasonCapacityBusy              WaitReason = "capacity_busy"
	ReasonReservedForHigherPriority WaitReason = "reserved_for_higher_priority"
	ReasonPreemptionInProgress      WaitReason = "preemption_in_progress"
	ReasonHeld                      WaitReason = "held"
	ReasonPoolUnavailable           WaitReason = "pool_unavailable"
	// ReasonNotYetEvaluated is the reason of the interval from a job's submit
	// (or requeue) to the first scheduling cycle that evaluates it. The other
	// reasons are what a cycle finds; before the first cycle there is no
	// finding, and a job placed by that cycle has none at all, so without
	// this interval the time per wait reason would miss every second a job
	// waited for the scheduler to look at it. The store writes it closed, at
	// the cycle that first evaluates the job, so it is never a job's current
	// reason (jobs.reason); it appears in wait-event histories and reports.
	ReasonNotYetEvaluated WaitReason = "not_yet_evaluated"
)

// ReasonInfo is one row of the wait-reason catalogue.
type ReasonInfo struct {
	// Code is the stable code stored in jobs.reason and wait_events.reason.
	Code WaitReason
	// Meaning says what the reason means (docs/design.md §1).
	Meaning string
	// NextAction is what the reason asks of whom; it is stored as the wait
	// event's next_action and shown in explanations.
	NextAction string
	// TimeCanChange is true when the reason may change with nobody acting on
	// the job: a release or an end of another job frees GPUs, aging reorders
	// ranks and reservations, runs become old enough to be preemption
	// victims, anti-thrash windows expire, the next cycle evaluates the job.
	// It is false when only an action changes it (a fixed prerequisite or
	// request, a released hold, an operator on the pool); the simulator
	// schedules no cycle for a release while only such reasons wait.
	TimeCanChange bool
	// HistoryOnly is true for a reason that is never a job's current reason
	// and appears only in wait-event histories and reports.
	HistoryOnly bool
	// EarnsAging is true when time in the reason is waiting for GPUs: it
	// accrues aging credit and can carry starvation signals. It is false
	// for a reason that asks somebody to act (a prerequisite, a request that
	// fits no node, a hold, an unavailable pool): waiting there earns no
	// credit, and such a job is listed as stuck, needing the action, rather
	// than as starving (docs/design.md §1, wait reasons).
	EarnsAging bool
	// Group is the kind of problem the reason points to, by which the
	// wait-reason report adds up its shares and names a pool's main
	// problem (docs/design.md §1 and §6).
	Group ReasonGroup
}

// ReasonGroup is the kind of problem a wait reason points to — the first
// question a platform team asks of a pool's waiting: is it capacity, spec,
// queue order, quota or environment? Every reason of the catalogue has one
// (ReasonInfo.Group); not_yet_evaluated alone is GroupServiceLatency, which
// measures the service, not the pool, and is kept out of the verdict.
type ReasonGroup string

// The reason groups, in the order reports list them.
const (
	GroupCapacity            ReasonGroup = "capacity"
	GroupFragmentationSpec   ReasonGroup = "fragmentation_and_spec"
	GroupQueueOrder          ReasonGroup = "queue_order"
	GroupQuota               ReasonGroup = "quota"
	GroupEnvironmentOperator ReasonGroup = "environment_and_operator"
	GroupServiceLatency      ReasonGroup = "service_latency"
)

// ReasonGroups lists every group in report order: the five groups of a
// pool's verdict, then service latency.
var ReasonGroups = []ReasonGroup{GroupCapacity, GroupFragmentationSpec, GroupQueueOrder, GroupQuota,
	GroupEnvironmentOperator, GroupServiceLatency}

// Label returns the group as words ("fragmentation and spec"), as
// verdicts and tables write it.
func (g ReasonGroup) Label() string { return strings.ReplaceAll(string(g), "_", " ") }

// Known reports whether g is one of ReasonGroups.
func (g ReasonGroup) Known() bool { return slices.Contains(ReasonGroups, g) }

// InVerdict reports whether time in the group's reasons is part of a pool's
// reason shares and verdict: every known group but service latency.
func (g ReasonGroup) InVerdict() bool { return g.Known() && g != GroupServiceLatency }

// Reasons is the wait-reason catalogue: every reason, in the order of
// docs/design.md's table.
var Reasons = []ReasonInfo{
	{Code: ReasonEnvironmentNotReady, Meaning: "a prerequisite is not ready",
		NextAction: "fix the prerequisite", Group: GroupEnvironmentOperator},
	{Code: ReasonQuotaExhausted, Meaning: "the project's or queue's quota or service share in this pool is used",
		NextAction: "quota (or the queue's max_share) adjustment, or wait for the project's (or queue's) own jobs to end", TimeCanChange: true, EarnsAging: true, Group: GroupQuota},
	{Code: ReasonNoMatchingCapacity, Meaning: "no node in the pool could run the job even if empty (model, memory, count, topology)",
		NextAction: "fix the request; waiting will not help", Group: GroupFragmentationSpec},
	{Code: ReasonFragmented, Meaning: "enough matching GPUs are free in total, but not together as the topology asks",
		NextAction: "consolidation or wait", TimeCanChange: true, EarnsAging: true, Group: GroupFragmentationSpec},
	{Code: ReasonCapacityBusy, Meaning: "matching GPUs exist and are all in use",
		NextAction: "wait for release, preemption if eligible, or capacity", TimeCanChange: true, EarnsAging: true, Group: GroupCapacity},
	{Code: ReasonReservedForHigherPriority, Meaning: "matching GPUs are free but reserved for a higher-ranked waiting job",
		NextAction: "wait for the higher-ranked job named in the explanation", TimeCanChange: true, EarnsAging: true, Group: GroupQueueOrder},
	{Code: ReasonPreemptionInProgress, Meaning: "victims are being checkpointed and released for this job",
		NextAction: "wait for the preemption workflow", TimeCanChange: true, EarnsAging: true, Group: GroupCapacity},
	{Code: ReasonHeld, Meaning: "held by its owner or an operator",
		NextAction: "release the hold", Group: GroupEnvironmentOperator},
	{Code: ReasonPoolUnavailable, Meaning: "the pool is unknown, drained or cordoned",
		NextAction: "operator action on the pool", Group: GroupEnvironmentOperator},
	{Code: ReasonNotYetEvaluated, Meaning: "from submit or requeue to the first cycle that evaluated the job (never a current reason)",
		NextAction: "none: the scheduler evaluates the job at its next cycle", TimeCanChange: true, HistoryOnly: true, EarnsAging: true, Group: GroupServiceLatency},
}

// WaitReasons lists every reason a scheduling cycle can give a job (the
// catalogue without the history-only reasons), in the catalogue's order.
var WaitReasons = reasonCodes(false)

// RecordedReasons lists every reason a wait event may carry: WaitReasons,
// then the history-only reasons.
var RecordedReasons = append(reasonCodes(false), reasonCodes(true)...)

// reasonCodes returns the codes of the catalogue rows whose HistoryOnly is
// historyOnly, in the catalogue's order.
func reasonCodes(historyOnly bool) []WaitReason {
	var out []WaitReason
	for _, r := range Reasons {
		if r.HistoryOnly == historyOnly {
			out = append(out, r.Code)
		}
	}
	return out
}

// reasonIndex is Reasons by code, built once: the store and the simulator
// look a reason up for every waiting job of every cycle.
var reasonIndex = func() map[WaitReason]ReasonInfo {
	m := make(map[WaitReason]ReasonInfo, len(Reasons))
	for _, ri := range Reasons {
		m[ri.Code] = ri
	}
	return m
}()

// LookupReason returns the catalogue row of a code; ok is false for a code
// the catalogue lacks.
func LookupReason(r WaitReason) (info ReasonInfo, ok bool) {
	info, ok = reasonIndex[r]
	return info, ok
}

// Known reports whether the catalogue has the code.
func (r WaitReason) Known() bool {
	_, ok := LookupReason(r)
	return ok
}

// NextAction returns the reason's next action, or "" for an unknown code.
func (r WaitReason) NextAction() string {
	ri, _ := LookupReason(r)
	return ri.NextAction
}

// TimeCanChange reports whether the reason may change with nobody acting
// (ReasonInfo.TimeCanChange); false for an unknown code.
func (r WaitReason) TimeCanChange() bool {
	ri, _ := LookupReason(r)
	return ri.TimeCanChange
}

// HistoryOnly reports whether the reason is never a current reason
// (ReasonInfo.HistoryOnly); false for an unknown code.
func (r WaitReason) HistoryOnly() bool {
	ri, _ := LookupReason(r)
	return ri.HistoryOnly
}

// Group returns the reason's group (ReasonInfo.Group); "" for an unknown code.
func (r WaitReason) Group() ReasonGroup {
	ri, _ := LookupReason(r)
	return ri.Group
}

// EarnsAging reports whether time in the reason is waiting for GPUs and
// accrues aging credit (ReasonInfo.EarnsAging); false for an unknown code.
func (r WaitReason) EarnsAging() bool {
	ri, _ := LookupReason(r)
	return ri.EarnsAging
}
