package temporalx

import (
	"errors"

	"github.com/gpugov/gpugov/internal/scheduling"
	"github.com/gpugov/gpugov/internal/vocab"
)

// DefaultShard is the scheduler shard of every pool the policy's `shards:`
// leaves out, so of every pool without it (docs/design.md §4 "Scheduler shards").
const DefaultShard = "default"

// SchedulerWorkflowID returns the workflow ID of a shard's scheduler: "scheduler/<shard>".
func SchedulerWorkflowID(shard string) string { return "scheduler/" + shard }

// JobWorkflowID returns the workflow ID of a job: "job/<id>".
func JobWorkflowID(jobID string) string { return "job/" + jobID }

// ErrJobWorkflowClosed is the error of a signal-with-start of a job's
// workflow (workflows.Client.SignalWithStartJob) whose workflow has already
// closed: its ID-reuse policy (reject duplicate) never starts it again, so
// the signal reached no one.
var ErrJobWorkflowClosed = errors.New("the job workflow has closed and is not started again")

// Signal names. The scheduler's wake-up signals may arrive in bursts; it
// coalesces them into one scheduling cycle.
const (
	// SignalJobSubmitted wakes the scheduler: a job was stored (payload JobSubmittedSignal).
	SignalJobSubmitted = "job-submitted"
	// SignalAllocationReleased wakes the scheduler: GPUs were freed (payload AllocationReleasedSignal).
	SignalAllocationReleased = "allocation-released"
	// SignalInventoryChanged wakes the scheduler: nodes or GPUs changed (payload InventoryChangedSignal).
	SignalInventoryChanged = "inventory-changed"
	// SignalPlaced tells a job workflow it was granted an allocation (payload PlacedSignal).
	SignalPlaced = "placed"
	// SignalCancel asks a job workflow to stop (payload CancelSignal). The API
	// records the cancellation in the store (store.CancelJob) before sending it.
	SignalCancel = "cancel"
	// SignalWaitReason tells a waiting job workflow its wait reason changed (payload WaitReasonSignal).
	SignalWaitReason = "wait-reason"
)

// JobSubmittedSignal is the payload of SignalJobSubmitted.
type JobSubmittedSignal struct {
	JobID string
}

// AllocationReleasedSignal is the payload of SignalAllocationReleased.
type AllocationReleasedSignal struct {
	JobID        string
	AllocationID string
	Outcome      string // how the allocation ended: succeeded, failed or cancelled
}

// InventoryChangedSignal is the payload of SignalInventoryChanged.
type InventoryChangedSignal struct {
	Pool string // the pool whose nodes or GPUs changed; "" for several
	Node string // the node, when one
}

// PlacedSignal is the payload of SignalPlaced: the allocation granted to the job.
type PlacedSignal struct {
	AllocationID string
	CycleID      string // the scheduling cycle that granted it
	Pool         string
	Node         string                // node of the first GPU
	GPUs         []scheduling.GPUShare // GPUs (or GPU share) granted
}

// CancelSignal is the payload of SignalCancel.
type CancelSignal struct {
	Actor  string // who cancelled (user, operator, system component)
	Reason string
}

// WaitReasonSignal is the payload of SignalWaitReason.
type WaitReasonSignal struct {
	Reason vocab.WaitReason
}

// JobAttributes are what a JobWorkflow is started with besides its job ID:
// the values of its Temporal UI search attributes (QueueKey, TierKey, PoolKey,
// JobStateKey) and which executor runs it. The API computes them from the
// stored job; the job workflows' client (workflows.Client) starts with them.
type JobAttributes struct {
	Queue string
	Tier  string
	Pool  string
	State string
	// Process is true for a job with a command: its runs go to the node agent
	// of the placed node (workflows.ExecutorNode) instead of the simulated
	// executor, which runs jobs that only give run_seconds.
	Process bool
}
