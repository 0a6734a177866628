package workflows

import (
	"errors"
	"fmt"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/gpugov/gpugov/activities"
	"github.com/gpugov/gpugov/internal/executor"
	"github.com/gpugov/gpugov/internal/scheduling"
	"github.com/gpugov/gpugov/internal/temporalx"
	"github.com/gpugov/gpugov/internal/vocab"
)

// Executor kinds of JobInput.Executor.
const (
	ExecutorSimulated = "simulated" // runs on temporalx.SimExecutorTaskQueue
	ExecutorNode      = "node"      // runs on the placed node's agent queue, temporalx.NodeTaskQueue(node)
)

// QueryStatus is the query name that returns a job workflow's JobStatus.
const QueryStatus = "status"

// ErrTypeJobFailed is the application error type a JobWorkflow fails with
// when its job failed; the error's details hold the JobResult.
const ErrTypeJobFailed = "JobFailed"

// Defaults of JobInput.
const (
	defaultHeartbeatTimeout = 30 * time.Second
	defaultRunAttempts      = 3
	// defaultNodeScheduleToStart bounds the wait for a node agent to take a
	// run: Slurm's default SlurmdTimeout (300 s) before it marks a silent
	// node DOWN, and Kubernetes' default 300 s before evicting pods from a
	// not-ready node. It covers an agent restart and the run activity's
	// retry backoff (at most 30 s).
	defaultNodeScheduleToStart = 300 * time.Second
	// placedSignalWait bounds how long a job cancelled while the store already
	// shows it placed waits for the scheduler's `placed` signal, so that it can
	// release that allocation itself.
	placedSignalWait = 10 * time.Minute
)

// JobInput starts a JobWorkflow. Everything about the job itself (queue, tier,
// pool, work, checkpoint interval) is read from the store by LoadJob.
type JobInput struct {
	JobID string
	// Executor is ExecutorSimulated (default when "") or ExecutorNode.
	Executor string
	// SchedulerWorkflowID is the scheduler to tell about released allocations;
	// "" means the default shard's.
	SchedulerWorkflowID string
	// HeartbeatTimeoutSeconds is how long the run may go without heartbeating
	// before Temporal retries it (the executor's worker is taken as crashed); 0 means 30.
	HeartbeatTimeoutSeconds int64
	// RunAttempts bounds the run activity's attempts (crashes included); 0 means 3.
	RunAttempts int32
	// FailAtStep makes the simulated executor fail the run at that step (a
	// trace's failed job); 0 means never.
	FailAtStep int64
	// RunScheduleToStartSeconds bounds how long a node run (ExecutorNode)
	// may wait for the node's agent to take it from its task queue; past it
	// the run fails as a node failure and the allocation is released. 0
	// means 300. Simulated runs are not bounded: a replay's backlog may
	// legitimately queue longer.
	RunScheduleToStartSeconds int64
}

// JobResult is how a job ended.
type JobResult struct {
	JobID          string
	State          vocab.JobState // vocab.JobSucceeded, JobFailed or JobCancelled
	AllocationID   string         // "" when the job was never placed
	RunID          string         // "" when no run started
	Step           int64          // the step the run reached
	LastCheckpoint *scheduling.Checkpoint
	Detail         string
	// ResumedAfterCrash is true when the run's last attempt resumed from an
	// earlier attempt's heartbeat (its executor worker crashed); it resumed at
	// ResumedFromStep and redid RecomputeSteps steps.
	ResumedAfterCrash bool
	ResumedFromStep   int64
	RecomputeSteps    int64
	// Preemptions counts the runs of this job stopped by a preemption and resumed.
	Preemptions int
}

// JobStatus is the answer to QueryStatus.
type JobStatus struct {
	JobID        string
	State        vocab.JobState
	WaitReason   vocab.WaitReason // current reason while waiting
	AllocationID string
	RunID        string
}

// JobWorkflow carries one job: it waits for the scheduler's `placed` signal,
// starts a run (MarkRunning), runs it on the executor with heartbeats, finishes
// it (FinishRun, which releases the allocation) and tells the scheduler. A
// `preempt` signal (from a PreemptionWorkflow's Notify) cancels the run
// activity so that the executor checkpoints and stops, answers the
// preemption with `run-stopped` (the step reached, the last checkpoint), and
// waits as a job again: the preemption releases the allocation, and the next
// `placed` starts a new run from the job's last checkpoint, reported to the
// preemption with `resumed`; `preempt-aborted` instead runs it again on the
// allocation it kept. A
// `cancel` signal or a Temporal cancellation stops it at any point; whatever
// the path, an allocation the job was granted is released (FinishRun or
// ReleasePlacement), on a disconnected context when the workflow itself was
// cancelled. A second `placed` with the same allocation ID is ignored. It
// returns the JobResult; a failed job fails the workflow with an
// ErrTypeJobFailed application error carrying the JobResult.
func JobWorkflow(ctx workflow.Context, in *JobInput) (*JobResult, error) {
	if in == nil || in.JobID == "" {
		return nil, temporal.NewNonRetryableApplicationError("job workflow: job ID is required", "InvalidInput", nil)
	}
	j := newJobFlow(ctx, in)
	v := workflow.GetVersion(ctx, versionLocalStoreSteps, workflow.DefaultVersion, 2)
	j.localStore, j.placedUnindexed = v >= 1, v >= 2
	if err := workflow.SetQueryHandler(ctx, QueryStatus, func() (*JobStatus, error) { return &j.status, nil }); err != nil {
		return nil, err
	}
	var job activities.LoadJobResult
	if err := j.storeStep(ctx, actLoadJob, &activities.LoadJobInput{JobID: in.JobID}).Get(ctx, &job); err != nil {
		if j.interruptedByCancel(ctx, err) {
			// Cancelled before the job was read: cancel it in the store and
			// release an allocation a cycle may already have granted.
			return j.cancelBeforePlacement(ctx, temporalCancel())
		}
		return nil, err
	}
	j.job = &job
	j.upsertJobAttributes(ctx)
	switch job.State {
	case vocab.JobSucceeded, vocab.JobFailed, vocab.JobCancelled:
		// Started again for a job that has ended (a reconciler's restart): nothing to do.
		j.setState(ctx, job.State)
		return j.finish(job.State, "job had already ended")
	case vocab.JobWaiting:
		j.setState(ctx, vocab.JobWaiting)
	default:
		j.setState(ctx, vocab.JobSubmitted)
	}
	placed, cancel := j.awaitPlacement(ctx)
	if cancel != nil {
		return j.cancelBeforePlacement(ctx, cancel)
	}
	return j.run(ctx, placed)
}

// jobFlow is the state of one JobWorkflow run.
type jobFlow struct {
	root      workflow.Context // the workflow's context; cancelled when Temporal cancels the workflow
	in        *JobInput
	job       *activities.LoadJobResult
	status    JobStatus
	placedCh  workflow.ReceiveChannel
	cancelCh  workflow.ReceiveChannel
	reasonCh  workflow.ReceiveChannel
	preemptCh workflow.ReceiveChannel
	abortedCh workflow.ReceiveChannel
	allocID   string
	runID     string
	runResult *executor.RunResult
	// preempt is the preemption stopping the current run; resumeFor the one
	// whose workflow waits to hear that the next run started.
	preempt     *temporalx.PreemptSignal
	resumeFor   *temporalx.PreemptSignal
	preemptions int
	// localStore is true from version 1 of versionLocalStoreSteps: store
	// steps run as local activities, the activity that releases the
	// allocation wakes the scheduler, and unchanged search attributes are
	// not upserted again.
	localStore bool
	// placedUnindexed is true from version 2 of versionLocalStoreSteps: the
	// `placed` state is not upserted as a search attribute (setState).
	placedUnindexed bool
}

func newJobFlow(ctx workflow.Context, in *JobInput) *jobFlow {
	return &jobFlow{
		root:      ctx,
		in:        in,
		status:    JobStatus{JobID: in.JobID},
		placedCh:  workflow.GetSignalChannel(ctx, temporalx.SignalPlaced),
		cancelCh:  workflow.GetSignalChannel(ctx, temporalx.SignalCancel),
		reasonCh:  workflow.GetSignalChannel(ctx, temporalx.SignalWaitReason),
		preemptCh: workflow.GetSignalChannel(ctx, temporalx.SignalPreempt),
		abortedCh: workflow.GetSignalChannel(ctx, temporalx.SignalPreemptAborted),
	}
}

// storeCtx gives store activities short attempts retried until they succeed:
// releasing an allocation must not be given up.
func (j *jobFlow) storeCtx(ctx workflow.Context) workflow.Context {
	return workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		StartToCloseTimeout: 30 * time.Second,
		RetryPolicy: &temporal.RetryPolicy{
			InitialInterval:    time.Second,
			BackoffCoefficient: 2,
			MaximumInterval:    time.Minute,
		},
	})
}

// versionLocalStoreSteps is the workflow.GetVersion change ID of job
// workflows whose store steps are local activities (version 1). Histories of
// version DefaultVersion (store steps as activities, the scheduler signalled
// from the workflow) replay unchanged. Version 2 also leaves the `placed`
// state out of the job-state search attribute: MarkRunning, a local
// activity, follows in the same workflow task, whose commands the server
// applies together, so `placed` was never visible before `running` replaced
// it, yet its upsert cost a history event and a search-attribute validation
// per lifecycle (docs/design.md "Throughput against the floor"). A new
// change ID would have cost a marker and a TemporalChangeVersion upsert of
// its own (GetVersion records one of each per change ID), more than it saves.
const versionLocalStoreSteps = "local-store-steps"

// versionCancelReleases is the workflow.GetVersion change ID of job
// workflows that, cancelled through Temporal while a store step runs
// (LoadJob, MarkRunning, a cleanup step), still release the allocation and
// end the job cancelled in the store (version 1; docs/design.md §3: the
// allocation is released on every exit path). Before it (DefaultVersion)
// such a workflow ended cancelled with the step's error, leaving the
// allocation held. The version is asked for only once a store step has been
// interrupted, so executions that are never cancelled there record no marker.
const versionCancelReleases = "cancel-releases-allocation"

// versionLostRunStops is the workflow.GetVersion change ID of job
// workflows that treat a run activity which times out after the workflow
// asked it to stop (a preemption notice or a cancel) as stopped: its worker
// died before it could confirm (a SIGKILLed serve or agent), so the run ends
// preempted — resuming from the last checkpoint in the store — or cancelled,
// as asked (version 1). Before it (DefaultVersion) the timeout failed the
// run, and with it the job, although the job had done nothing wrong. The
// version is asked for only on that timeout, so other executions record no
// marker (docs/design.md §7 "Crash points", found by
// e2e TestCrashAtEveryPreemptionStep).
const versionLostRunStops = "lost-run-stops"

// Names of the store activities (the methods of activities.Jobs).
const (
	actLoadJob          = "LoadJob"
	actMarkRunning      = "MarkRunning"
	actFinishRun        = "FinishRun"
	actReleasePlacement = "ReleasePlacement"
	actCancelJob        = "CancelJob"
)

// storeStep runs the store activity named name: from version 1 as a local
// activity in the workflow's own worker (a short PostgreSQL transaction does
// not need a round trip through the Temporal server's task queues: that cut
// the server's work per job lifecycle by about half), before that as an
// activity. Both retry until they succeed (storeCtx, localStoreCtx).
func (j *jobFlow) storeStep(ctx workflow.Context, name string, in any) workflow.Future {
	if j.localStore {
		return workflow.ExecuteLocalActivity(localStoreCtx(ctx), name, in)
	}
	return workflow.ExecuteActivity(j.storeCtx(ctx), name, in)
}

// localStoreCtx gives local store activities the options of storeCtx.
func localStoreCtx(ctx workflow.Context) workflow.Context {
	return workflow.WithLocalActivityOptions(ctx, workflow.LocalActivityOptions{
		StartToCloseTimeout: 30 * time.Second,
		RetryPolicy: &temporal.RetryPolicy{
			InitialInterval:    time.Second,
			BackoffCoefficient: 2,
			MaximumInterval:    time.Minute,
		},
	})
}

// schedulerID is the workflow ID of the scheduler to tell about releases.
func (j *jobFlow) schedulerID() string {
	if j.in.SchedulerWorkflowID != "" {
		return j.in.SchedulerWorkflowID
	}
	return temporalx.SchedulerWorkflowID(temporalx.DefaultShard)
}

// wakeScheduler is the SchedulerWorkflowID a releasing store step wakes: the
// scheduler from version 1, none before (the workflow signals it in end).
func (j *jobFlow) wakeScheduler() string {
	if !j.localStore {
		return ""
	}
	return j.schedulerID()
}

// awaitPlacement waits for a `placed` signal, keeping the wait-reason search
// attribute current, until placed or cancelled (by signal or by Temporal).
func (j *jobFlow) awaitPlacement(ctx workflow.Context) (*temporalx.PlacedSignal, *temporalx.CancelSignal) {
	var placed *temporalx.PlacedSignal
	var cancel *temporalx.CancelSignal
	for placed == nil && cancel == nil {
		sel := workflow.NewSelector(ctx)
		sel.AddReceive(j.cancelCh, func(c workflow.ReceiveChannel, _ bool) {
			var s temporalx.CancelSignal
			c.Receive(ctx, &s)
			cancel = &s
		})
		sel.AddReceive(j.placedCh, func(c workflow.ReceiveChannel, _ bool) {
			var s temporalx.PlacedSignal
			c.Receive(ctx, &s)
			placed = &s
		})
		sel.AddReceive(j.reasonCh, func(c workflow.ReceiveChannel, _ bool) {
			var s temporalx.WaitReasonSignal
			c.Receive(ctx, &s)
			j.setWaitReason(ctx, s.Reason)
		})
		sel.AddReceive(ctx.Done(), func(workflow.ReceiveChannel, bool) {
			cancel = &temporalx.CancelSignal{Actor: "temporal", Reason: "job workflow cancelled"}
		})
		sel.Select(ctx)
	}
	return placed, cancel
}

// cancelBeforePlacement ends a job cancelled while it waited. The store is
// told (a no-op when the API already cancelled it there). If the store shows
// the job placed, a scheduling cycle granted it an allocation whose `placed`
// signal is on its way: the workflow waits for it and releases the allocation.
func (j *jobFlow) cancelBeforePlacement(ctx workflow.Context, c *temporalx.CancelSignal) (*JobResult, error) {
	ctx = cleanupCtx(ctx)
	detail := cancelDetail(c)
	var cr activities.CancelJobResult
	ctx, err := j.cleanupStep(ctx, actCancelJob, &activities.CancelJobInput{JobID: j.in.JobID, Actor: c.Actor, Reason: c.Reason}, &cr)
	if err != nil {
		return nil, err
	}
	var job activities.LoadJobResult
	if ctx, err = j.cleanupStep(ctx, actLoadJob, &activities.LoadJobInput{JobID: j.in.JobID}, &job); err != nil {
		return nil, err
	}
	if job.State == vocab.JobPlaced {
		var p temporalx.PlacedSignal
		ok, _ := j.placedCh.ReceiveWithTimeout(ctx, placedSignalWait, &p)
		if !ok && ctx.Err() != nil && j.cancelReleases(ctx) {
			// Temporal cancelled the wait itself: wait on, disconnected.
			ctx = cleanupCtx(ctx)
			ok, _ = j.placedCh.ReceiveWithTimeout(ctx, placedSignalWait, &p)
		}
		if !ok {
			return nil, fmt.Errorf("job %s is placed in the store but no `placed` signal came within %s", j.in.JobID, placedSignalWait)
		}
		j.allocID, j.status.AllocationID = p.AllocationID, p.AllocationID
		if ctx, err = j.releasePlacement(ctx, detail); err != nil {
			return nil, err
		}
	}
	return j.end(ctx, vocab.JobCancelled, detail)
}

// run runs the job on the placed allocation and, each time a preemption
// stops it, on the next allocation the scheduler grants, until it ends.
func (j *jobFlow) run(ctx workflow.Context, p *temporalx.PlacedSignal) (*JobResult, error) {
	for {
		next, res, err := j.runOn(ctx, p)
		if next == nil {
			return res, err
		}
		p = next
	}
}

// runOn starts a run on allocation p and supervises it. It returns the next
// placement when a preemption released the allocation, else the job's end.
// A preemption aborted after the run stopped runs it again on p.
func (j *jobFlow) runOn(ctx workflow.Context, p *temporalx.PlacedSignal) (*temporalx.PlacedSignal, *JobResult, error) {
	j.allocID, j.status.AllocationID = p.AllocationID, p.AllocationID
	j.setWaitReason(ctx, "")
	j.setState(ctx, vocab.JobPlaced)
	if c := j.pendingCancel(ctx); c != nil {
		res, err := j.cancelPlaced(ctx, c)
		return nil, res, err
	}
	var mr activities.MarkRunningResult
	mrIn := &activities.MarkRunningInput{JobID: j.in.JobID, AllocationID: p.AllocationID, StartStep: j.job.ResumeStep}
	if err := j.storeStep(ctx, actMarkRunning, mrIn).Get(ctx, &mr); err != nil {
		if j.interruptedByCancel(ctx, err) {
			res, err := j.cancelWhileMarkingRunning(ctx, mrIn)
			return nil, res, err
		}
		return nil, nil, err
	}
	j.runID, j.status.RunID = mr.RunID, mr.RunID
	j.setState(ctx, vocab.JobRunning)
	j.reportResumed(ctx, &mr)
	for {
		outcome, detail := j.supervise(ctx, p)
		if outcome != vocab.RunPreempted {
			res, err := j.finishRun(ctx, outcome, detail)
			return nil, res, err
		}
		j.reportStopped(ctx, j.preempt, temporalx.StoppedPreempted)
		w := j.awaitAfterPreemption(ctx)
		switch {
		case w.cancel != nil:
			res, err := j.cancelPreempted(ctx, w.cancel)
			return nil, res, err
		case w.placed != nil:
			j.resumeFor, j.preempt = j.preempt, nil
			if err := j.reloadJob(ctx); err != nil {
				if j.interruptedByCancel(ctx, err) {
					// The new allocation never got a run: release it.
					j.allocID, j.status.AllocationID = w.placed.AllocationID, w.placed.AllocationID
					res, err := j.cancelPlaced(ctx, temporalCancel())
					return nil, res, err
				}
				return nil, nil, err
			}
			return w.placed, nil, nil
		}
		// The preemption was aborted: the allocation is still held; run again
		// from the job's last checkpoint.
		j.preempt = nil
		if err := j.reloadJob(ctx); err != nil {
			if j.interruptedByCancel(ctx, err) {
				// The stopped run still holds the allocation: end it cancelled.
				res, err := j.finishRun(ctx, vocab.RunCancelled, cancelDetail(temporalCancel()))
				return nil, res, err
			}
			return nil, nil, err
		}
		j.setWaitReason(ctx, "")
		j.setState(ctx, vocab.JobRunning)
	}
}

// finishRun ends the run with outcome (FinishRun releases the allocation),
// tells a preemption that raced with the run's own end how it ended, and
// ends the job.
func (j *jobFlow) finishRun(ctx workflow.Context, outcome vocab.RunOutcome, detail string) (*JobResult, error) {
	ctx = cleanupCtx(ctx)
	ctx, err := j.cleanupStep(ctx, actFinishRun, &activities.FinishRunInput{JobID: j.in.JobID, RunID: j.runID, Outcome: outcome,
		Detail: detail, SchedulerWorkflowID: j.wakeScheduler(), CrashResume: j.crashResume()}, nil)
	if err != nil {
		return nil, err
	}
	if j.preempt != nil {
		j.reportStopped(ctx, j.preempt, string(outcome))
	}
	return j.end(ctx, outcome.EndsJobAs(), detail)
}

// crashResume describes the run's resume after a crash of its executor or
// node agent, when its last attempt resumed from a checkpoint (a step
// beyond 0: a restart from scratch restores nothing); nil otherwise.
// (Evidence for the job's recovery profile; an input field only, so
// histories replay unchanged.)
func (j *jobFlow) crashResume() *activities.CrashResume {
	r := j.runResult
	if r == nil || !r.ResumedAfterCrash || r.StartStep <= 0 {
		return nil
	}
	return &activities.CrashResume{FromStep: r.StartStep, Step: r.Step, ReportedStartStep: r.ReportedStartStep}
}

// reloadJob reads the job again: its last checkpoint is the next run's start.
func (j *jobFlow) reloadJob(ctx workflow.Context) error {
	var job activities.LoadJobResult
	if err := j.storeStep(ctx, actLoadJob, &activities.LoadJobInput{JobID: j.in.JobID}).Get(ctx, &job); err != nil {
		return err
	}
	j.job = &job
	return nil
}

// afterPreemption is what ended the wait of a preempted job.
type afterPreemption struct {
	placed *temporalx.PlacedSignal // a new allocation
	cancel *temporalx.CancelSignal
	// neither: the preemption was aborted
}

// awaitAfterPreemption waits, as a waiting job, for a new placement, the
// preemption's abort, or a cancellation. A repeated `preempt` is answered
// again; one for another preemption is answered that no run is going.
func (j *jobFlow) awaitAfterPreemption(ctx workflow.Context) afterPreemption {
	j.setState(ctx, vocab.JobWaiting)
	var w afterPreemption
	for done := false; !done; {
		sel := workflow.NewSelector(ctx)
		sel.AddReceive(j.placedCh, func(c workflow.ReceiveChannel, _ bool) {
			var s temporalx.PlacedSignal
			c.Receive(ctx, &s)
			if s.AllocationID != j.allocID {
				w.placed, done = &s, true
			}
		})
		sel.AddReceive(j.abortedCh, func(c workflow.ReceiveChannel, _ bool) {
			var s temporalx.PreemptAbortedSignal
			c.Receive(ctx, &s)
			done = s.PreemptionID == j.preempt.PreemptionID
		})
		sel.AddReceive(j.cancelCh, func(c workflow.ReceiveChannel, _ bool) {
			w.cancel = &temporalx.CancelSignal{}
			c.Receive(ctx, w.cancel)
			done = true
		})
		sel.AddReceive(ctx.Done(), func(workflow.ReceiveChannel, bool) {
			w.cancel, done = &temporalx.CancelSignal{Actor: "temporal", Reason: "job workflow cancelled"}, true
		})
		sel.AddReceive(j.reasonCh, func(c workflow.ReceiveChannel, _ bool) {
			var s temporalx.WaitReasonSignal
			c.Receive(ctx, &s)
			j.setWaitReason(ctx, s.Reason)
		})
		sel.AddReceive(j.preemptCh, func(c workflow.ReceiveChannel, _ bool) {
			var s temporalx.PreemptSignal
			c.Receive(ctx, &s)
			if s.PreemptionID == j.preempt.PreemptionID {
				j.reportStopped(ctx, &s, temporalx.StoppedPreempted)
			} else {
				j.reportStopped(ctx, &s, temporalx.StoppedNotRunning)
			}
		})
		sel.Select(ctx)
	}
	return w
}

// cancelPreempted ends a job cancelled while its preempted run waited for
// release: the run ends cancelled (a no-op when the preemption already
// released it) and the job is cancelled in the store.
func (j *jobFlow) cancelPreempted(ctx workflow.Context, c *temporalx.CancelSignal) (*JobResult, error) {
	ctx = cleanupCtx(ctx)
	detail := cancelDetail(c)
	ctx, err := j.cleanupStep(ctx, actFinishRun, &activities.FinishRunInput{JobID: j.in.JobID, RunID: j.runID, Outcome: vocab.RunCancelled,
		Detail: detail, SchedulerWorkflowID: j.wakeScheduler()}, nil)
	if err != nil {
		return nil, err
	}
	if ctx, err = j.cleanupStep(ctx, actCancelJob, &activities.CancelJobInput{JobID: j.in.JobID, Actor: c.Actor, Reason: c.Reason}, nil); err != nil {
		return nil, err
	}
	return j.end(ctx, vocab.JobCancelled, detail)
}

// reportStopped answers a preemption's `preempt` with how the run stopped.
// A failed send is logged: the preemption's grace timer covers it.
func (j *jobFlow) reportStopped(ctx workflow.Context, s *temporalx.PreemptSignal, outcome string) {
	if s == nil || s.WorkflowID == "" {
		return
	}
	msg := temporalx.RunStoppedSignal{PreemptionID: s.PreemptionID, JobID: j.in.JobID, RunID: j.runID, Outcome: outcome, Step: -1}
	if r := j.runResult; r != nil && outcome != temporalx.StoppedNotRunning {
		msg.Step, msg.LastCheckpoint = r.Step, r.LastCheckpoint
	}
	if outcome == temporalx.StoppedNotRunning {
		msg.RunID = s.RunID
	}
	if err := workflow.SignalExternalWorkflow(ctx, s.WorkflowID, "", temporalx.SignalRunStopped, msg).Get(ctx, nil); err != nil {
		workflow.GetLogger(ctx).Warn("could not answer the preemption", "preemption", s.WorkflowID, "error", err)
	}
}

// reportResumed tells the preemption that stopped the previous run that
// this run started, and from which step.
func (j *jobFlow) reportResumed(ctx workflow.Context, mr *activities.MarkRunningResult) {
	s := j.resumeFor
	if s == nil {
		return
	}
	j.resumeFor = nil
	j.preemptions++
	err := workflow.SignalExternalWorkflow(ctx, s.WorkflowID, "", temporalx.SignalResumed, temporalx.ResumedSignal{
		PreemptionID: s.PreemptionID, JobID: j.in.JobID, RunID: mr.RunID, StartStep: j.job.ResumeStep, StartedAt: mr.StartedAt}).Get(ctx, nil)
	if err != nil {
		workflow.GetLogger(ctx).Warn("could not report the resume", "preemption", s.WorkflowID, "error", err)
	}
}

// supervise runs the executor's run activity until it ends, cancelling it on a
// `cancel` signal or Temporal cancellation, and returns the outcome.
func (j *jobFlow) supervise(ctx workflow.Context, p *temporalx.PlacedSignal) (outcome vocab.RunOutcome, detail string) {
	runCtx, cancelRun := workflow.WithCancel(ctx)
	fut := workflow.ExecuteActivity(j.runCtx(runCtx, p), executor.RunActivityName, &executor.RunInput{
		JobID: j.in.JobID, RunID: j.runID, AllocationID: p.AllocationID, Node: p.Node, GPUs: p.GPUs,
		RunSeconds: j.job.RunSeconds, StartStep: j.job.ResumeStep,
		CheckpointIntervalSeconds: j.job.CheckpointIntervalSeconds, FailAtStep: j.in.FailAtStep,
	})
	var cancel *temporalx.CancelSignal
	done := false
	for !done {
		sel := workflow.NewSelector(ctx)
		sel.AddFuture(fut, func(workflow.Future) { done = true })
		sel.AddReceive(j.placedCh, func(c workflow.ReceiveChannel, _ bool) { j.ignorePlaced(ctx, c) })
		sel.AddReceive(j.reasonCh, func(c workflow.ReceiveChannel, _ bool) { c.Receive(ctx, nil) })
		sel.AddReceive(j.preemptCh, func(c workflow.ReceiveChannel, _ bool) {
			if j.takePreempt(ctx, c) && cancel == nil {
				cancelRun()
			}
		})
		if cancel == nil {
			sel.AddReceive(j.cancelCh, func(c workflow.ReceiveChannel, _ bool) {
				cancel = &temporalx.CancelSignal{}
				c.Receive(ctx, cancel)
				cancelRun()
			})
			sel.AddReceive(ctx.Done(), func(workflow.ReceiveChannel, bool) {
				// runCtx is a child of ctx: the run is being cancelled already.
				cancel = &temporalx.CancelSignal{Actor: "temporal", Reason: "job workflow cancelled"}
			})
		}
		sel.Select(ctx)
	}
	var res executor.RunResult
	err := fut.Get(ctx, &res)
	switch {
	case err == nil:
		j.runResult = &res
		if res.Outcome == vocab.RunCancelled && cancel != nil {
			return vocab.RunCancelled, cancelDetail(cancel) + "; " + res.Detail
		}
		if res.Outcome == vocab.RunCancelled && j.preempt != nil {
			return vocab.RunPreempted, res.Detail
		}
		return res.Outcome, res.Detail
	case temporal.IsCanceledError(err) && cancel != nil:
		return vocab.RunCancelled, cancelDetail(cancel)
	case temporal.IsCanceledError(err) && j.preempt != nil:
		// No result: the step reached is unknown; the checkpoint the executor
		// saved is in the store, where the preemption reads it.
		j.runResult = nil
		return vocab.RunPreempted, "run activity cancelled by preemption " + j.preempt.PreemptionID
	// A cancel wins over a preemption, as in the cases above.
	case cancel != nil && isRunLost(err) && j.lostRunStops(ctx):
		return vocab.RunCancelled, cancelDetail(cancel) + fmt.Sprintf("; the run's worker was lost before it confirmed the stop (%v)", err)
	case j.preempt != nil && isRunLost(err) && j.lostRunStops(ctx):
		j.runResult = nil
		return vocab.RunPreempted, fmt.Sprintf("the run's worker was lost after the notice of preemption %s (%v); "+
			"it resumes from its last stored checkpoint", j.preempt.PreemptionID, err)
	case isScheduleToStartTimeout(err):
		// Slurm's NODE_FAIL: no agent serves the node (down, or never started).
		return vocab.RunFailed, fmt.Sprintf("node failure: no agent on node %s took the run within %s (agent down or not serving %s)",
			p.Node, j.nodeScheduleToStart(), temporalx.NodeTaskQueue(p.Node))
	default:
		return vocab.RunFailed, "run failed: " + err.Error()
	}
}

// isRunLost reports whether err is a run activity's heartbeat or
// start-to-close timeout: the worker running the attempt stopped answering.
func isRunLost(err error) bool {
	var te *temporal.TimeoutError
	return errors.As(err, &te) && (te.TimeoutType() == enumspb.TIMEOUT_TYPE_HEARTBEAT || te.TimeoutType() == enumspb.TIMEOUT_TYPE_START_TO_CLOSE)
}

// lostRunStops reports whether this execution treats a run lost after a
// stop request as stopped (versionLostRunStops).
func (j *jobFlow) lostRunStops(ctx workflow.Context) bool {
	return workflow.GetVersion(ctx, versionLostRunStops, workflow.DefaultVersion, 1) >= 1
}

// isScheduleToStartTimeout reports whether err is a run activity that no
// worker took from its task queue in time.
func isScheduleToStartTimeout(err error) bool {
	var te *temporal.TimeoutError
	return errors.As(err, &te) && te.TimeoutType() == enumspb.TIMEOUT_TYPE_SCHEDULE_TO_START
}

// runCtx gives the run activity the executor's task queue, a heartbeat
// timeout (a crashed worker's attempt is retried and resumes from its last
// heartbeat), the start-to-close bound of runLimit, and
// waits for the executor to acknowledge a cancellation.
func (j *jobFlow) runCtx(ctx workflow.Context, p *temporalx.PlacedSignal) workflow.Context {
	queue := temporalx.SimExecutorTaskQueue
	var scheduleToStart time.Duration
	if j.in.Executor == ExecutorNode {
		queue = temporalx.NodeTaskQueue(p.Node)
		scheduleToStart = j.nodeScheduleToStart()
	}
	hb := defaultHeartbeatTimeout
	if j.in.HeartbeatTimeoutSeconds > 0 {
		hb = time.Duration(j.in.HeartbeatTimeoutSeconds) * time.Second
	}
	attempts := j.in.RunAttempts
	if attempts <= 0 {
		attempts = defaultRunAttempts
	}
	ctx = workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		TaskQueue:              queue,
		ScheduleToStartTimeout: scheduleToStart,
		StartToCloseTimeout:    j.runLimit(),
		HeartbeatTimeout:       hb,
		WaitForCancellation:    true,
		RetryPolicy: &temporal.RetryPolicy{
			InitialInterval:    time.Second,
			BackoffCoefficient: 2,
			MaximumInterval:    30 * time.Second,
			MaximumAttempts:    attempts,
		},
	})
	return ctx
}

// nodeScheduleToStart is the bound on a node agent taking a run attempt.
func (j *jobFlow) nodeScheduleToStart() time.Duration {
	if j.in.RunScheduleToStartSeconds > 0 {
		return time.Duration(j.in.RunScheduleToStartSeconds) * time.Second
	}
	return defaultNodeScheduleToStart
}

// nodeRunLimit bounds a node agent's run when the job gives no run_seconds: a
// real job's length is unknown, and a crashed agent is caught by the heartbeat
// timeout, not by this bound (Slurm's default partition MaxTime is likewise
// unlimited; a week keeps a lost run from holding GPUs forever).
const nodeRunLimit = 7 * 24 * time.Hour

// runLimit is the run activity's start-to-close bound: twice the job's work
// plus an hour, or nodeRunLimit for node runs of unknown length.
func (j *jobFlow) runLimit() time.Duration {
	if j.job.RunSeconds <= 0 && j.in.Executor == ExecutorNode {
		return nodeRunLimit
	}
	return time.Duration(2*j.job.RunSeconds)*time.Second + time.Hour
}

// takePreempt consumes a `preempt` signal during a run and reports whether
// it is one to act on: for this run (or any, when it names none) and the
// first preemption. A repeat of the preemption already stopping the run is
// dropped; one for another run is answered that no such run is going.
func (j *jobFlow) takePreempt(ctx workflow.Context, c workflow.ReceiveChannel) bool {
	var s temporalx.PreemptSignal
	c.Receive(ctx, &s)
	switch {
	case j.preempt != nil:
		return false
	case s.RunID != "" && s.RunID != j.runID:
		j.reportStopped(ctx, &s, temporalx.StoppedNotRunning)
		return false
	}
	j.preempt = &s
	return true
}

// ignorePlaced consumes a `placed` signal received after placement. The store
// lets a job hold one allocation at a time, so it can only repeat the one held.
func (j *jobFlow) ignorePlaced(ctx workflow.Context, c workflow.ReceiveChannel) {
	var s temporalx.PlacedSignal
	c.Receive(ctx, &s)
	if s.AllocationID != j.allocID {
		workflow.GetLogger(ctx).Error("placed signal for a second allocation ignored",
			"job", j.in.JobID, "held", j.allocID, "signalled", s.AllocationID)
	}
}

// pendingCancel returns a cancellation that arrived (signal or Temporal) and
// has not been handled, without blocking.
func (j *jobFlow) pendingCancel(ctx workflow.Context) *temporalx.CancelSignal {
	var c temporalx.CancelSignal
	if j.cancelCh.ReceiveAsync(&c) {
		return &c
	}
	if ctx.Err() != nil {
		return temporalCancel()
	}
	return nil
}

// temporalCancel is the cancellation a Temporal cancellation request stands for.
func temporalCancel() *temporalx.CancelSignal {
	return &temporalx.CancelSignal{Actor: "temporal", Reason: "job workflow cancelled"}
}

// releasePlacement releases the held allocation that never got a run. A
// Temporal cancellation that interrupts it is handled as cleanupStep does.
func (j *jobFlow) releasePlacement(ctx workflow.Context, detail string) (workflow.Context, error) {
	return j.cleanupStep(ctx, actReleasePlacement, &activities.ReleasePlacementInput{
		JobID: j.in.JobID, AllocationID: j.allocID, Outcome: vocab.RunCancelled, Detail: detail, SchedulerWorkflowID: j.wakeScheduler(),
	}, nil)
}

// cancelPlaced ends a job cancelled (c) while it held allocation j.allocID
// without a run: the allocation is released (which ends the job cancelled in
// the store) and the job ends cancelled.
func (j *jobFlow) cancelPlaced(ctx workflow.Context, c *temporalx.CancelSignal) (*JobResult, error) {
	ctx, err := j.releasePlacement(cleanupCtx(ctx), cancelDetail(c))
	if err != nil {
		return nil, err
	}
	return j.end(ctx, vocab.JobCancelled, cancelDetail(c))
}

// cancelWhileMarkingRunning ends a job whose MarkRunning (in) Temporal's
// cancellation interrupted. Whether the interrupted step created the run is
// unknown (a cancelled local activity's transaction may still commit), so
// MarkRunning runs again, disconnected: it is idempotent per allocation and
// returns the run either way. FinishRun then ends that run cancelled, which
// releases the allocation and cancels the job in the store.
func (j *jobFlow) cancelWhileMarkingRunning(ctx workflow.Context, in *activities.MarkRunningInput) (*JobResult, error) {
	ctx = cleanupCtx(ctx)
	var mr activities.MarkRunningResult
	if err := j.storeStep(ctx, actMarkRunning, in).Get(ctx, &mr); err != nil {
		return nil, err
	}
	j.runID, j.status.RunID = mr.RunID, mr.RunID
	return j.finishRun(ctx, vocab.RunCancelled, cancelDetail(temporalCancel()))
}

// cancelReleases reports whether this execution handles a Temporal
// cancellation that interrupts a store step by releasing what the job holds
// (version 1 of versionCancelReleases). Call it only once a step has been
// interrupted: it records the version marker on its first call.
func (j *jobFlow) cancelReleases(ctx workflow.Context) bool {
	return workflow.GetVersion(ctx, versionCancelReleases, workflow.DefaultVersion, 1) >= 1
}

// interruptedByCancel reports whether err is a store step's cancellation by
// a Temporal cancellation of the workflow, to be handled by releasing what the
// job holds (from version 1 of versionCancelReleases).
func (j *jobFlow) interruptedByCancel(ctx workflow.Context, err error) bool {
	return temporal.IsCanceledError(err) && ctx.Err() != nil && j.cancelReleases(ctx)
}

// cleanupStep runs the store step name (in, its result into out when out is
// not nil) on a cleanup path. When a Temporal cancellation interrupts it
// there, it runs again on a disconnected context (every store step is
// idempotent), so that releasing the allocation is not given up. It returns
// the context to go on with: ctx, or the disconnected one.
func (j *jobFlow) cleanupStep(ctx workflow.Context, name string, in, out any) (workflow.Context, error) {
	err := j.storeStep(ctx, name, in).Get(ctx, out)
	if err == nil || !j.interruptedByCancel(ctx, err) {
		return ctx, err
	}
	ctx = cleanupCtx(ctx)
	return ctx, j.storeStep(ctx, name, in).Get(ctx, out)
}

// end records the final state, tells the scheduler that the allocation (if
// any) is free, and returns the result.
func (j *jobFlow) end(ctx workflow.Context, state vocab.JobState, detail string) (*JobResult, error) {
	j.setState(ctx, state)
	if j.allocID != "" && !j.localStore {
		sched := j.schedulerID()
		err := workflow.SignalExternalWorkflow(ctx, sched, "", temporalx.SignalAllocationReleased,
			temporalx.AllocationReleasedSignal{JobID: j.in.JobID, AllocationID: j.allocID, Outcome: string(state)}).Get(ctx, nil)
		if err != nil {
			// The scheduler's timer cycle picks the free GPUs up anyway.
			workflow.GetLogger(ctx).Warn("could not signal the scheduler", "scheduler", sched, "error", err)
		}
	}
	return j.finish(state, detail)
}

// finish builds the result and the workflow's outcome for state.
func (j *jobFlow) finish(state vocab.JobState, detail string) (*JobResult, error) {
	res := &JobResult{JobID: j.in.JobID, State: state, AllocationID: j.allocID, RunID: j.runID, Detail: detail}
	if r := j.runResult; r != nil {
		res.Step, res.LastCheckpoint = r.Step, r.LastCheckpoint
		res.ResumedAfterCrash, res.ResumedFromStep, res.RecomputeSteps = r.ResumedAfterCrash, r.StartStep, r.RecomputeSteps
	}
	res.Preemptions = j.preemptions
	switch {
	case state == vocab.JobFailed:
		return nil, temporal.NewNonRetryableApplicationError(fmt.Sprintf("job %s failed: %s", j.in.JobID, detail), ErrTypeJobFailed, nil, res)
	case state == vocab.JobCancelled && errors.Is(j.root.Err(), workflow.ErrCanceled):
		return nil, temporal.NewCanceledError(res)
	}
	return res, nil
}

// setState upserts the job-state search attribute when it changes; from
// version 2 of versionLocalStoreSteps not for `placed` (the query status
// still shows it). While MarkRunning retries (PostgreSQL unreachable), the
// attribute then keeps the state before placement; the store, which the
// API reads, has the job placed.
func (j *jobFlow) setState(ctx workflow.Context, state vocab.JobState) {
	if j.status.State == state {
		return
	}
	j.status.State = state
	if j.localStore && j.keywordIs(ctx, temporalx.JobStateKey, string(state)) {
		return // set at start by the API
	}
	if j.placedUnindexed && state == vocab.JobPlaced {
		return // `running` follows in the same workflow task (versionLocalStoreSteps)
	}
	j.upsert(ctx, temporalx.JobStateKey.ValueSet(string(state)))
}

// upsertJobAttributes sets the queue, tier and pool search attributes. From
// version 1 those the workflow was started with (the API sets them) are not
// upserted again: each upsert is a history event and a visibility write.
func (j *jobFlow) upsertJobAttributes(ctx workflow.Context) {
	want := []struct {
		key   temporal.SearchAttributeKeyKeyword
		value string
	}{{temporalx.QueueKey, j.job.Queue}, {temporalx.TierKey, j.job.Tier}, {temporalx.PoolKey, j.job.Pool}}
	var u []temporal.SearchAttributeUpdate
	for _, w := range want {
		if !j.localStore || !j.keywordIs(ctx, w.key, w.value) {
			u = append(u, w.key.ValueSet(w.value))
		}
	}
	if len(u) > 0 {
		j.upsert(ctx, u...)
	}
}

// keywordIs reports whether the workflow's keyword search attribute key holds value.
func (j *jobFlow) keywordIs(ctx workflow.Context, key temporal.SearchAttributeKeyKeyword, value string) bool {
	got, ok := workflow.GetTypedSearchAttributes(ctx).GetKeyword(key)
	return ok && got == value
}

// setWaitReason upserts the wait-reason search attribute when it changes; ""
// unsets it. A reason also means the job is waiting.
func (j *jobFlow) setWaitReason(ctx workflow.Context, r vocab.WaitReason) {
	if r != "" {
		j.setState(ctx, vocab.JobWaiting)
	}
	if j.status.WaitReason == r {
		return
	}
	j.status.WaitReason = r
	if r == "" {
		j.upsert(ctx, temporalx.WaitReasonKey.ValueUnset())
		return
	}
	j.upsert(ctx, temporalx.WaitReasonKey.ValueSet(string(r)))
}

// upsert sets search attributes; a failure (an attribute not registered on
// the namespace) is logged, never fatal to the job.
func (j *jobFlow) upsert(ctx workflow.Context, u ...temporal.SearchAttributeUpdate) {
	if err := workflow.UpsertTypedSearchAttributes(ctx, u...); err != nil {
		workflow.GetLogger(ctx).Warn("upsert search attributes", "job", j.in.JobID, "error", err)
	}
}

// cleanupCtx returns ctx, or a context disconnected from it when ctx was
// cancelled, so that releasing the allocation still runs.
func cleanupCtx(ctx workflow.Context) workflow.Context {
	if ctx.Err() == nil {
		return ctx
	}
	dc, _ := workflow.NewDisconnectedContext(ctx)
	return dc
}

func cancelDetail(c *temporalx.CancelSignal) string {
	return fmt.Sprintf("cancelled by %s: %s", c.Actor, c.Reason)
}
