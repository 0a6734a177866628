package workflows

import (
	"fmt"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/gpugov/gpugov/activities"
	"github.com/gpugov/gpugov/internal/temporalx"
	"github.com/gpugov/gpugov/internal/vocab"
)

// QuerySchedulerStatus is the query name that returns a SchedulerStatus.
const QuerySchedulerStatus = "status"

// Defaults of SchedulerInput.
const (
	defaultCycleInterval    = 5 * time.Second
	defaultIterationsPerRun = 300
	defaultCoalesce         = 250 * time.Millisecond
	// maxHistoryEvents continues a scheduler run as new early when a burst of
	// placements made its history long (Temporal warns at 10,240 events).
	maxHistoryEvents = 8000
	// cycleHeartbeatTimeout is the heartbeat timeout of RunCycle and
	// SignalPlacements, which heartbeat every activities.CycleHeartbeatEvery.
	cycleHeartbeatTimeout = 15 * time.Second
	// cycleStartToClose bounds one attempt of RunCycle or SignalPlacements.
	// The heartbeat timeout, not this, is what catches a dead worker, so it
	// only has to cover the longest live cycle: the first after 100,000
	// submissions at once evaluates every one of them (48–71 s in
	// BenchmarkRunCycleAtScale's first-ms on the 2-core machine, more beside
	// a busy Temporal server), and with 2 min it timed out and was retried
	// from the start, again and again, placing nothing (`make load-backlog`,
	// docs/design.md §8 "Bursts and backlogs").
	cycleStartToClose = 10 * time.Minute
)

// SchedulerInput starts (or continues) a shard's SchedulerWorkflow.
type SchedulerInput struct {
	Shard string // "" means temporalx.DefaultShard
	// CycleIntervalSeconds is the longest time between cycles when no signal
	// arrives (aging and time-based rules need periodic cycles); 0 means 5.
	CycleIntervalSeconds int64
	// IterationsPerRun is the number of cycles after which the workflow
	// continues as new, bounding its history; 0 means 300.
	IterationsPerRun int
	// CoalesceMillis is how long the scheduler, woken by a signal, waits for
	// the rest of a burst before its cycle, in milliseconds; 0 means 250,
	// negative means no wait.
	CoalesceMillis int64
	// TaskQueue is the task queue the workflow runs on: StartScheduler starts
	// it there and each continue-as-new moves it there; "" means
	// temporalx.ServiceTaskQueue for a start and the current queue for a
	// continue-as-new (a scheduler started before the field existed stays
	// where it was). serve sets temporalx.SchedulerTaskQueue and polls it.
	TaskQueue string

	// Carried across continue-as-new.

	// WakePending is true when a wake-up signal arrived that no cycle has served.
	WakePending bool
	// PreviousCycleID is the last cycle applied.
	PreviousCycleID string
	// RetryCycleID is a cycle whose activity failed after its retries; it is
	// run again under the same ID, because the store may have applied it and
	// its placements must then still be signalled.
	RetryCycleID string
	// CyclesBefore counts the cycles run by earlier runs of this workflow.
	CyclesBefore int64
}

// SchedulerStatus is the answer to QuerySchedulerStatus.
type SchedulerStatus struct {
	Shard          string
	Cycles         int64 // cycles applied, earlier runs included
	LastCycleID    string
	LastPlacements int
	LastWaiting    int
	WakePending    bool
}

// SchedulerWorkflow is a shard's single writer of placements. It sleeps until
// a `job-submitted`, `allocation-released` or `inventory-changed` signal or the
// cycle interval; woken by a signal, it waits CoalesceMillis for the rest of a
// burst; it then takes every signal queued (one cycle serves them all), runs
// the RunCycle activity, and signals `placed` to each placed job's workflow
// (the SignalPlacements activity, which starts the workflow of a job that has
// none yet with its signal); a placement whose workflow cannot be signalled
// (closed) is released back to waiting; it starts a PreemptionWorkflow
// for each preemption the cycle opened. After IterationsPerRun cycles, or
// when the history grows long, it continues as new, carrying a pending wake-up
// and the cycle to retry. It returns only on cancellation or a non-retryable
// failure of its own.
func SchedulerWorkflow(ctx workflow.Context, in *SchedulerInput) error {
	s := newSchedulerFlow(ctx, in)
	if err := workflow.SetQueryHandler(ctx, QuerySchedulerStatus, func() (*SchedulerStatus, error) { return &s.status, nil }); err != nil {
		return err
	}
	for i := 0; i < s.iterations; i++ {
		if !s.next.WakePending && s.waitForWake(ctx) && s.coalesce > 0 {
			_ = workflow.Sleep(ctx, s.coalesce) // only cancellation ends it early
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		s.drainWakeSignals(ctx)
		s.next.WakePending = false
		s.cycle(ctx, i)
		info := workflow.GetInfo(ctx)
		if info.GetContinueAsNewSuggested() || info.GetCurrentHistoryLength() > maxHistoryEvents {
			break
		}
	}
	if s.drainWakeSignals(ctx) {
		s.next.WakePending = true
	}
	if q := s.next.TaskQueue; q != "" && q != workflow.GetInfo(ctx).TaskQueueName {
		ctx = workflow.WithWorkflowTaskQueue(ctx, q)
	}
	return workflow.NewContinueAsNewError(ctx, SchedulerWorkflowName, &s.next)
}

// schedulerFlow is the state of one SchedulerWorkflow run.
type schedulerFlow struct {
	next       SchedulerInput // the input of the run that continues this one
	interval   time.Duration
	coalesce   time.Duration
	iterations int
	wake       []workflow.ReceiveChannel
	status     SchedulerStatus
	sched      *activities.Scheduler // nil receiver: only its method values name the activities
	jobs       *activities.Jobs
}

func newSchedulerFlow(ctx workflow.Context, in *SchedulerInput) *schedulerFlow {
	s := &schedulerFlow{interval: defaultCycleInterval, coalesce: defaultCoalesce, iterations: defaultIterationsPerRun}
	if in != nil {
		s.next = *in
	}
	if s.next.Shard == "" {
		s.next.Shard = temporalx.DefaultShard
	}
	if s.next.CycleIntervalSeconds > 0 {
		s.interval = time.Duration(s.next.CycleIntervalSeconds) * time.Second
	}
	switch c := s.next.CoalesceMillis; {
	case c > 0:
		s.coalesce = time.Duration(c) * time.Millisecond
	case c < 0:
		s.coalesce = 0
	}
	if s.next.IterationsPerRun > 0 {
		s.iterations = s.next.IterationsPerRun
	}
	for _, name := range []string{temporalx.SignalJobSubmitted, temporalx.SignalAllocationReleased, temporalx.SignalInventoryChanged} {
		s.wake = append(s.wake, workflow.GetSignalChannel(ctx, name))
	}
	s.status = SchedulerStatus{Shard: s.next.Shard, Cycles: s.next.CyclesBefore, LastCycleID: s.next.PreviousCycleID,
		WakePending: s.next.WakePending}
	return s
}

// waitForWake blocks until a wake-up signal arrives, the cycle interval passes
// or the workflow is cancelled, and reports whether a signal woke it; the
// timer is cancelled when a signal wins.
func (s *schedulerFlow) waitForWake(ctx workflow.Context) (bySignal bool) {
	timerCtx, cancelTimer := workflow.WithCancel(ctx)
	defer cancelTimer()
	sel := workflow.NewSelector(ctx)
	sel.AddFuture(workflow.NewTimer(timerCtx, s.interval), func(workflow.Future) {})
	for _, ch := range s.wake {
		sel.AddReceive(ch, func(c workflow.ReceiveChannel, _ bool) {
			c.Receive(ctx, nil)
			bySignal = true
		})
	}
	sel.Select(ctx)
	return bySignal
}

// drainWakeSignals takes every wake-up signal already queued and reports
// whether there was any: they are all served by the coming cycle.
func (s *schedulerFlow) drainWakeSignals(ctx workflow.Context) bool {
	got := false
	for _, ch := range s.wake {
		for ch.ReceiveAsync(nil) {
			got = true
		}
	}
	s.status.WakePending = got
	return got
}

// cycle runs one scheduling cycle and signals its placements. A cycle whose
// activity fails is logged and kept for retry under the same ID at the next wake.
func (s *schedulerFlow) cycle(ctx workflow.Context, iteration int) {
	cycleID := s.next.RetryCycleID
	if cycleID == "" {
		cycleID = fmt.Sprintf("%s/%s/%d", s.next.Shard, workflow.GetInfo(ctx).WorkflowExecution.RunID, iteration)
	}
	actx := cycleActivityContext(ctx)
	var res activities.RunCycleResult
	err := workflow.ExecuteActivity(actx, s.sched.RunCycle, &activities.RunCycleInput{
		Shard: s.next.Shard, CycleID: cycleID, PreviousCycleID: s.next.PreviousCycleID,
	}).Get(ctx, &res)
	if err != nil {
		workflow.GetLogger(ctx).Error("scheduling cycle failed; retried at the next wake", "cycle", cycleID, "error", err)
		s.next.RetryCycleID = cycleID
		return
	}
	s.next.RetryCycleID = ""
	s.next.PreviousCycleID = cycleID
	s.next.CyclesBefore++
	s.status.Cycles, s.status.LastCycleID = s.next.CyclesBefore, cycleID
	s.status.LastPlacements, s.status.LastWaiting = len(res.Placements), res.Waiting
	s.signalPlacements(ctx, cycleID, res.Placements)
	s.startPreemptions(ctx, res.Preemptions)
}

// cycleActivityContext gives the scheduler's own activities (RunCycle,
// SignalPlacements) their options: cycleStartToClose, 5 attempts 1–30 s
// apart, and a heartbeat timeout (activities.CycleHeartbeatEvery) after
// which an attempt whose worker died is retried — 15 s, during which no
// other cycle of the shard would run, and before a job step lost with the
// same worker (30 s), so that a crash does not let the steps of running jobs
// overtake the next cycle's decisions. Activity options are not among the
// commands a replay compares.
func cycleActivityContext(ctx workflow.Context) workflow.Context {
	return workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		StartToCloseTimeout: cycleStartToClose,
		HeartbeatTimeout:    cycleHeartbeatTimeout,
		RetryPolicy: &temporal.RetryPolicy{
			InitialInterval:    time.Second,
			BackoffCoefficient: 2,
			MaximumInterval:    30 * time.Second,
			MaximumAttempts:    5,
		},
	})
}

// versionPreemptionIDPerPreemption is the workflow.GetVersion change ID of
// scheduler workflows that name each preemption's workflow
// "preempt/<victim>/<run>/<preemption>" (temporalx.PreemptionWorkflowIDOf;
// version 1) instead of "preempt/<victim>/<run>" (DefaultVersion), under
// which a second preemption of a run whose first preemption's workflow was
// still open (aborted, its Abort step retried after a crash) was refused as
// already started and never ran (found by e2e
// TestCrashAtEveryPreemptionStep). It is asked for only by a cycle that
// opened preemptions.
const versionPreemptionIDPerPreemption = "preemption-id-per-preemption"

// startPreemptions starts one PreemptionWorkflow per preemption the cycle
// opened, as an abandoned child (it outlives this run's continue-as-new)
// with ID "preempt/<victim>/<run>/<preemption>": a retried cycle's second start of a
// running one is refused as already started, and one that already finished
// ends at its Notify step, which finds the record finished. It waits until
// each is started, so none is lost to a continue-as-new.
func (s *schedulerFlow) startPreemptions(ctx workflow.Context, ps []activities.StartedPreemption) {
	if len(ps) == 0 {
		return
	}
	perPreemption := workflow.GetVersion(ctx, versionPreemptionIDPerPreemption, workflow.DefaultVersion, 1) >= 1
	futs := make([]workflow.ChildWorkflowFuture, len(ps))
	for i, p := range ps {
		run := p.RunID
		if run == "" {
			run = p.AllocationID
		}
		id := temporalx.PreemptionWorkflowID(p.VictimJobID, run)
		if perPreemption {
			id = temporalx.PreemptionWorkflowIDOf(p.VictimJobID, run, p.PreemptionID)
		}
		cctx := workflow.WithChildOptions(ctx, abandonedChildOptions(id, enumspb.WORKFLOW_ID_REUSE_POLICY_ALLOW_DUPLICATE))
		futs[i] = workflow.ExecuteChildWorkflow(cctx, PreemptionWorkflowName, &PreemptionInput{PreemptionID: p.PreemptionID,
			ForJobID: p.ForJobID, VictimJobID: p.VictimJobID, AllocationID: p.AllocationID, RunID: p.RunID})
	}
	awaitChildStarts(ctx, futs, "preemption workflow not started", "preemption", func(i int) string { return ps[i].PreemptionID })
}

// versionPlacedByActivity is the workflow.GetVersion change ID of scheduler
// workflows that send the cycle's `placed` signals from the SignalPlacements
// activity (version 1) instead of one SignalExternalWorkflow command each
// (DefaultVersion), which cost the scheduler two history events and a round
// of workflow tasks per placement: at 50 submissions/s a cycle's 600
// placements took some 15 s to signal, during which the shard ran no cycle
// (docs/design.md §8 "Sustained load"). It is asked for only by a cycle that
// placed something.
const versionPlacedByActivity = "placed-signals-by-activity"

// signalPlacements tells every placed job's workflow of its placement, then
// releases (back to waiting) each placement whose workflow could not be
// signalled, so that no allocation is left without a workflow to run it.
// Since versionPlacedByActivity the SignalPlacements activity sends the
// signals and releases what it could not signal; when it fails after its retries (Temporal unreachable for
// minutes), the placements are signalled as before, by
// SignalExternalWorkflow, which the server delivers however long it takes.
func (s *schedulerFlow) signalPlacements(ctx workflow.Context, cycleID string, placed []activities.PlacedJob) {
	if len(placed) == 0 {
		return
	}
	if workflow.GetVersion(ctx, versionPlacedByActivity, workflow.DefaultVersion, 1) >= 1 {
		actx := cycleActivityContext(ctx)
		// The activity releases the placements it could not signal itself.
		err := workflow.ExecuteActivity(actx, s.sched.SignalPlacements,
			&activities.SignalPlacementsInput{CycleID: cycleID, Placements: placed}).Get(ctx, nil)
		if err == nil {
			return
		}
		workflow.GetLogger(ctx).Error("placements not signalled by activity; signalling them from the workflow",
			"cycle", cycleID, "error", err)
	}
	futs := make([]workflow.Future, len(placed))
	for i, p := range placed {
		futs[i] = workflow.SignalExternalWorkflow(ctx, temporalx.JobWorkflowID(p.JobID), "", temporalx.SignalPlaced,
			temporalx.PlacedSignal{AllocationID: p.AllocationID, CycleID: cycleID, Pool: p.Pool, Node: p.Node, GPUs: p.GPUs})
	}
	for i, f := range futs {
		if sigErr := f.Get(ctx, nil); sigErr != nil {
			s.releaseUnclaimed(ctx, placed[i].JobID, placed[i].AllocationID, sigErr.Error())
		}
	}
}

// releaseUnclaimed releases (back to waiting, outcome requeued) a placement
// whose job workflow could not be signalled; why is the signal's error.
func (s *schedulerFlow) releaseUnclaimed(ctx workflow.Context, jobID, allocationID, why string) {
	rctx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		StartToCloseTimeout: 30 * time.Second,
		RetryPolicy:         &temporal.RetryPolicy{InitialInterval: time.Second, BackoffCoefficient: 2, MaximumInterval: time.Minute},
	})
	err := workflow.ExecuteActivity(rctx, s.jobs.ReleasePlacement, &activities.ReleasePlacementInput{
		JobID: jobID, AllocationID: allocationID, Outcome: vocab.RunRequeued,
		Detail: "job workflow could not be signalled: " + why,
	}).Get(ctx, nil)
	if err != nil {
		workflow.GetLogger(ctx).Error("unclaimed placement not released", "job", jobID, "allocation", allocationID, "error", err)
	}
}
