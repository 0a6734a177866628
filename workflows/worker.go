package workflows

import (
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/gpugov/gpugov/activities"
	"github.com/gpugov/gpugov/internal/executor"
	"github.com/gpugov/gpugov/internal/executor/process"
)

// This file holds the one registration function of each Temporal task queue
// gpugov's workers poll (the shape of the Temporal samples' worker.go): a
// process creates the worker for the queue and hands it to the function
// named after it.

// RegisterServiceWorker registers on w, the worker polling
// temporalx.ServiceTaskQueue, every gpugov workflow (RegisterServiceWorkflows)
// and every activity they call, on d (activities.Register): the scheduling
// cycle, the job activities, the preemption and reclaim activities, the
// notification and the experiment activities. The
// scheduler starts PreemptionWorkflows as its children by name, so all of them
// must be on this one queue.
func RegisterServiceWorker(w worker.Registry, d activities.Deps) {
	RegisterServiceWorkflows(w)
	activities.Register(w, d)
}

// RegisterServiceWorkflows registers the workflows of the service task queue
// under their fixed type names: SchedulerWorkflow, JobWorkflow,
// PreemptionWorkflow, ReclaimWorkflow, ReclaimScanWorkflow,
// NotificationDispatchWorkflow, NotifyProjectWorkflow and
// ExperimentWorkflow. It is the
// workflow half of RegisterServiceWorker, for a workflow replayer, which runs
// no activities; a worker calls RegisterServiceWorker.
func RegisterServiceWorkflows(w worker.WorkflowRegistry) {
	w.RegisterWorkflowWithOptions(SchedulerWorkflow, workflow.RegisterOptions{Name: SchedulerWorkflowName})
	w.RegisterWorkflowWithOptions(JobWorkflow, workflow.RegisterOptions{Name: JobWorkflowName})
	w.RegisterWorkflowWithOptions(PreemptionWorkflow, workflow.RegisterOptions{Name: PreemptionWorkflowName})
	w.RegisterWorkflowWithOptions(ReclaimWorkflow, workflow.RegisterOptions{Name: ReclaimWorkflowName})
	w.RegisterWorkflowWithOptions(ReclaimScanWorkflow, workflow.RegisterOptions{Name: ReclaimScanWorkflowName})
	w.RegisterWorkflowWithOptions(NotificationDispatchWorkflow, workflow.RegisterOptions{Name: NotificationDispatchWorkflowName})
	w.RegisterWorkflowWithOptions(NotifyProjectWorkflow, workflow.RegisterOptions{Name: NotifyProjectWorkflowName})
	w.RegisterWorkflowWithOptions(ExperimentWorkflow, workflow.RegisterOptions{Name: ExperimentWorkflowName})
}

// RegisterSimExecutorWorker registers e's Run as the executor.RunActivityName
// activity on w, the worker polling temporalx.SimExecutorTaskQueue: the runs
// of jobs that give only run_seconds (JobInput.Executor ExecutorSimulated).
func RegisterSimExecutorWorker(w worker.ActivityRegistry, e *executor.SimulatedExecutor) {
	w.RegisterActivityWithOptions(e.Run, activity.RegisterOptions{Name: executor.RunActivityName})
}

// RegisterNodeWorker registers a's Run as the executor.RunActivityName
// activity on w, the node agent's worker polling
// temporalx.NodeTaskQueue(a.Node): the runs of jobs with a command placed on
// that node (ExecutorNode).
func RegisterNodeWorker(w worker.ActivityRegistry, a *process.ProcessActivity) {
	w.RegisterActivityWithOptions(a.Run, activity.RegisterOptions{Name: executor.RunActivityName})
}
