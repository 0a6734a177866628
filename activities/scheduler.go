package activities

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/activity"

	"github.com/gpugov/gpugov/internal/policy"
	"github.com/gpugov/gpugov/internal/scheduling"
	"github.com/gpugov/gpugov/internal/temporalx"
	"github.com/gpugov/gpugov/internal/vocab"
	"github.com/gpugov/gpugov/store"
)

// defaultSignalConcurrency bounds the wait-reason and placed signals in
// flight per cycle.
const defaultSignalConcurrency = 16

// CycleHeartbeatEvery is how often the scheduler's activities (RunCycle,
// SignalPlacements) heartbeat: the scheduler workflow gives them a 15 s
// heartbeat timeout, so that a cycle lost with its worker is retried after
// 15 s, not 30 s (the job steps' heartbeat timeout), during which the
// shard runs no cycle; the SDK sends heartbeats at most every 0.8 × 15 s.
const CycleHeartbeatEvery = 5 * time.Second

// DefaultMaxReasonSignals is the most wait-reason signals one cycle sends:
// each is a workflow task of the job's workflow (its wait-reason search
// attribute, which the Temporal UI shows; the store, which the API reads,
// has every reason at once), so a backlog whose reasons all change at once
// — 7,000 jobs turning capacity_busy under the sustained-load test — is
// signalled over several cycles instead of lengthening one cycle and
// flooding the job task queue ahead of the placements (docs/design.md §1
// "Wait reasons"). 256 a cycle is over 50 new waiting jobs a second at the
// cycle pace a burst gives (one per 250 ms to a few seconds).
const DefaultMaxReasonSignals = 256

// Scheduler holds the scheduling-cycle activity. It remembers, per shard, the
// wait reason last signalled to each waiting job, so that it signals only
// transitions; that memory is valid only for the cycle it was built from and
// is rebuilt from the store (the reasons the previous cycle stored) whenever
// the cycle handed to it is not its successor — another worker ran the
// previous cycle, or this process restarted.
type Scheduler struct {
	Store    Store
	Temporal Signaler // nil: wait-reason signals are not sent
	// JobStarter starts, with its `placed` signal, the workflow of a placed
	// job that has none yet (SignalPlacements); nil: such placements are
	// released.
	JobStarter JobSignalStarter
	Policy     PolicySource // nil: scheduling.DefaultPolicy
	// Governance gives the policy in force (a policy.Watcher's Current);
	// its protection windows go into every cycle's snapshot and its project
	// weights set the snapshot's fair shares. nil: neither applies.
	Governance func() *policy.Policy
	Now        func() time.Time
	// CycleIntervalSeconds is the scheduler's timer period, copied into every
	// cycle's snapshot (scheduling.Snapshot.CycleIntervalSeconds); 0: unknown.
	CycleIntervalSeconds int64
	// SignalConcurrency bounds the wait-reason and placed signals in
	// flight; 0 means 16.
	SignalConcurrency int
	// MaxReasonSignals bounds the wait-reason signals one cycle sends; 0
	// means DefaultMaxReasonSignals. The changes beyond it keep their
	// earlier reason in the memory of what was signalled, so a later cycle
	// sends them.
	MaxReasonSignals int

	mu      sync.Mutex
	reasons map[string]*signalledReasons // by shard
	// planners plan every cycle, one per shard, each reusing its capacity
	// index while the snapshot's InventoryVersion (the store's
	// inventory_version, which a pool's move between shards moves) stays:
	// shards' snapshots hold different pools at one version.
	planners map[string]*scheduling.Planner
}

// plannerOf returns the shard's planner, created on first use.
func (a *Scheduler) plannerOf(shard string) *scheduling.Planner {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.planners == nil {
		a.planners = map[string]*scheduling.Planner{}
	}
	p := a.planners[shard]
	if p == nil {
		p = &scheduling.Planner{}
		a.planners[shard] = p
	}
	return p
}

// signalledReasons is the wait reason last signalled to each job, as of a cycle.
type signalledReasons struct {
	cycleID string
	byJob   map[string]vocab.WaitReason
}

// NewScheduler returns the scheduler activities on d's dependencies.
func NewScheduler(d Deps) *Scheduler {
	return &Scheduler{Store: d.Store, Temporal: d.Temporal, JobStarter: d.JobStarter, Policy: d.Policy, Now: d.Now,
		Governance: d.Governance, CycleIntervalSeconds: d.CycleIntervalSeconds}
}

// RunCycleInput identifies one scheduling cycle.
type RunCycleInput struct {
	Shard string
	// CycleID is deterministic (scheduler run ID + iteration), so a retried
	// attempt re-applies the same cycle and the store absorbs it.
	CycleID string
	// PreviousCycleID is the shard's cycle before this one; "" for the first.
	PreviousCycleID string
}

// PlacedJob is one placement granted by a cycle.
type PlacedJob struct {
	JobID        string
	AllocationID string
	Pool         string
	Node         string
	GPUs         []scheduling.GPUShare
}

// StartedPreemption is a preemption a cycle opened; a PreemptionWorkflow must
// carry it out.
type StartedPreemption struct {
	PreemptionID string
	ForJobID     string
	VictimJobID  string
	AllocationID string
	// RunID is the victim's run on the allocation; "" when the victim was
	// placed but its run had not started.
	RunID string
}

// RunCycleResult is what one cycle did.
type RunCycleResult struct {
	CycleID       string
	PolicyVersion string
	// Replayed is true when the store had already applied this cycle (a retried
	// attempt): Placements are the stored ones and no wait-reason signal was sent.
	Replayed    bool
	Placements  []PlacedJob
	Preemptions []StartedPreemption
	Conflicts   int // placements the store refused (capacity taken, job no longer pending, …)
	Waiting     int // jobs left waiting
	// ReasonChanges counts waiting jobs whose reason differs from the one last
	// signalled; ReasonSignalsFailed counts those whose signal failed for a
	// reason other than a closed workflow (they are signalled again next cycle).
	ReasonChanges       int
	ReasonSignalsFailed int
	// ReasonSignalsDeferred counts the changes beyond MaxReasonSignals,
	// left to a later cycle.
	ReasonSignalsDeferred int
	PlanMillis            int64 // time spent in scheduling.Plan, in milliseconds
}

// CrashPointEffect reports whether the cycle placed or preempted anything
// (crashpoint.Effect: a crash test's after_effect point on RunCycle waits
// for such a cycle).
func (r *RunCycleResult) CrashPointEffect() bool {
	return len(r.Placements) > 0 || len(r.Preemptions) > 0
}

// RunCycle runs one scheduling cycle: read the policy in force (Policy,
// which applies a switched version's effects to the store first), load the snapshot (completed with the
// policy's protection windows and project weights, the timer period, and
// downgraded recovery evidence), plan, apply the plan in one store transaction (idempotent by
// CycleID), then signal `wait-reason` to
// the waiting jobs whose reason changed. It returns the placements for the
// scheduler workflow to signal. Errors of loading, policy and applying are
// returned for Temporal to retry; a failed wait-reason signal is not an error.
func (a *Scheduler) RunCycle(ctx context.Context, in *RunCycleInput) (*RunCycleResult, error) {
	if in == nil || in.CycleID == "" {
		return nil, invalidInput("run cycle: cycle ID is required")
	}
	defer heartbeatEvery(ctx, CycleHeartbeatEvery)()
	now := clock(a.Now)
	// The policy first: a policy version switched since the last cycle
	// writes what it sets (quotas, queues, pool stages) to the store when it
	// becomes the policy in force, and the snapshot must read those.
	pol, err := a.policy(ctx)
	if err != nil {
		return nil, fmt.Errorf("cycle %s: policy: %w", in.CycleID, err)
	}
	snap, err := a.Store.LoadShardSnapshot(ctx, shardOf(in), now)
	if err != nil {
		return nil, fmt.Errorf("cycle %s: %w", in.CycleID, err)
	}
	a.addGovernance(snap)
	snap.CycleIntervalSeconds = float64(a.CycleIntervalSeconds)
	began := time.Now()
	plan := a.plannerOf(shardOf(in)).Plan(snap, pol, now)
	planMillis := time.Since(began).Milliseconds()
	prev := a.reasonsBefore(in, snap)
	out, err := a.Store.ApplyShardCycle(ctx, shardOf(in), in.CycleID, plan, now)
	if err != nil {
		return nil, fmt.Errorf("cycle %s: %w", in.CycleID, err)
	}
	res := cycleResult(out, plan)
	res.PlanMillis = planMillis
	if err := a.recordPreemptions(ctx, in.CycleID, plan, out, res, now); err != nil {
		return nil, fmt.Errorf("cycle %s: %w", in.CycleID, err)
	}
	if out.Replayed {
		// The stored cycle's reasons are not this plan's: forget what was
		// signalled and rebuild it from the store at the next cycle.
		a.forgetReasons(in.Shard)
		return res, nil
	}
	changes := reasonChanges(prev, plan.Waiting)
	res.ReasonChanges = len(changes)
	limit := a.MaxReasonSignals
	if limit <= 0 {
		limit = DefaultMaxReasonSignals
	}
	var deferred []reasonChange
	if len(changes) > limit {
		changes, deferred = changes[:limit], changes[limit:]
	}
	failed := a.signalReasons(ctx, changes)
	res.ReasonSignalsFailed = len(failed)
	res.ReasonSignalsDeferred = len(deferred)
	if len(deferred) > 0 && failed == nil {
		failed = map[string]bool{}
	}
	for _, c := range deferred {
		failed[c.jobID] = true // kept at the earlier reason: signalled by a later cycle
	}
	a.rememberReasons(in, plan.Waiting, prev, failed)
	return res, ctx.Err()
}

// shardOf is the cycle's shard: in.Shard, or temporalx.DefaultShard.
func shardOf(in *RunCycleInput) string {
	if in.Shard == "" {
		return temporalx.DefaultShard
	}
	return in.Shard
}

// cycleResult copies the store's outcome into the activity result.
func cycleResult(out *store.CycleOutcome, plan *scheduling.Result) *RunCycleResult {
	res := &RunCycleResult{
		CycleID:       out.CycleID,
		PolicyVersion: plan.PolicyVersion,
		Replayed:      out.Replayed,
		Placements:    make([]PlacedJob, len(out.Placed)),
		Conflicts:     len(out.Conflicts),
		Waiting:       len(plan.Waiting),
	}
	for i, p := range out.Placed {
		res.Placements[i] = PlacedJob{JobID: p.JobID, AllocationID: p.AllocationID, Pool: p.Pool, Node: p.Node, GPUs: p.GPUs}
	}
	for _, p := range out.Preemptions {
		res.Preemptions = append(res.Preemptions, StartedPreemption{PreemptionID: p.PreemptionID, ForJobID: p.ForJobID,
			VictimJobID: p.VictimJobID, AllocationID: p.AllocationID})
	}
	return res
}

// recordPreemptions stores the cycle's "would preempt" proposals (the
// stage's record when it may not act; a replayed cycle's were stored by its
// first attempt, or are proposed again by the next cycle) and names the run
// of each started preemption's victim, for its workflow ID.
func (a *Scheduler) recordPreemptions(ctx context.Context, cycleID string, plan *scheduling.Result,
	out *store.CycleOutcome, res *RunCycleResult, now time.Time) error {
	if !out.Replayed {
		if _, err := a.Store.RecordWouldPreempt(ctx, cycleID, plan.Preemptions, now); err != nil {
			return err
		}
	}
	if len(res.Preemptions) == 0 {
		return nil
	}
	allocs := make([]string, len(res.Preemptions))
	for i, p := range res.Preemptions {
		allocs[i] = p.AllocationID
	}
	runs, err := a.Store.PreemptionRunIDs(ctx, allocs)
	if err != nil {
		return err
	}
	for i := range res.Preemptions {
		res.Preemptions[i].RunID = runs[res.Preemptions[i].AllocationID]
	}
	return nil
}

func (a *Scheduler) policy(ctx context.Context) (*scheduling.Policy, error) {
	if a.Policy == nil {
		p := scheduling.DefaultPolicy()
		return &p, nil
	}
	return a.Policy(ctx)
}

// reasonsBefore returns the reasons signalled as of in.PreviousCycleID: the
// remembered ones when this Scheduler ran that cycle, else those the store
// holds for the snapshot's pending jobs (what the previous cycle stored and
// signalled; scheduling.PendingJob.StoredReason), which the snapshot read
// with the rest, so a cycle that rebuilds them costs no extra query
// (docs/design.md §8, "The whole cycle at scale").
func (a *Scheduler) reasonsBefore(in *RunCycleInput, snap *scheduling.Snapshot) map[string]vocab.WaitReason {
	a.mu.Lock()
	r := a.reasons[in.Shard]
	a.mu.Unlock()
	if r != nil && in.PreviousCycleID != "" && r.cycleID == in.PreviousCycleID {
		return r.byJob
	}
	byJob := make(map[string]vocab.WaitReason, len(snap.Pending))
	for i := range snap.Pending {
		if p := &snap.Pending[i]; p.StoredReason != "" {
			byJob[p.ID] = p.StoredReason
		}
	}
	return byJob
}

// reasonChange is one waiting job whose reason differs from the one signalled.
type reasonChange struct {
	jobID  string
	reason vocab.WaitReason
}

// reasonChanges lists the waiting jobs whose reason is not the one in prev.
func reasonChanges(prev map[string]vocab.WaitReason, waiting []scheduling.WaitStatus) []reasonChange {
	var out []reasonChange
	for _, w := range waiting {
		if prev[w.JobID] != w.Reason {
			out = append(out, reasonChange{w.JobID, w.Reason})
		}
	}
	return out
}

// signalReasons sends `wait-reason` to each changed job's workflow, a bounded
// number at a time, and returns the job IDs whose signal failed for a reason
// other than the workflow being closed or absent (NotFound: nothing to update).
func (a *Scheduler) signalReasons(ctx context.Context, changes []reasonChange) map[string]bool {
	if a.Temporal == nil || len(changes) == 0 {
		return nil
	}
	var mu sync.Mutex
	failed := map[string]bool{}
	a.eachBounded(len(changes), func(i int) {
		c := changes[i]
		err := a.Temporal.SignalWorkflow(ctx, temporalx.JobWorkflowID(c.jobID), "", temporalx.SignalWaitReason,
			temporalx.WaitReasonSignal{Reason: c.reason})
		var nf *serviceerror.NotFound
		if err != nil && !errors.As(err, &nf) {
			mu.Lock()
			failed[c.jobID] = true
			mu.Unlock()
		}
	})
	return failed
}

// eachBounded calls fn(0) … fn(n-1), SignalConcurrency (default 16) at a
// time, and returns when all have returned.
func (a *Scheduler) eachBounded(n int, fn func(i int)) {
	limit := a.SignalConcurrency
	if limit <= 0 {
		limit = defaultSignalConcurrency
	}
	eachConcurrently(limit, n, fn)
}

// eachConcurrently calls fn(0) … fn(n-1) in goroutines, at most limit at a
// time (limit ≥ 1), and returns when all have returned.
func eachConcurrently(limit, n int, fn func(i int)) {
	sem := make(chan struct{}, limit)
	var wg sync.WaitGroup
	for i := range n {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			fn(i)
		}()
	}
	wg.Wait()
}

// SignalPlacementsInput is a cycle's placements, to be signalled `placed`.
type SignalPlacementsInput struct {
	CycleID    string
	Placements []PlacedJob
}

// ReleasedPlacement is a placement whose job workflow could not be told —
// closed, absent and not startable (no JobStarter, or the job no longer
// placed, or its cancel requested, in the store), or the server refused the
// signal for good — and which SignalPlacements released back to waiting
// (outcome requeued; cancelled when a cancel was requested): the next cycle
// places the job again.
type ReleasedPlacement struct {
	JobID        string
	AllocationID string
	Error        string // the signal's error
}

// SignalPlacementsResult is what SignalPlacements did.
type SignalPlacementsResult struct {
	Signalled int // placements whose workflow took the signal
	// Started counts those of Signalled whose workflow was absent when
	// signalled and was started with the signal (Scheduler.JobStarter's
	// signal-with-start) — or had been started meanwhile by the background
	// starter or the reconciler, which the answer does not tell apart.
	Started  int
	Released []ReleasedPlacement
}

// SignalPlacements sends `placed` (temporalx.PlacedSignal) to each placed
// job's workflow, SignalConcurrency at a time, as client signals: each is one
// update of the job workflow's state on the server, where a
// SignalExternalWorkflow command from the scheduler workflow cost two events
// in the scheduler's history and a round of its workflow tasks per signal
// (docs/design.md §3 step 2 "Wait", §8 "Sustained load"). A job workflow
// takes a repeated `placed` for the allocation it holds as a no-op, so the
// activity's retry may signal again what its first attempt signalled. A
// signal answered NotFound — the workflow is absent or closed — is sent
// again by signal-with-start (JobStarter) when the store still has the job
// placed without a cancel requested: a workflow never started (under a
// backlog, the jobs first in priority order whose workflow the background
// starter or the reconciler has not reached yet) is started with its
// placement, where releasing it had the next cycle choose the same jobs
// again (docs/design.md §8 "Bursts and backlogs"); a closed one is not
// started again (its ID-reuse policy rejects the start). The placements
// whose workflow is closed, or absent and not started so, or refused the
// signal for good (InvalidArgument, FailedPrecondition, …), it releases back
// to waiting in the store (store.ReleasePlacement, idempotent), here rather than one
// ReleasePlacement activity each in the scheduler workflow: under load,
// hundreds of a cycle's placements belonged to jobs whose workflow the
// background starter had not started yet, and, before they were started so,
// releasing them one activity after another held the shard's next cycle for
// a minute. An error the server
// may get over (unavailable, deadline, resource exhausted, an internal error,
// this activity's context), a failed read of the job or a failed release
// fails the activity after every signal was tried, for Temporal to retry.
// Without a Temporal client it fails, not retryable. When it started or
// released any, it logs the counts.
func (a *Scheduler) SignalPlacements(ctx context.Context, in *SignalPlacementsInput) (*SignalPlacementsResult, error) {
	if in == nil || in.CycleID == "" {
		return nil, invalidInput("signal placements: cycle ID is required")
	}
	if a.Temporal == nil {
		return nil, invalidInput("signal placements: no Temporal client")
	}
	defer heartbeatEvery(ctx, CycleHeartbeatEvery)()
	var mu sync.Mutex
	res := &SignalPlacementsResult{}
	var retry error
	a.eachBounded(len(in.Placements), func(i int) {
		p := in.Placements[i]
		sig := temporalx.PlacedSignal{AllocationID: p.AllocationID, CycleID: in.CycleID, Pool: p.Pool, Node: p.Node, GPUs: p.GPUs}
		err := a.Temporal.SignalWorkflow(ctx, temporalx.JobWorkflowID(p.JobID), "", temporalx.SignalPlaced, sig)
		started := false
		var nf *serviceerror.NotFound
		if errors.As(err, &nf) {
			var startErr error
			started, startErr = a.startUnsignalled(ctx, p, sig)
			switch {
			case started:
				err = nil
			case startErr != nil:
				// A closed workflow (temporalx.ErrJobWorkflowClosed) is
				// released below with this reason; a failed read of the job
				// is retried; the server's answer as for the signal.
				err = startErr
			}
		}
		if err != nil && !signalMayRecover(ctx, err) && !errors.Is(err, errStoreRead) {
			err = a.releaseUnsignalled(ctx, p, err, &mu, res)
		}
		mu.Lock()
		defer mu.Unlock()
		switch {
		case err == nil:
			if started {
				res.Started++
			}
		case retry == nil:
			retry = fmt.Errorf("signal placements of cycle %s: job %s: %w", in.CycleID, p.JobID, err)
		}
	})
	if retry != nil {
		return nil, retry
	}
	res.Signalled = len(in.Placements) - len(res.Released)
	slices.SortFunc(res.Released, func(x, y ReleasedPlacement) int { return strings.Compare(x.JobID, y.JobID) })
	if (res.Started > 0 || len(res.Released) > 0) && activity.IsActivity(ctx) {
		activity.GetLogger(ctx).Info("placements signalled", "cycle", in.CycleID, "signalled", res.Signalled,
			"started", res.Started, "released", len(res.Released))
	}
	return res, nil
}

// errStoreRead marks startUnsignalled's failure to read the job: the
// activity is retried, the placement not released.
var errStoreRead = errors.New("read the placed job")

// startUnsignalled sends placement p's `placed` signal sig by
// signal-with-start (JobStarter), after the plain signal found no workflow
// (NotFound), when the store still has the job placed and no cancel
// requested: a workflow never started is started with it, with the
// attributes of every start of the job's workflow (store.Job.WorkflowAttributes).
// It reports whether the signal was delivered so. false with a nil error
// means the job is not to be started (no JobStarter, the job is no longer
// placed — a cancel, a release — or its cancel was requested, which a
// workflow started now would not see): the caller releases the placement. A
// closed workflow is an error matching temporalx.ErrJobWorkflowClosed; a
// failed read of the job one matching errStoreRead; the rest are the
// starter's.
func (a *Scheduler) startUnsignalled(ctx context.Context, p PlacedJob, sig temporalx.PlacedSignal) (bool, error) {
	if a.JobStarter == nil {
		return false, nil
	}
	job, err := a.Store.GetJob(ctx, p.JobID)
	if err != nil {
		return false, fmt.Errorf("%w %s: %w", errStoreRead, p.JobID, err)
	}
	if job.State != vocab.JobPlaced || job.CancelRequested {
		return false, nil
	}
	if err := a.JobStarter.SignalWithStartJob(ctx, p.JobID, job.WorkflowAttributes(), temporalx.SignalPlaced, sig); err != nil {
		return false, err
	}
	return true, nil
}

// releaseUnsignalled releases placement p, whose signal failed for good with
// sigErr, back to waiting and records it in res (under mu); it returns the
// store's error.
func (a *Scheduler) releaseUnsignalled(ctx context.Context, p PlacedJob, sigErr error, mu *sync.Mutex, res *SignalPlacementsResult) error {
	err := a.Store.ReleasePlacement(ctx, p.JobID, p.AllocationID, vocab.RunRequeued,
		"job workflow could not be signalled: "+sigErr.Error(), clock(a.Now))
	if err != nil {
		return fmt.Errorf("release the unsignalled placement %s: %w", p.AllocationID, err)
	}
	mu.Lock()
	defer mu.Unlock()
	res.Released = append(res.Released, ReleasedPlacement{JobID: p.JobID, AllocationID: p.AllocationID, Error: sigErr.Error()})
	return nil
}

// signalMayRecover reports whether a failed signal may succeed when tried
// again: the activity's own context ended, or the server answered
// unavailable, deadline exceeded, resource exhausted, aborted or internal.
func signalMayRecover(ctx context.Context, err error) bool {
	if ctx.Err() != nil || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return true
	}
	var (
		unavailable *serviceerror.Unavailable
		deadline    *serviceerror.DeadlineExceeded
		exhausted   *serviceerror.ResourceExhausted
		aborted     *serviceerror.Aborted
		internal    *serviceerror.Internal
		canceled    *serviceerror.Canceled
	)
	return errors.As(err, &unavailable) || errors.As(err, &deadline) || errors.As(err, &exhausted) ||
		errors.As(err, &aborted) || errors.As(err, &internal) || errors.As(err, &canceled)
}

// rememberReasons records the reasons signalled as of in.CycleID: this
// cycle's reason for every waiting job, except where the signal failed, which
// keeps the earlier reason so that the next cycle signals it again.
func (a *Scheduler) rememberReasons(in *RunCycleInput, waiting []scheduling.WaitStatus,
	prev map[string]vocab.WaitReason, failed map[string]bool) {
	byJob := make(map[string]vocab.WaitReason, len(waiting))
	for _, w := range waiting {
		switch {
		case !failed[w.JobID]:
			byJob[w.JobID] = w.Reason
		case prev[w.JobID] != "":
			byJob[w.JobID] = prev[w.JobID]
		}
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.reasons == nil {
		a.reasons = map[string]*signalledReasons{}
	}
	a.reasons[in.Shard] = &signalledReasons{cycleID: in.CycleID, byJob: byJob}
}

// forgetReasons drops the shard's remembered reasons.
func (a *Scheduler) forgetReasons(shard string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	delete(a.reasons, shard)
}
