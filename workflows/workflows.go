// Package workflows holds gpugov's Temporal workflows: deterministic
// orchestration only, every I/O in an activity (DESIGN.md invariant 2).
//
//   - SchedulerWorkflow (ID "scheduler/<shard>") is the single writer of
//     placements: on a signal or a timer it runs one scheduling cycle and signals
//     the job workflows it placed.
//   - JobWorkflow (ID "job/<id>") carries one job from submission through its
//     run on an executor to a final state, releasing its allocation on every exit.
//
// Workflow IDs, signal names and payloads are in internal/temporalx, so that the
// API and the activities can use them without importing this package.
//
// The scheduler sends `placed` through workflow.SignalExternalWorkflow, not
// through a Temporal client inside an activity: a placement must reach its job
// (or be released), and as a workflow command the signal is durable, retried by
// the server, replayed without being sent twice, and its failure (the job
// workflow already closed) is seen by the workflow, which then releases the
// allocation. Wait-reason signals, which only refresh a search attribute and
// can number thousands per cycle, are sent by the cycle activity instead, to
// keep them out of the scheduler's history (see activities.Scheduler).
package workflows

import (
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"
)

// Workflow type names, fixed so that renaming a Go function cannot orphan
// running workflows.
const (
	SchedulerWorkflowName = "SchedulerWorkflow"
	JobWorkflowName       = "JobWorkflow"
)

// Register registers every gpugov workflow on w (a worker polling
// temporalx.ServiceTaskQueue). Their activities are registered by
// activities.Register on the same worker; runs are served by an executor
// polling its own task queue (executor.Register for the simulated one).
func Register(w worker.WorkflowRegistry) {
	w.RegisterWorkflowWithOptions(SchedulerWorkflow, workflow.RegisterOptions{Name: SchedulerWorkflowName})
	w.RegisterWorkflowWithOptions(JobWorkflow, workflow.RegisterOptions{Name: JobWorkflowName})
}
