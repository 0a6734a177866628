package activities

import (
	"context"
	"errors"
	"fmt"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	workflowpb "go.temporal.io/api/workflow/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"

	"github.com/gpugov/gpugov/internal/executor"
	"github.com/gpugov/gpugov/internal/governance"
	"github.com/gpugov/gpugov/internal/policy"
	"github.com/gpugov/gpugov/internal/scheduling"
	"github.com/gpugov/gpugov/internal/temporalx"
	"github.com/gpugov/gpugov/internal/vocab"
	"github.com/gpugov/gpugov/store"
)

// GovernanceStore is the part of *store.Store the preemption and reclaim
// activities use.
type GovernanceStore interface {
	GetPreemption(ctx context.Context, id string) (*store.PreemptionRecord, error)
	GetPreemptionVictim(ctx context.Context, id string) (*store.PreemptionVictim, error)
	NoticePreemption(ctx context.Context, id, workflowID string, at time.Time) (*store.PreemptionRecord, error)
	AbortPreemption(ctx context.Context, id string, outcome vocab.PreemptionOutcome, detail string, at time.Time) error
	RecordPreemptionCheckpoint(ctx context.Context, id string, stepAtNotice *int64) (*store.CheckpointOutcome, error)
	ReleasePreempted(ctx context.Context, id, detail string, at time.Time) (*store.PreemptionRelease, error)
	RequeuePreempted(ctx context.Context, id string, at time.Time) (*store.Requeue, error)
	FinishPreemption(ctx context.Context, id string, r store.PreemptionResume) (*store.PreemptionRecord, error)
	NotifyResumed(ctx context.Context, r store.ResumeObserved) error
	GetRunProgress(ctx context.Context, runID string) (*store.RunProgress, error)
	RecordDrillEvidence(ctx context.Context, id string) (vocab.ResumeOutcome, error)

	ReclaimEvidence(ctx context.Context, since time.Time) ([]governance.Evidence, error)
	ObserveRunSteps(ctx context.Context, steps []store.RunStep, at time.Time) (map[string]time.Time, error)
	OpenReclaim(ctx context.Context, nr store.NewReclaim) (*store.Reclaim, bool, error)
	GetReclaim(ctx context.Context, id string) (*store.Reclaim, error)
	SetReclaimState(ctx context.Context, id string, state vocab.ReclaimState, detail string, at time.Time) error
	NoticeReclaim(ctx context.Context, id string, deadline, at time.Time) (*store.Reclaim, error)
	DisputeReclaim(ctx context.Context, id, by, reason string, at time.Time) (*store.Reclaim, bool, error)
	ConfirmReclaim(ctx context.Context, id, by, reason string, at time.Time) (*store.Reclaim, error)
	ReleaseReclaimed(ctx context.Context, id, by string, at time.Time) (*store.Reclaim, error)
	MarkReclaimReleased(ctx context.Context, id, by string, at time.Time) (*store.Reclaim, error)
	CancelJob(ctx context.Context, jobID, actor, reason string) error
}

var _ GovernanceStore = (*store.Store)(nil)

// RunProgressSource reports the step a job's current run has reached, as
// its run activity last heartbeated it; ok is false when no run activity
// is pending or it has not heartbeated yet.
type RunProgressSource interface {
	RunStep(ctx context.Context, jobID string) (step int64, ok bool, err error)
}

// RunHeartbeatSource reports when a job's current run last heartbeated, the
// reclaim scan's evidence of a lost executor; ok is false when no run
// activity is pending or it has not heartbeated yet.
type RunHeartbeatSource interface {
	LastHeartbeat(ctx context.Context, jobID string) (at time.Time, ok bool, err error)
}

// RunReport is what a job's pending run activity last heartbeated: its step
// (executor.Progress.Step) and when.
type RunReport struct {
	Step         int64
	HasStep      bool // false: no heartbeat details yet
	HeartbeatAt  time.Time
	HasHeartbeat bool // false: the heartbeat time is unknown
}

// RunReportSource reads a job's run report in one call (TemporalRunProgress
// describes the job workflow once); ok is false when no run activity is
// pending. The reclaim scan prefers it to RunStep and LastHeartbeat.
type RunReportSource interface {
	RunReport(ctx context.Context, jobID string) (rep RunReport, ok bool, err error)
}

// GovernanceRecorder receives the final outcome of each preemption and
// reclaim, and each experiment rollback, for metrics.
// *telemetry.GovernanceMetrics implements it.
type GovernanceRecorder interface {
	RecordPreemption(ctx context.Context, pool, outcome string, lossGPUSeconds *float64, resumedCorrectly *bool)
	RecordReclaim(ctx context.Context, pool, class, mode, state string, gpusReleased float64, disputed bool)
	// RecordExperimentRollback counts one experiment rolled back
	// (gpugov_experiment_rollbacks_total); the experiment's rollback step
	// calls it once per rollback.
	RecordExperimentRollback(ctx context.Context)
}

// recordPreemption reports a finished preemption record to Metrics.
func (d *Deps) recordPreemption(ctx context.Context, id string) {
	if d.Metrics == nil {
		return
	}
	if rec, err := d.Store.GetPreemption(ctx, id); err == nil && rec.FinishedAt != nil {
		d.Metrics.RecordPreemption(ctx, rec.Pool, string(rec.Outcome), rec.EffectiveLossGPUSeconds, rec.ResumedCorrectly)
	}
}

// recordReclaim reports a reclaim in a final state to Metrics.
func (d *Deps) recordReclaim(ctx context.Context, id string) {
	if d.Metrics == nil {
		return
	}
	if r, err := d.Store.GetReclaim(ctx, id); err == nil {
		d.Metrics.RecordReclaim(ctx, r.Pool, string(r.Class), string(r.Mode), string(r.State), r.GPUsReleased, r.Disputed)
	}
}

func (d *Deps) now() time.Time { return clock(d.Now) }

func (d *Deps) config() *policy.Policy {
	if d.Governance == nil {
		return policy.Default()
	}
	if c := d.Governance(); c != nil {
		return c
	}
	return policy.Default()
}

func (d *Deps) policy(ctx context.Context) (*scheduling.Policy, error) {
	if d.Policy == nil {
		p := scheduling.DefaultPolicy()
		return &p, nil
	}
	return d.Policy(ctx)
}

func (d *Deps) poll() time.Duration {
	if d.PollInterval <= 0 {
		return time.Second
	}
	return d.PollInterval
}

// schedulerID is the scheduler to tell about jobID's released GPUs:
// SchedulerWorkflowID, else the job's pool's shard's (ShardOf; the job is
// read for its pool), else the default shard's.
func (d *Deps) schedulerID(ctx context.Context, jobID string) string {
	if d.SchedulerWorkflowID != "" {
		return d.SchedulerWorkflowID
	}
	if d.ShardOf != nil && d.Store != nil {
		if j, err := d.Store.GetJob(ctx, jobID); err == nil {
			return temporalx.SchedulerWorkflowID(d.ShardOf(j.Request.Pool))
		}
	}
	return temporalx.SchedulerWorkflowID(temporalx.DefaultShard)
}

// signal sends a signal, if a client is configured. A workflow that is
// closed or absent is reported as errWorkflowGone.
func (d *Deps) signal(ctx context.Context, workflowID, name string, arg any) error {
	if d.Temporal == nil {
		return nil
	}
	err := d.Temporal.SignalWorkflow(ctx, workflowID, "", name, arg)
	var nf *serviceerror.NotFound
	if errors.As(err, &nf) {
		return fmt.Errorf("%s: %w", workflowID, errWorkflowGone)
	}
	return err
}

// tellScheduler wakes the scheduler after GPUs were released; a failure is
// not an error (its timer cycle finds the free GPUs anyway).
func (d *Deps) tellScheduler(ctx context.Context, jobID, allocationID string, outcome vocab.RunOutcome) {
	_ = d.signal(ctx, d.schedulerID(ctx, jobID), temporalx.SignalAllocationReleased,
		temporalx.AllocationReleasedSignal{JobID: jobID, AllocationID: allocationID, Outcome: string(outcome)})
}

var errWorkflowGone = errors.New("workflow closed or not found")

// TemporalRunProgress is the RunProgressSource of a Temporal client: it
// describes the job's workflow and decodes the heartbeat details
// (executor.Progress) of its pending run activity.
type TemporalRunProgress struct {
	Client client.Client
}

// RunStep returns the step the job's pending run activity last heartbeated.
func (p TemporalRunProgress) RunStep(ctx context.Context, jobID string) (int64, bool, error) {
	pa, err := p.runActivity(ctx, jobID)
	if err != nil || pa == nil || pa.GetHeartbeatDetails() == nil {
		return 0, false, err
	}
	var pr executor.Progress
	if err := converter.GetDefaultDataConverter().FromPayloads(pa.GetHeartbeatDetails(), &pr); err != nil {
		return 0, false, fmt.Errorf("decode heartbeat of job %s: %w", jobID, err)
	}
	return pr.Step, true, nil
}

// LastHeartbeat returns when the job's pending run activity last
// heartbeated. A retry after a heartbeat timeout may carry no heartbeat time
// (the dev server keeps the previous one, but a retry taken by a frozen
// worker was seen without it); the instant the timed-out attempt ended then
// stands for the last heartbeat (an upper bound: no heartbeat came for a
// heartbeat timeout before it, so the age it gives is never too large). A
// job workflow that is gone has no pending run: ok is false.
func (p TemporalRunProgress) LastHeartbeat(ctx context.Context, jobID string) (time.Time, bool, error) {
	pa, err := p.runActivity(ctx, jobID)
	var nf *serviceerror.NotFound
	if errors.As(err, &nf) {
		return time.Time{}, false, nil
	}
	if err != nil || pa == nil {
		return time.Time{}, false, err
	}
	at, ok := lastHeartbeatOf(pa)
	return at, ok, nil
}

// RunReport returns the step and heartbeat time of the job's pending run
// activity from one description of its workflow (LastHeartbeat's rules for
// the time); ok is false when the workflow is gone or no run activity is
// pending.
func (p TemporalRunProgress) RunReport(ctx context.Context, jobID string) (RunReport, bool, error) {
	pa, err := p.runActivity(ctx, jobID)
	var nf *serviceerror.NotFound
	if errors.As(err, &nf) {
		return RunReport{}, false, nil
	}
	if err != nil || pa == nil {
		return RunReport{}, false, err
	}
	var rep RunReport
	rep.HeartbeatAt, rep.HasHeartbeat = lastHeartbeatOf(pa)
	if pa.GetHeartbeatDetails() != nil {
		var pr executor.Progress
		if err := converter.GetDefaultDataConverter().FromPayloads(pa.GetHeartbeatDetails(), &pr); err != nil {
			return rep, true, fmt.Errorf("decode heartbeat of job %s: %w", jobID, err)
		}
		rep.Step, rep.HasStep = pr.Step, true
	}
	return rep, true, nil
}

// lastHeartbeatOf is LastHeartbeat's reading of one pending run activity.
func lastHeartbeatOf(pa *workflowpb.PendingActivityInfo) (time.Time, bool) {
	if hb := pa.GetLastHeartbeatTime(); hb != nil {
		return hb.AsTime(), true
	}
	if heartbeatTimedOut(pa) && pa.GetLastAttemptCompleteTime() != nil {
		return pa.GetLastAttemptCompleteTime().AsTime(), true
	}
	return time.Time{}, false
}

// heartbeatTimedOut reports whether the pending activity's previous attempt
// ended by a heartbeat timeout.
func heartbeatTimedOut(pa *workflowpb.PendingActivityInfo) bool {
	return pa.GetAttempt() > 1 &&
		pa.GetLastFailure().GetTimeoutFailureInfo().GetTimeoutType() == enumspb.TIMEOUT_TYPE_HEARTBEAT
}

// runActivity describes the job's workflow and returns its pending run
// activity, or nil when none is pending.
func (p TemporalRunProgress) runActivity(ctx context.Context, jobID string) (*workflowpb.PendingActivityInfo, error) {
	d, err := p.Client.DescribeWorkflow(ctx, temporalx.JobWorkflowID(jobID), "")
	if err != nil {
		return nil, err
	}
	for _, pa := range d.RawResponse.GetPendingActivities() {
		if pa.GetActivityType().GetName() == executor.RunActivityName {
			return pa, nil
		}
	}
	return nil, nil
}

// heartbeats returns Progress as a RunHeartbeatSource, or nil.
func (d *Deps) heartbeats() RunHeartbeatSource {
	hs, _ := d.Progress.(RunHeartbeatSource)
	return hs
}

// runReport reads a job's run report from Progress: through RunReportSource
// when it implements it, else through RunStep and, when it is one, the
// RunHeartbeatSource. ok is false when nothing is known.
func (d *Deps) runReport(ctx context.Context, jobID string) (RunReport, bool, error) {
	if rs, isRS := d.Progress.(RunReportSource); isRS {
		return rs.RunReport(ctx, jobID)
	}
	var rep RunReport
	if d.Progress == nil {
		return rep, false, nil
	}
	var err error
	if rep.Step, rep.HasStep, err = d.Progress.RunStep(ctx, jobID); err != nil {
		return rep, false, err
	}
	if hs := d.heartbeats(); hs != nil {
		if rep.HeartbeatAt, rep.HasHeartbeat, err = hs.LastHeartbeat(ctx, jobID); err != nil {
			return rep, false, err
		}
	}
	return rep, rep.HasStep || rep.HasHeartbeat, nil
}
