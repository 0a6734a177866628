package temporalx

import (
	"errors"
	"time"

	"github.com/gpugov/gpugov/internal/scheduling"
)

// ErrReclaimClosed is the error of a reclaim decision sent to a
// ReclaimWorkflow that has already ended: no decision is awaited
// (workflows.Client.DecideReclaim returns it, the API answers 409).
var ErrReclaimClosed = errors.New("the reclaim workflow has ended")

// ReclaimScanWorkflowID is the workflow ID of the periodic reclaim scan.
const ReclaimScanWorkflowID = "reclaim-scan"

// PreemptionWorkflowID returns the workflow ID of the preemption of a
// victim's run: "preempt/<victim>/<run>". A victim placed but not yet running
// has no run; its allocation ID stands in for it.
func PreemptionWorkflowID(victimJobID, runOrAllocationID string) string {
	return "preempt/" + victimJobID + "/" + runOrAllocationID
}

// PreemptionWorkflowIDOf returns the workflow ID of one preemption of a
// victim's run: "preempt/<victim>/<run>/<preemption>". The scheduler names
// its preemptions so since the workflow change "preemption-id-per-preemption"
// (workflows.SchedulerWorkflow): a run can meet a second preemption while
// the first one's workflow is still closing (an aborted preemption lets the
// same run go on), and under the shorter ID that second start was refused
// as already started and its record left in progress for good.
func PreemptionWorkflowIDOf(victimJobID, runOrAllocationID, preemptionID string) string {
	return PreemptionWorkflowID(victimJobID, runOrAllocationID) + "/" + preemptionID
}

// ReclaimWorkflowID returns the workflow ID of the reclaim of an allocation:
// "reclaim/<allocation>".
func ReclaimWorkflowID(allocationID string) string { return "reclaim/" + allocationID }

// Preemption and reclaim signal names.
const (
	// SignalPreempt asks a job workflow to stop its run for a preemption,
	// letting the executor checkpoint (payload PreemptSignal).
	SignalPreempt = "preempt"
	// SignalPreemptAborted tells a job workflow stopped by SignalPreempt to
	// run again on the allocation it still holds (payload PreemptAbortedSignal).
	SignalPreemptAborted = "preempt-aborted"
	// SignalRunStopped tells a preemption workflow how the victim's run
	// stopped (payload RunStoppedSignal).
	SignalRunStopped = "run-stopped"
	// SignalResumed tells a preemption workflow that the victim's next run
	// started (payload ResumedSignal).
	SignalResumed = "resumed"
	// SignalReclaimKeep is the owner's objection to a reclaim (payload ReclaimDecisionSignal).
	SignalReclaimKeep = "keep"
	// SignalReclaimConfirm is an operator's approval of a reclaim (payload ReclaimDecisionSignal).
	SignalReclaimConfirm = "confirm"
)

// PreemptSignal is the payload of SignalPreempt.
type PreemptSignal struct {
	PreemptionID string
	WorkflowID   string // the preemption workflow to answer with SignalRunStopped and SignalResumed
	ForJobID     string
	RunID        string // the run to stop
	Reason       string
}

// PreemptAbortedSignal is the payload of SignalPreemptAborted.
type PreemptAbortedSignal struct {
	PreemptionID string
	Reason       string
}

// Run-stopped outcomes besides the executor's (succeeded, failed, cancelled).
const (
	StoppedPreempted  = "preempted"   // the run stopped on the notice
	StoppedNotRunning = "not-running" // the job had no run to stop
)

// RunStoppedSignal is the payload of SignalRunStopped.
type RunStoppedSignal struct {
	PreemptionID   string
	JobID          string
	RunID          string
	Outcome        string // StoppedPreempted, StoppedNotRunning, or the run's own end: succeeded, failed, cancelled
	Step           int64  // the step the run had reached when it stopped; -1 when unknown (no run result)
	LastCheckpoint *scheduling.Checkpoint
}

// ResumedSignal is the payload of SignalResumed.
type ResumedSignal struct {
	PreemptionID string
	JobID        string
	RunID        string // the new run
	StartStep    int64  // the step it was started from
	StartedAt    time.Time
}

// ReclaimDecisionSignal is the payload of SignalReclaimKeep and SignalReclaimConfirm.
type ReclaimDecisionSignal struct {
	Actor  string // the owner (keep) or operator (confirm), as the API's token names them
	Reason string
}
