package workflows

import (
	"cmp"
	"context"
	"errors"
	"fmt"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	"github.com/gpugov/gpugov/internal/temporalx"
)

// StartScheduler starts the shard's SchedulerWorkflow on the service task
// queue, or returns the running one (so `serve` can call it at every start).
// It returns the client's error when the server refuses.
func StartScheduler(ctx context.Context, c client.Client, in *SchedulerInput) (client.WorkflowRun, error) {
	in = schedulerInput(in)
	run, err := c.ExecuteWorkflow(ctx, schedulerStartOptions(in), SchedulerWorkflowName, in)
	if err != nil {
		return nil, fmt.Errorf("start scheduler %s: %w", in.Shard, err)
	}
	return run, nil
}

// JobStartOptions are the options every start of a job's JobWorkflow uses:
// ID "job/<id>" on the service task queue; a running workflow with that ID is
// reused (conflict policy use-existing) and a closed one is never started
// again (reuse policy reject-duplicate), so a retried submission or the
// reconciler may start it any number of times; eager start hands the first
// workflow task to a worker of the same process when the server allows it.
// Callers may add search attributes.
func JobStartOptions(jobID string) client.StartWorkflowOptions {
	return client.StartWorkflowOptions{
		ID:                       temporalx.JobWorkflowID(jobID),
		TaskQueue:                temporalx.ServiceTaskQueue,
		WorkflowIDReusePolicy:    enumspb.WORKFLOW_ID_REUSE_POLICY_REJECT_DUPLICATE,
		WorkflowIDConflictPolicy: enumspb.WORKFLOW_ID_CONFLICT_POLICY_USE_EXISTING,
		EnableEagerStart:         true,
	}
}

// Client is what the API asks of the workflows (api.Workflows,
// api.GovernanceWorkflows and api.ExperimentWorkflows), on a Temporal
// client: start a job's workflow, cancel it, wake the scheduler, send a
// reclaim decision, start an experiment's workflow and send it a decision. Names (task queue,
// workflow IDs, signals, search attributes) come from temporalx and this
// package so that the API, the worker and the Temporal UI agree. Create it
// with NewClient.
type Client struct {
	client client.Client
	opts   ClientOptions
	waker  *temporalx.Waker
	ledger StartLedger // the jobs whose StartJob Temporal accepted
}

// ClientOptions configures Client.
type ClientOptions struct {
	// JobInput is the template of every JobWorkflow's input (executor,
	// heartbeat timeout, run attempts); StartJob sets its JobID.
	JobInput JobInput
	// SchedulerWorkflowID is the scheduler NotifySubmitted signals; "" means
	// the default shard's, "scheduler/default".
	SchedulerWorkflowID string
	// ShardOf, when set, names the scheduler shard of a pool (the policy in
	// force's, policy.Policy.PoolShards, "default" for a pool it leaves
	// out): StartJob gives each job workflow its pool's scheduler
	// ("scheduler/<shard>") unless the JobInput template names one.
	ShardOf func(pool string) string
	// Shards, when set, lists the shards whose schedulers NotifySubmitted
	// wakes (the submission's pool is not known there; each wake is
	// coalesced per scheduler); nil wakes SchedulerWorkflowID only.
	Shards func() []string
	// SearchAttributes makes StartJob attach GpugovQueue, GpugovTier,
	// GpugovPool and GpugovJobState; they must be registered on the namespace
	// (temporalx.RegisterSearchAttributes), or the start fails.
	SearchAttributes bool
}

// NewClient returns the job workflows' client on c.
func NewClient(c client.Client, o ClientOptions) *Client {
	if o.SchedulerWorkflowID == "" {
		o.SchedulerWorkflowID = temporalx.SchedulerWorkflowID(temporalx.DefaultShard)
	}
	return &Client{client: c, opts: o, waker: temporalx.NewWaker(c, 0, nil)}
}

// StartJob starts JobWorkflow with JobStartOptions (ID "job/<id>") and the
// JobInput template, on the node agent's executor when attrs.Process
// (jobStart). It is idempotent: a running workflow with that ID is reused
// and a closed one is never started again (its "already started" answer
// counts as success), so a retried submit, the reconciler, or a start racing
// with a placement's SignalWithStartJob may call it any number of times. It
// returns the client's error when the server refuses otherwise. A start
// Temporal accepted is recorded in t's Ledger.
func (t *Client) StartJob(ctx context.Context, jobID string, attrs temporalx.JobAttributes) error {
	opts, in := t.jobStart(jobID, attrs)
	_, err := t.client.ExecuteWorkflow(ctx, opts, JobWorkflowName, in)
	if err != nil && !temporal.IsWorkflowExecutionAlreadyStartedError(err) {
		return fmt.Errorf("start %s: %w", opts.ID, err)
	}
	t.ledger.Confirm(jobID)
	return nil
}

// SignalWithStartJob sends signal with arg to the job's JobWorkflow,
// starting the workflow first, with the options and input StartJob uses
// (jobStart), when it was never started: SignalPlacements so hands a
// placement to a job whose workflow the background starter or reconciler has
// not started yet, instead of releasing it (docs/design.md §3 step 2
// "Wait"). A running workflow is only signalled (conflict policy
// use-existing), so a StartJob racing with it starts no second one. A
// workflow that has closed is not started again (reuse policy reject
// duplicate): that is an error matching temporalx.ErrJobWorkflowClosed. Other
// refusals are the client's error. A workflow started or found running is
// recorded in t's Ledger, as by StartJob.
func (t *Client) SignalWithStartJob(ctx context.Context, jobID string, attrs temporalx.JobAttributes, signal string, arg any) error {
	opts, in := t.jobStart(jobID, attrs)
	_, err := t.client.SignalWithStartWorkflow(ctx, opts.ID, signal, arg, opts, JobWorkflowName, in)
	if temporal.IsWorkflowExecutionAlreadyStartedError(err) {
		t.ledger.Confirm(jobID) // it exists, closed: no start needed
		return fmt.Errorf("signal-with-start %s to %s: %w (%w)", signal, opts.ID, temporalx.ErrJobWorkflowClosed, err)
	}
	if err != nil {
		return fmt.Errorf("signal-with-start %s to %s: %w", signal, opts.ID, err)
	}
	t.ledger.Confirm(jobID)
	return nil
}

// jobStart returns the options and input of every start of job jobID's
// JobWorkflow: JobStartOptions, with the GpugovQueue, GpugovTier, GpugovPool
// and GpugovJobState search attributes of attrs when
// ClientOptions.SearchAttributes, and the JobInput template with the job's
// ID, its pool's scheduler (ClientOptions.ShardOf) and the node executor
// when attrs.Process.
func (t *Client) jobStart(jobID string, attrs temporalx.JobAttributes) (client.StartWorkflowOptions, *JobInput) {
	opts := JobStartOptions(jobID)
	if t.opts.SearchAttributes {
		opts.TypedSearchAttributes = temporal.NewSearchAttributes(
			temporalx.QueueKey.ValueSet(attrs.Queue),
			temporalx.TierKey.ValueSet(attrs.Tier),
			temporalx.PoolKey.ValueSet(attrs.Pool),
			temporalx.JobStateKey.ValueSet(attrs.State),
		)
	}
	in := t.opts.JobInput
	in.JobID = jobID
	if in.SchedulerWorkflowID == "" && t.opts.ShardOf != nil {
		// The job's releases wake its own pool's shard (docs/design.md §4
		// "Scheduler shards"); the ID is fixed at start, so after a move
		// they wake the old shard, whose cycles leave the pool alone, and
		// the new shard's timer cycle serves them.
		in.SchedulerWorkflowID = temporalx.SchedulerWorkflowID(t.opts.ShardOf(attrs.Pool))
	}
	if attrs.Process {
		in.Executor = ExecutorNode
	}
	return opts, &in
}

// Ledger is the StartLedger of the jobs whose StartJob Temporal accepted
// through t, for ReconcileJobWorkflows.
func (t *Client) Ledger() *StartLedger { return &t.ledger }

// CancelJob sends the "cancel" signal, with who and why, to job jobID's
// workflow by signal-with-start (SignalWithStartJob, with attrs as a start
// would give them): a job cancelled before the background starter or the
// reconciler started its workflow — a submission answered 202 — gets the
// workflow that records its end, which reads the job cancelled and ends at
// once (docs/design.md §3 step 1 "Submit"). A workflow that has already
// closed is not an error: there is nothing left to stop. Other failures are
// the client's error; the reconciler then starts the workflow of a job
// cancelled without one (ReconcileCancelledWithin).
func (t *Client) CancelJob(ctx context.Context, jobID string, attrs temporalx.JobAttributes, actor, reason string) error {
	err := t.SignalWithStartJob(ctx, jobID, attrs, temporalx.SignalCancel, temporalx.CancelSignal{Actor: actor, Reason: reason})
	if err != nil && !errors.Is(err, temporalx.ErrJobWorkflowClosed) {
		return err
	}
	return nil
}

// NotifySubmitted asks for "job-submitted" to be sent to the scheduler
// workflow so that a scheduling cycle runs now rather than at its next timer.
// It does not wait: signals are coalesced by a temporalx.Waker (a burst of
// submissions costs about one signal per 250 ms, not one each), and a failed
// signal is only logged, since the scheduler's timer runs a cycle anyway. The
// scheduler is started by serve (StartScheduler), not here, because its input
// belongs to serve's config. It always returns nil.
func (t *Client) NotifySubmitted(_ context.Context, _ string) error {
	if t.opts.Shards == nil {
		t.waker.Wake(t.opts.SchedulerWorkflowID, temporalx.SignalJobSubmitted)
		return nil
	}
	for _, shard := range t.opts.Shards() {
		t.waker.Wake(temporalx.SchedulerWorkflowID(shard), temporalx.SignalJobSubmitted)
	}
	return nil
}

// DecideReclaim sends signal (temporalx.SignalReclaimKeep or
// SignalReclaimConfirm) with who and why to the allocation's ReclaimWorkflow.
// A workflow that is closed or absent is temporalx.ErrReclaimClosed; other
// failures are the client's error.
func (t *Client) DecideReclaim(ctx context.Context, allocationID, signal, actor, reason string) error {
	id := temporalx.ReclaimWorkflowID(allocationID)
	err := t.client.SignalWorkflow(ctx, id, "", signal, temporalx.ReclaimDecisionSignal{Actor: actor, Reason: reason})
	var nf *serviceerror.NotFound
	if errors.As(err, &nf) {
		return temporalx.ErrReclaimClosed
	}
	if err != nil {
		return fmt.Errorf("signal %s to %s: %w", signal, id, err)
	}
	return nil
}

// StartDrill starts the PreemptionWorkflow of resume drill preemptionID —
// the record store.OpenDrill wrote for job jobID's allocation and run —
// with ID "preempt/<job>/<run>/<preemption>" (temporalx.PreemptionWorkflowIDOf,
// as the scheduler names its preemptions; the allocation when the run is
// "") and no trigger job. The workflow runs the drill as any preemption
// (docs/design.md §5 "Resume drills"). A workflow with that ID already
// running is fine: a second start of the same drill is answered as started;
// another drill (or preemption) of the same run has its own ID, so it is
// never mistaken for this one. It returns the client's error when the
// server refuses otherwise.
func (t *Client) StartDrill(ctx context.Context, preemptionID, jobID, allocationID, runID string) error {
	run := runID
	if run == "" {
		run = allocationID
	}
	opts := client.StartWorkflowOptions{
		ID:                    temporalx.PreemptionWorkflowIDOf(jobID, run, preemptionID),
		TaskQueue:             temporalx.ServiceTaskQueue,
		WorkflowIDReusePolicy: enumspb.WORKFLOW_ID_REUSE_POLICY_ALLOW_DUPLICATE,
	}
	_, err := t.client.ExecuteWorkflow(ctx, opts, PreemptionWorkflowName, &PreemptionInput{PreemptionID: preemptionID,
		VictimJobID: jobID, AllocationID: allocationID, RunID: runID})
	if err != nil && !temporal.IsWorkflowExecutionAlreadyStartedError(err) {
		return fmt.Errorf("start drill %s (%s): %w", preemptionID, opts.ID, err)
	}
	return nil
}

// schedulerInput returns in, or an empty input, with its shard defaulted.
func schedulerInput(in *SchedulerInput) *SchedulerInput {
	out := SchedulerInput{}
	if in != nil {
		out = *in
	}
	if out.Shard == "" {
		out.Shard = temporalx.DefaultShard
	}
	return &out
}

func schedulerStartOptions(in *SchedulerInput) client.StartWorkflowOptions {
	return client.StartWorkflowOptions{
		ID:                       temporalx.SchedulerWorkflowID(in.Shard),
		TaskQueue:                cmp.Or(in.TaskQueue, temporalx.ServiceTaskQueue),
		WorkflowIDConflictPolicy: enumspb.WORKFLOW_ID_CONFLICT_POLICY_USE_EXISTING,
	}
}

// StartExperiment starts the stored experiment's ExperimentWorkflow
// (StartExperiment on the client's Temporal connection): the
// api.ExperimentWorkflows side of POST /v1/experiments. Idempotent.
func (t *Client) StartExperiment(ctx context.Context, id string) error {
	return StartExperiment(ctx, t.client, id)
}

// SignalExperiment sends an admin's decision, action temporalx.ExperimentAbort
// or ExperimentPromote with who and why, to experiment id's workflow
// (SignalExperiment): POST /v1/experiments/{id}/abort and /promote. A
// workflow that has ended is temporalx.ErrExperimentClosed.
func (t *Client) SignalExperiment(ctx context.Context, id, action, actor, reason string) error {
	return SignalExperiment(ctx, t.client, id, ExperimentSignal{Action: action, Actor: actor, Reason: reason})
}
