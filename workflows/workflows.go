// Package workflows holds gpugov's Temporal workflows: deterministic
// orchestration only, every I/O in an activity (docs/design.md invariant 2).
//
//   - SchedulerWorkflow (ID "scheduler/<shard>") is the single writer of
//     placements: on a signal or a timer it runs one scheduling cycle and signals
//     the job workflows it placed.
//   - JobWorkflow (ID "job/<id>") carries one job from submission through its
//     run on an executor to a final state, releasing its allocation on every exit.
//   - PreemptionWorkflow (ID "preempt/<victim>/<run>/<preemption>"), a child of the
//     scheduler, carries out one preemption the scheduling cycle opened:
//     notice, checkpoint, release, requeue, verified resume.
//   - ReclaimScanWorkflow (ID "reclaim-scan") scans the active allocations
//     every scan interval and starts a ReclaimWorkflow per new finding.
//   - ReclaimWorkflow (ID "reclaim/<allocation>") handles one reclaimable
//     allocation in its mode (report, notify, confirm, auto).
//
// All five run on temporalx.ServiceTaskQueue; RegisterServiceWorker
// (worker.go) registers them with their activities, and client.go holds the
// client side: starting the scheduler, the Temporal adapter the API uses
// (Client), its background starter (Starter) and the reconciler of job
// workflows (ReconcileJobWorkflows).
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

// Workflow type names, fixed so that renaming a Go function cannot orphan
// running workflows.
const (
	SchedulerWorkflowName = "SchedulerWorkflow"
	JobWorkflowName       = "JobWorkflow"
)
