package activities

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"go.temporal.io/sdk/activity"

	"github.com/gpugov/gpugov/internal/governance"
	"github.com/gpugov/gpugov/internal/policy"
	"github.com/gpugov/gpugov/internal/temporalx"
	"github.com/gpugov/gpugov/internal/vocab"
	"github.com/gpugov/gpugov/store"
)

// jobStopTimeout bounds how long ReleaseReclaimed waits for a cancelled
// idle run's job workflow to stop it and release its GPUs before the store
// releases them itself.
const jobStopTimeout = 2 * time.Minute

// Reclaims are the activities of the reclaim scan and of ReclaimWorkflow.
// Each is keyed by the allocation (one reclaim per allocation) or the
// reclaim ID; the store keeps the first notice, decision and release, so a
// retried attempt changes nothing twice.
type Reclaims struct {
	d Deps
}

// ScanInput starts one reclaim scan.
type ScanInput struct{}

// ReclaimFinding is one reclaimable allocation found by a scan.
type ReclaimFinding struct {
	AllocationID string
	JobID        string
	Pool         string
	Queue        string
	Class        string
	Basis        string
}

// ScanResult is a scan's findings and when to scan next.
type ScanResult struct {
	Findings            []ReclaimFinding
	Active              int // allocations examined
	ScanIntervalSeconds float64
	// HeartbeatsUnread counts the runs whose last heartbeat (and step) could
	// not be read (Temporal unreachable); they are classified without it.
	HeartbeatsUnread int
}

// CrashPointEffect reports whether the scan found anything to reclaim
// (crashpoint.Effect): a crash test's after_effect point on ScanReclaims
// waits for a scan with findings, the ones its workflow starts reclaims for.
func (r *ScanResult) CrashPointEffect() bool { return len(r.Findings) > 0 }

// heartbeatConcurrency bounds the job workflows described at once for
// heartbeat evidence.
const heartbeatConcurrency = 8

// ScanReclaims classifies every active allocation from its evidence (run
// state, the run's last heartbeat, checkpoints and reported progress steps
// as output, the owner's completion declaration, utilisation and memory
// samples over the observation window; governance.Classify) and returns the
// reclaimable ones. With the reclaim scan disabled in config it returns none.
func (a *Reclaims) ScanReclaims(ctx context.Context, _ *ScanInput) (*ScanResult, error) {
	cfg := a.d.config()
	res := &ScanResult{ScanIntervalSeconds: cfg.Reclaim.ScanIntervalSeconds}
	if !cfg.Reclaim.Enabled {
		return res, nil
	}
	now := a.d.now()
	window := policy.Seconds(cfg.Reclaim.ObservationWindowSeconds)
	evs, err := a.d.Store.ReclaimEvidence(ctx, now.Add(-window))
	if err != nil {
		return nil, err
	}
	res.Active = len(evs)
	unreclaimed := make([]*governance.Evidence, 0, len(evs))
	for i := range evs {
		if !evs[i].Reclaimed {
			unreclaimed = append(unreclaimed, &evs[i])
		}
	}
	if res.HeartbeatsUnread, err = a.addRunReports(ctx, unreclaimed, now, window); err != nil {
		return nil, err
	}
	for i := range evs {
		if evs[i].Reclaimed {
			continue
		}
		if f, ok := governance.Classify(&evs[i], cfg, now); ok {
			res.Findings = append(res.Findings, ReclaimFinding{AllocationID: evs[i].AllocationID, JobID: evs[i].JobID,
				Pool: evs[i].Pool, Queue: evs[i].Queue, Class: string(f.Class), Basis: f.Basis})
		}
	}
	return res, nil
}

// addRunReports reads, for every run that is still going and older than
// the observation window (a younger run is neither idle nor without a
// heartbeat for a window), its run activity's last heartbeat and step, a
// bounded number of job workflows at a time. It fills LastHeartbeatAt,
// records the steps (store.ObserveRunSteps: a step that advanced is
// progress observed now) and fills LastProgressAt from them. It returns how
// many runs could not be read, and the error of recording the steps: the
// scan must not call a run idle without its progress.
func (a *Reclaims) addRunReports(ctx context.Context, evs []*governance.Evidence, now time.Time, window time.Duration) (int, error) {
	if a.d.Progress == nil {
		return 0, nil
	}
	var mu sync.Mutex
	unread := 0
	var steps []store.RunStep
	var long []*governance.Evidence // runs older than the window, still going
	for _, ev := range evs {
		if ev.RunID != "" && ev.RunEndedAt == nil && now.Sub(ev.RunStartedAt) > window {
			long = append(long, ev)
		}
	}
	eachConcurrently(heartbeatConcurrency, len(long), func(i int) {
		ev := long[i]
		rep, ok, err := a.d.runReport(ctx, ev.JobID)
		mu.Lock()
		defer mu.Unlock()
		switch {
		case err != nil:
			unread++
		case ok:
			if rep.HasHeartbeat {
				at := rep.HeartbeatAt
				ev.LastHeartbeatAt = &at
			}
			if rep.HasStep {
				steps = append(steps, store.RunStep{RunID: ev.RunID, Step: rep.Step})
			}
		}
	})
	progress, err := a.d.Store.ObserveRunSteps(ctx, steps, now)
	if err != nil {
		return unread, err
	}
	for _, ev := range evs {
		if at, ok := progress[ev.RunID]; ok {
			ev.LastProgressAt = &at
		}
	}
	return unread, nil
}

// AssessInput names the allocation a ReclaimWorkflow handles.
type AssessInput struct {
	AllocationID string
	WorkflowID   string
}

// AssessResult is the reclaim recorded for the allocation and how to act.
type AssessResult struct {
	// Proceed is false when the allocation is no longer reclaimable (released,
	// or the evidence changed); nothing was recorded.
	Proceed              bool
	Detail               string
	ReclaimID            string
	JobID                string
	Queue                string // the job's queue, tier and the allocation's pool, for search attributes
	Tier                 string
	Pool                 string
	Class                string
	Mode                 string
	State                vocab.ReclaimState // the stored state: open unless an earlier attempt went further
	NotifyWindowSeconds  float64
	ConfirmWindowSeconds float64
}

// AssessReclaim re-reads the allocation's evidence (with its run's last
// heartbeat and step), classifies it again, decides the mode from config and
// the pool's stage (governance.DecideFindingMode: observe reports, trial acts
// on low-risk queues only, protected work needs confirmation, an idle GPU
// that burst or holds memory is notified rather than released
// automatically) and records the reclaim with its basis (one per
// allocation).
func (a *Reclaims) AssessReclaim(ctx context.Context, in *AssessInput) (*AssessResult, error) {
	if in == nil || in.AllocationID == "" {
		return nil, invalidInput("assess reclaim: allocation ID is required")
	}
	cfg := a.d.config()
	now := a.d.now()
	res := &AssessResult{NotifyWindowSeconds: cfg.Reclaim.NotifyWindowSeconds, ConfirmWindowSeconds: cfg.Reclaim.ConfirmWindowSeconds}
	window := policy.Seconds(cfg.Reclaim.ObservationWindowSeconds)
	evs, err := a.d.Store.ReclaimEvidence(ctx, now.Add(-window))
	if err != nil {
		return nil, err
	}
	var ev *governance.Evidence
	for i := range evs {
		if evs[i].AllocationID == in.AllocationID {
			ev = &evs[i]
		}
	}
	if ev == nil {
		res.Detail = "allocation already released"
		return res, nil
	}
	if _, err := a.addRunReports(ctx, []*governance.Evidence{ev}, now, window); err != nil {
		return nil, err
	}
	f, ok := governance.Classify(ev, cfg, now)
	if !ok {
		res.Detail = "no longer reclaimable on the current evidence"
		return res, nil
	}
	d := governance.DecideFindingMode(cfg, ev, f)
	r, _, err := a.d.Store.OpenReclaim(ctx, store.NewReclaim{Evidence: *ev, Finding: f, Decision: d, WorkflowID: in.WorkflowID, At: now})
	if err != nil {
		return nil, err
	}
	res.Proceed, res.ReclaimID, res.JobID, res.Class, res.Mode, res.State = true, r.ID, r.JobID, string(r.Class), string(r.Mode), r.State
	res.Queue, res.Tier, res.Pool = ev.Queue, ev.Tier, ev.Pool
	res.Detail = r.Basis
	return res, nil
}

// CloseInput ends a reclaim without release.
type CloseInput struct {
	ReclaimID string
	State     vocab.ReclaimState // vocab.ReclaimReported or vocab.ReclaimExpired
	Detail    string
}

// CloseReclaim records a reclaim that ends without touching the allocation:
// reported (report mode) or expired (no confirmation in time).
func (a *Reclaims) CloseReclaim(ctx context.Context, in *CloseInput) error {
	if in == nil || in.ReclaimID == "" || (in.State != vocab.ReclaimReported && in.State != vocab.ReclaimExpired) {
		return invalidInput("close reclaim: reclaim ID and state reported or expired are required")
	}
	if err := a.d.Store.SetReclaimState(ctx, in.ReclaimID, in.State, in.Detail, a.d.now()); err != nil {
		return err
	}
	a.d.recordReclaim(ctx, in.ReclaimID)
	return nil
}

// NotifyInput is the notice of a notify-mode reclaim.
type NotifyInput struct {
	ReclaimID     string
	WindowSeconds float64
}

// OwnerNotice says when the owner was told and until when they may keep the GPUs.
type OwnerNotice struct {
	NoticeAt time.Time
	Deadline time.Time
}

// NotifyOwner tells the owner: it records the notice time and deadline on
// the reclaim and an audit entry on the job with the class and basis.
func (a *Reclaims) NotifyOwner(ctx context.Context, in *NotifyInput) (*OwnerNotice, error) {
	if in == nil || in.ReclaimID == "" {
		return nil, invalidInput("notify owner: reclaim ID is required")
	}
	now := a.d.now()
	r, err := a.d.Store.NoticeReclaim(ctx, in.ReclaimID, now.Add(policy.Seconds(in.WindowSeconds)), now)
	if err != nil {
		return nil, nonRetryable(err)
	}
	res := &OwnerNotice{}
	if r.NoticeAt != nil && r.NoticeDeadline != nil {
		res.NoticeAt, res.Deadline = *r.NoticeAt, *r.NoticeDeadline
	}
	return res, nil
}

// AwaitConfirmation marks a confirm-mode reclaim as waiting for an operator.
func (a *Reclaims) AwaitConfirmation(ctx context.Context, in *CloseInput) error {
	if in == nil || in.ReclaimID == "" {
		return invalidInput("await confirmation: reclaim ID is required")
	}
	return a.d.Store.SetReclaimState(ctx, in.ReclaimID, vocab.ReclaimAwaitConfirm, in.Detail, a.d.now())
}

// DecisionInput is an owner's keep or an operator's confirm.
type DecisionInput struct {
	ReclaimID string
	Actor     string
	Reason    string
}

// RecordDispute records the owner's objection: a false reclaim; nothing is released.
func (a *Reclaims) RecordDispute(ctx context.Context, in *DecisionInput) error {
	if in == nil || in.ReclaimID == "" {
		return invalidInput("record dispute: reclaim ID is required")
	}
	_, first, err := a.d.Store.DisputeReclaim(ctx, in.ReclaimID, in.Actor, in.Reason, a.d.now())
	if err == nil && first {
		a.d.recordReclaim(ctx, in.ReclaimID)
	}
	return err
}

// ReleaseReclaimInput releases a reclaim's allocation.
type ReleaseReclaimInput struct {
	ReclaimID string
	// By is who released: "reclaim" for auto and an expired notice, the
	// operator for a confirmation.
	By string
	// Confirmed is true when an operator (By) approved it; the decision is recorded first.
	Confirmed bool
	Reason    string
}

// ReleaseReclaimResult is what was released.
type ReleaseReclaimResult struct {
	State        vocab.ReclaimState
	GPUsReleased float64
	ReleasedAt   *time.Time
}

// ReleaseReclaimed releases the allocation. A run still going (an idle run,
// one whose executor stopped heartbeating, or one declared complete by its
// owner while it cleans up) is stopped through its job: the
// job is cancelled in the store and its workflow told `cancel`, which stops
// the run and releases the GPUs; if the workflow is gone or has not done it
// within two minutes, the store releases them itself. A run that already
// ended (failed, completed) has its GPUs released in the store directly. The
// scheduler is then woken.
func (a *Reclaims) ReleaseReclaimed(ctx context.Context, in *ReleaseReclaimInput) (*ReleaseReclaimResult, error) {
	if in == nil || in.ReclaimID == "" || in.By == "" {
		return nil, invalidInput("release reclaimed: reclaim ID and actor are required")
	}
	if in.Confirmed {
		if _, err := a.d.Store.ConfirmReclaim(ctx, in.ReclaimID, in.By, in.Reason, a.d.now()); err != nil {
			return nil, nonRetryable(err)
		}
	}
	r, err := a.d.Store.GetReclaim(ctx, in.ReclaimID)
	if err != nil {
		return nil, nonRetryable(err)
	}
	if r.ReleasedAt == nil && r.State != vocab.ReclaimResolved {
		if r, err = a.release(ctx, r, in.By); err != nil {
			return nil, err
		}
		a.d.tellScheduler(ctx, r.JobID, r.AllocationID, "reclaimed")
		a.d.recordReclaim(ctx, r.ID)
	}
	return &ReleaseReclaimResult{State: r.State, GPUsReleased: r.GPUsReleased, ReleasedAt: r.ReleasedAt}, nil
}

// release stops a run that was still going when the reclaim was found (an
// idle run, a failed one whose executor stopped heartbeating, or one whose
// owner declared the work complete) through its job workflow, so that its
// process is stopped too, or releases in the store.
func (a *Reclaims) release(ctx context.Context, r *store.Reclaim, by string) (*store.Reclaim, error) {
	runID, _ := r.Evidence["run_id"].(string)
	runOutcome, _ := r.Evidence["run_outcome"].(string)
	if runID == "" || runOutcome != "" {
		return a.d.Store.ReleaseReclaimed(ctx, r.ID, by, a.d.now())
	}
	reason := fmt.Sprintf("reclaimed by %s (%s): %s", r.ID, r.Class, r.Basis)
	if err := a.d.Store.CancelJob(ctx, r.JobID, by, reason); err != nil && !errors.Is(err, store.ErrConflict) {
		return nil, nonRetryable(err)
	}
	err := a.d.signal(ctx, temporalx.JobWorkflowID(r.JobID), temporalx.SignalCancel, temporalx.CancelSignal{Actor: by, Reason: reason})
	if err == nil && a.d.Temporal != nil && a.waitRunEnded(ctx, runID) {
		if rr, err := a.d.Store.MarkReclaimReleased(ctx, r.ID, by, a.d.now()); err != nil || rr.ReleasedAt != nil {
			return rr, err
		}
	}
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	return a.d.Store.ReleaseReclaimed(ctx, r.ID, by, a.d.now())
}

// waitRunEnded polls until the run has ended (its job workflow finished it,
// releasing the GPUs in the same transaction) or jobStopTimeout passes.
func (a *Reclaims) waitRunEnded(ctx context.Context, runID string) bool {
	deadline := time.Now().Add(jobStopTimeout)
	for time.Now().Before(deadline) {
		activity.RecordHeartbeat(ctx, runID)
		if p, err := a.d.Store.GetRunProgress(ctx, runID); err == nil && p.EndedAt != nil {
			return true
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(a.d.poll()):
		}
	}
	return false
}
