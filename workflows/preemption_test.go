package workflows_test

import (
	"context"
	"errors"
	"maps"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/mock"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"

	"github.com/gpugov/gpugov/activities"
	"github.com/gpugov/gpugov/internal/policy"
	"github.com/gpugov/gpugov/internal/scheduling"
	"github.com/gpugov/gpugov/internal/temporalx"
	"github.com/gpugov/gpugov/internal/vocab"
	"github.com/gpugov/gpugov/store"
	"github.com/gpugov/gpugov/workflows"
)

// recordingSignaler is the activities' Temporal client in testsuite tests
// (there is no server): it records the signals they send.
type recordingSignaler struct {
	mu   sync.Mutex
	sent []sentSignal
	gone map[string]bool // workflow IDs answered NotFound
}

func (r *recordingSignaler) SignalWorkflow(_ context.Context, workflowID, _, name string, arg any) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.gone[workflowID] {
		return errNotFound(workflowID)
	}
	r.sent = append(r.sent, sentSignal{workflowID, name, arg})
	return nil
}

func (r *recordingSignaler) named(name string) []sentSignal {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []sentSignal
	for _, s := range r.sent {
		if s.Name == name {
			out = append(out, s)
		}
	}
	return out
}

// victimFixture is a running checkpointable victim on GPU 0 with a
// checkpoint at step 40, a trigger job, and an open preemption of the victim.
type victimFixture struct {
	st           *store.Store
	victim       *store.Job
	trigger      *store.Job
	allocID      string
	runID        string
	preemptionID string
	checkpointAt time.Time
}

func newVictimFixture(t *testing.T) *victimFixture {
	t.Helper()
	ctx := context.Background()
	st := newStore(t, 2)
	f := &victimFixture{st: st}
	f.victim = submitJob(t, st, jobSpec{gpus: 1, runSeconds: 1000, checkpointInterval: 20})
	placed := placeJob(t, st, f.victim.ID)
	f.allocID = placed.AllocationID
	var err error
	if f.runID, err = st.MarkRunning(ctx, f.victim.ID, f.allocID, 0, time.Now().Add(-time.Minute)); err != nil {
		t.Fatal(err)
	}
	f.checkpointAt = time.Now().Add(-30 * time.Second).UTC().Truncate(time.Microsecond)
	if err := st.RecordCheckpoint(ctx, f.victim.ID, f.runID, scheduling.Checkpoint{At: f.checkpointAt, Step: 40, Location: "sim://40"}); err != nil {
		t.Fatal(err)
	}
	f.trigger = submitJob(t, st, jobSpec{gpus: 2, runSeconds: 10})
	res := &scheduling.Result{PolicyVersion: "test", At: time.Now(), Preemptions: []scheduling.PreemptionProposal{{
		ForJobID: f.trigger.ID, Pool: testPool, Node: testNode, Act: true, EstimatedLossGPUSeconds: 90,
		Reason: "test proposal", Victims: []scheduling.Victim{{JobID: f.victim.ID, AllocationID: f.allocID, GPUs: 1, EstimatedLossGPUSeconds: 90}},
	}}}
	out, err := st.ApplyCycle(ctx, "cycle-preempt-"+f.victim.ID, res, time.Now())
	if err != nil || len(out.Preemptions) != 1 {
		t.Fatalf("preemption not opened: %+v %v", out, err)
	}
	f.preemptionID = out.Preemptions[0].PreemptionID
	return f
}

func (f *victimFixture) input() *workflows.PreemptionInput {
	return &workflows.PreemptionInput{PreemptionID: f.preemptionID, ForJobID: f.trigger.ID, VictimJobID: f.victim.ID,
		AllocationID: f.allocID, RunID: f.runID}
}

// preemptEnv is a testsuite environment running the governance workflows
// with real activities on the fixture's store.
type preemptEnv struct {
	*testsuite.TestWorkflowEnvironment
	sig *recordingSignaler

	mu    sync.Mutex
	attrs map[string]string // the gpugov search attributes upserted, by name
}

// upserted returns the gpugov search attributes the workflow set.
func (e *preemptEnv) upserted() map[string]string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return maps.Clone(e.attrs)
}

func newPreemptEnv(t *testing.T, st activities.ServiceStore, pol scheduling.Policy, cfg *policy.Policy) *preemptEnv {
	var suite testsuite.WorkflowTestSuite
	suite.SetLogger(quietLogger())
	env := &preemptEnv{TestWorkflowEnvironment: suite.NewTestWorkflowEnvironment(), sig: &recordingSignaler{gone: map[string]bool{}},
		attrs: map[string]string{}}
	env.SetTestTimeout(2 * time.Minute)
	workflows.RegisterServiceWorker(env, activities.Deps{
		Store: st, Temporal: env.sig, PollInterval: 20 * time.Millisecond,
		Policy:     func(context.Context) (*scheduling.Policy, error) { return &pol, nil },
		Governance: func() *policy.Policy { return cfg },
	})
	env.OnUpsertTypedSearchAttributes(mock.Anything).Return(nil).Run(func(args mock.Arguments) {
		sa := args.Get(0).(temporal.SearchAttributes)
		env.mu.Lock()
		defer env.mu.Unlock()
		for _, k := range temporalx.SearchAttributeKeys {
			if v, ok := sa.GetKeyword(k); ok {
				env.attrs[k.GetName()] = v
			}
		}
	}).Maybe()
	return env
}

func (e *preemptEnv) result(t *testing.T) *workflows.PreemptionResult {
	t.Helper()
	if !e.IsWorkflowCompleted() {
		t.Fatal("workflow did not complete")
	}
	if err := e.GetWorkflowError(); err != nil {
		t.Fatalf("workflow error: %v", err)
	}
	var res workflows.PreemptionResult
	if err := e.GetWorkflowResult(&res); err != nil {
		t.Fatal(err)
	}
	return &res
}

// stopVictim plays the victim's job workflow at workflow time d: the
// executor saved a checkpoint at saveStep (0: none) and the run stopped at
// stopStep; the answer is sent `times` times, after one for another preemption.
func (f *victimFixture) stopVictim(t *testing.T, env *preemptEnv, d time.Duration, stopStep, saveStep int64, times int) {
	env.RegisterDelayedCallback(func() {
		var last *scheduling.Checkpoint
		if saveStep > 0 {
			cp := scheduling.Checkpoint{At: time.Now().UTC(), Step: saveStep, Location: "sim://final"}
			if err := f.st.RecordCheckpoint(context.Background(), f.victim.ID, f.runID, cp); err != nil {
				t.Error(err)
			}
			last = &cp
		}
		env.SignalWorkflow(temporalx.SignalRunStopped, temporalx.RunStoppedSignal{PreemptionID: "p-other", Outcome: temporalx.StoppedPreempted, Step: 1})
		for range times {
			env.SignalWorkflow(temporalx.SignalRunStopped, temporalx.RunStoppedSignal{PreemptionID: f.preemptionID, JobID: f.victim.ID,
				RunID: f.runID, Outcome: temporalx.StoppedPreempted, Step: stopStep, LastCheckpoint: last})
		}
	}, d)
}

// resumeVictim plays the scheduler and the victim at workflow time d: the
// victim is placed on GPU 1, its next run starts at startStep and, when
// passStep > 0, checkpoints at passStep 20 s (by its clock) after its start
// (progress past the saved step, without which no resume is verified).
func (f *victimFixture) resumeVictim(t *testing.T, env *preemptEnv, d time.Duration, startStep, passStep int64) (started *time.Time) {
	started = new(time.Time)
	env.RegisterDelayedCallback(func() {
		ctx := context.Background()
		now := time.Now().UTC().Truncate(time.Microsecond)
		out, err := f.st.ApplyCycle(ctx, "cycle-resume-"+f.victim.ID, &scheduling.Result{PolicyVersion: "test", At: now,
			Placements: []scheduling.Placement{{JobID: f.victim.ID, Pool: testPool, Node: testNode, Rank: 1,
				GPUs: []scheduling.GPUShare{{UUID: gpuUUID(1), Milli: 1000}}}}}, now)
		if err != nil || len(out.Placed) != 1 {
			t.Errorf("victim not placed again: %+v %v", out, err)
			return
		}
		run, err := f.st.MarkRunning(ctx, f.victim.ID, out.Placed[0].AllocationID, startStep, now)
		if err != nil {
			t.Error(err)
			return
		}
		*started = now
		if passStep > 0 {
			if err := f.st.RecordCheckpoint(ctx, f.victim.ID, run, scheduling.Checkpoint{At: now.Add(20 * time.Second), Step: passStep}); err != nil {
				t.Error(err)
			}
		}
		env.SignalWorkflow(temporalx.SignalResumed, temporalx.ResumedSignal{PreemptionID: f.preemptionID, JobID: f.victim.ID,
			RunID: run, StartStep: startStep, StartedAt: now})
	}, d)
	return started
}

func near(a, b float64) bool { return math.Abs(a-b) < 1e-3 }

// TestPreemptionRunsAllFiveSteps: the victim saves a checkpoint at the step
// it reached and answers (twice, after an answer for another preemption);
// it is released, requeued with its aging, resumes from that checkpoint,
// and the record holds every step's time and the loss of the formula.
func TestPreemptionRunsAllFiveSteps(t *testing.T) {
	f := newVictimFixture(t)
	env := newPreemptEnv(t, f.st, scheduling.DefaultPolicy(), policy.Default())
	f.stopVictim(t, env, time.Second, 55, 55, 2)
	f.resumeVictim(t, env, 30*time.Second, 55, 56) // progress past the saved step verifies the resume

	env.ExecuteWorkflow(workflows.PreemptionWorkflowName, f.input())

	res := env.result(t)
	if res.Outcome != vocab.PreemptionCompleted || !res.CheckpointCame || res.ResumedCorrectly == nil || !*res.ResumedCorrectly {
		t.Fatalf("result %+v, want completed with a checkpoint and a correct resume", res)
	}
	rec, err := f.st.GetPreemption(context.Background(), f.preemptionID)
	if err != nil {
		t.Fatal(err)
	}
	for name, at := range map[string]*time.Time{"notified": rec.NotifiedAt, "saved": rec.SavedAt, "released": rec.ReleasedAt,
		"rescheduled": rec.RescheduledAt, "resumed": rec.ResumedAt, "passed": rec.PassedAt, "finished": rec.FinishedAt} {
		if at == nil {
			t.Errorf("%s time not recorded", name)
		}
	}
	if rec.SavedCheckpoint == nil || rec.SavedCheckpoint.Step != 55 || *rec.StepAtNotice != 55 || *rec.ResumedFromStep != 55 {
		t.Fatalf("record %+v, want saved and resumed at step 55", rec)
	}
	// Saved after the notice: no work lost; the loss is the save time; the
	// run resumed at the step it had reached, so nothing was recomputed.
	wantSave := rec.SavedCheckpoint.At.Sub(*rec.NotifiedAt).Seconds()
	if *rec.LostSeconds != 0 || !near(*rec.SaveRestoreSeconds, wantSave) || *rec.RecomputeSeconds != 0 ||
		!near(*rec.EffectiveLossGPUSeconds, 1*wantSave) {
		t.Fatalf("loss parts lost=%v save=%v recompute=%v total=%v, want save %v and total equal to it", *rec.LostSeconds,
			*rec.SaveRestoreSeconds, *rec.RecomputeSeconds, *rec.EffectiveLossGPUSeconds, wantSave)
	}
	victim, _ := f.st.GetJob(context.Background(), f.victim.ID)
	if victim.Recovery.VerifiedResumes != 1 || !victim.SubmitTime.Equal(f.victim.SubmitTime) {
		t.Fatalf("victim recovery %+v submit %v, want one verified resume and the original submit time", victim.Recovery, victim.SubmitTime)
	}
	if !allocationReleased(t, f.st, f.allocID) {
		t.Fatal("victim allocation still held")
	}
	if n := len(env.sig.named(temporalx.SignalPreempt)); n != 1 {
		t.Fatalf("%d preempt signals, want 1", n)
	}
	if rel := env.sig.named(temporalx.SignalAllocationReleased); len(rel) != 1 {
		t.Fatalf("allocation-released signals %+v, want one to the scheduler", rel)
	}
	if n := countRows(t, f.st, `SELECT count(*) FROM wait_events WHERE job_id = $1 AND reason = 'capacity_busy'`, f.victim.ID); n != 1 {
		t.Fatalf("%d capacity_busy wait events for the requeued victim, want 1", n)
	}
	want := map[string]string{temporalx.QueueKey.GetName(): f.victim.Queue, temporalx.TierKey.GetName(): f.victim.Tier.String(),
		temporalx.PoolKey.GetName(): testPool}
	if got := env.upserted(); !maps.Equal(got, want) {
		t.Fatalf("search attributes %v, want %v", got, want)
	}
}

// TestPreemptionWithoutCheckpointReleasesWhenPolicySays: no checkpoint in
// the grace period, policy release-anyway: the work since the last
// checkpoint (step 40, 30 s before the notice) counts as lost, the resume is
// from step 40 and the recompute until step 60 is measured.
func TestPreemptionWithoutCheckpointReleasesWhenPolicySays(t *testing.T) {
	f := newVictimFixture(t)
	pol := scheduling.DefaultPolicy()
	pol.Preemption.ReleaseWithoutCheckpoint = true
	env := newPreemptEnv(t, f.st, pol, policy.Default())
	f.stopVictim(t, env, time.Second, 60, 0, 1)
	f.resumeVictim(t, env, time.Hour/2, 40, 60)

	env.ExecuteWorkflow(workflows.PreemptionWorkflowName, f.input())

	res := env.result(t)
	if res.Outcome != vocab.PreemptionCompleted || res.CheckpointCame || len(res.Failures) != 1 {
		t.Fatalf("result %+v, want completed without a checkpoint and one failure noted", res)
	}
	rec, _ := f.st.GetPreemption(context.Background(), f.preemptionID)
	wantLost := rec.NotifiedAt.Sub(f.checkpointAt).Seconds()
	if !near(*rec.LostSeconds, wantLost) || *rec.SaveRestoreSeconds != 0 || !near(*rec.RecomputeSeconds, 20) ||
		!near(*rec.EffectiveLossGPUSeconds, wantLost+20) {
		t.Fatalf("loss lost=%v save=%v recompute=%v total=%v, want lost %v, recompute 20, total %v", *rec.LostSeconds,
			*rec.SaveRestoreSeconds, *rec.RecomputeSeconds, *rec.EffectiveLossGPUSeconds, wantLost, wantLost+20)
	}
}

// TestPreemptionWithoutCheckpointAbortsWhenPolicySays: no answer and no
// checkpoint within the grace period, policy abort: nothing is released and
// the victim is told to run again on its GPUs.
func TestPreemptionWithoutCheckpointAbortsWhenPolicySays(t *testing.T) {
	f := newVictimFixture(t)
	env := newPreemptEnv(t, f.st, scheduling.DefaultPolicy(), policy.Default())

	env.ExecuteWorkflow(workflows.PreemptionWorkflowName, f.input())

	res := env.result(t)
	if res.Outcome != vocab.PreemptionAbortedNoCkpt {
		t.Fatalf("result %+v, want aborted_no_checkpoint", res)
	}
	if allocationReleased(t, f.st, f.allocID) || jobState(t, f.st, f.victim.ID) != vocab.JobRunning {
		t.Fatal("aborted preemption released the victim")
	}
	if a := env.sig.named(temporalx.SignalPreemptAborted); len(a) != 1 || a[0].WorkflowID != temporalx.JobWorkflowID(f.victim.ID) {
		t.Fatalf("preempt-aborted signals %+v, want one to the victim", a)
	}
	rec, _ := f.st.GetPreemption(context.Background(), f.preemptionID)
	if rec.State != "aborted" || rec.CheckpointInGrace == nil || *rec.CheckpointInGrace || len(rec.Failures) != 1 {
		t.Fatalf("record %+v, want aborted with the failure", rec)
	}
}

// TestPreemptionWrongStepResumeDowngrades: the next run starts from step 0
// although the checkpoint is at 55: a failure, the job's verified resumes
// drop to 0 with the downgrade flag, and a later preemption of it aborts at
// its first step.
func TestPreemptionWrongStepResumeDowngrades(t *testing.T) {
	f := newVictimFixture(t)
	env := newPreemptEnv(t, f.st, scheduling.DefaultPolicy(), policy.Default())
	f.stopVictim(t, env, time.Second, 55, 55, 1)
	f.resumeVictim(t, env, 30*time.Second, 0, 0)

	env.ExecuteWorkflow(workflows.PreemptionWorkflowName, f.input())

	res := env.result(t)
	if res.Outcome != vocab.PreemptionResumeFailed || res.ResumedCorrectly == nil || *res.ResumedCorrectly {
		t.Fatalf("result %+v, want resume_failed", res)
	}
	v, err := f.st.GetPreemptionVictim(context.Background(), f.preemptionID)
	if err != nil || !v.ResumeDowngraded {
		t.Fatalf("victim %+v (%v), want its recovery evidence downgraded", v, err)
	}
	if j, _ := f.st.GetJob(context.Background(), f.victim.ID); j.Recovery.VerifiedResumes != 0 {
		t.Fatalf("verified resumes %d, want 0", j.Recovery.VerifiedResumes)
	}
	if n := countRows(t, f.st, `SELECT count(*) FROM audit_log WHERE subject = $1 AND action = 'recovery_downgrade'`, f.victim.ID); n != 1 {
		t.Fatalf("%d downgrade audit entries, want 1", n)
	}
}

// TestPreemptionOfProtectedVictimAbortsAtNotify: the victim became protected
// after the plan chose it: the first step aborts and touches nothing.
func TestPreemptionOfProtectedVictimAbortsAtNotify(t *testing.T) {
	f := newVictimFixture(t)
	if _, err := f.st.Pool().Exec(context.Background(), `UPDATE jobs SET protected = true WHERE id = $1`, f.victim.ID); err != nil {
		t.Fatal(err)
	}
	env := newPreemptEnv(t, f.st, scheduling.DefaultPolicy(), policy.Default())

	env.ExecuteWorkflow(workflows.PreemptionWorkflowName, f.input())

	res := env.result(t)
	if res.Outcome != vocab.PreemptionAbortedIneligible || len(env.sig.named(temporalx.SignalPreempt)) != 0 {
		t.Fatalf("result %+v, signals %+v: want aborted at notify, no preempt sent", res, env.sig.sent)
	}
	if allocationReleased(t, f.st, f.allocID) {
		t.Fatal("protected victim's allocation released")
	}
}

// crashingStore runs every governance step's store call, then fails the
// first attempt as a worker crash after the effect would: the retried
// attempt must find the effect done and add nothing.
type crashingStore struct {
	*store.Store
	mu      sync.Mutex
	crashed map[string]bool
}

func (c *crashingStore) crashOnce(step string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.crashed[step] {
		return nil
	}
	c.crashed[step] = true
	return errors.New("worker crashed after " + step)
}

func (c *crashingStore) NoticePreemption(ctx context.Context, id, wf string, at time.Time) (*store.PreemptionRecord, error) {
	r, err := c.Store.NoticePreemption(ctx, id, wf, at)
	if err == nil {
		err = c.crashOnce("notice")
	}
	return r, err
}

func (c *crashingStore) RecordPreemptionCheckpoint(ctx context.Context, id string, step *int64) (*store.CheckpointOutcome, error) {
	r, err := c.Store.RecordPreemptionCheckpoint(ctx, id, step)
	if err == nil {
		err = c.crashOnce("checkpoint")
	}
	return r, err
}

func (c *crashingStore) ReleasePreempted(ctx context.Context, id, detail string, at time.Time) (*store.PreemptionRelease, error) {
	r, err := c.Store.ReleasePreempted(ctx, id, detail, at)
	if err == nil {
		err = c.crashOnce("release")
	}
	return r, err
}

func (c *crashingStore) RequeuePreempted(ctx context.Context, id string, at time.Time) (*store.Requeue, error) {
	r, err := c.Store.RequeuePreempted(ctx, id, at)
	if err == nil {
		err = c.crashOnce("requeue")
	}
	return r, err
}

func (c *crashingStore) FinishPreemption(ctx context.Context, id string, pr store.PreemptionResume) (*store.PreemptionRecord, error) {
	r, err := c.Store.FinishPreemption(ctx, id, pr)
	if err == nil {
		err = c.crashOnce("finish")
	}
	return r, err
}

// TestPreemptionStepsRetriedAfterCrashChangeNothingTwice: every step's
// first attempt dies after its store effect; the retries complete the
// preemption with each effect once (one notice time, one release, one
// verified resume, one audit entry per step, usage charged once).
func TestPreemptionStepsRetriedAfterCrashChangeNothingTwice(t *testing.T) {
	f := newVictimFixture(t)
	cs := &crashingStore{Store: f.st, crashed: map[string]bool{}}
	env := newPreemptEnv(t, cs, scheduling.DefaultPolicy(), policy.Default())
	f.stopVictim(t, env, time.Second, 55, 55, 1)
	f.resumeVictim(t, env, time.Minute, 55, 56)

	env.ExecuteWorkflow(workflows.PreemptionWorkflowName, f.input())

	res := env.result(t)
	if res.Outcome != vocab.PreemptionCompleted || len(cs.crashed) != 5 {
		t.Fatalf("result %+v after crashes %v, want completed after 5 crashed steps", res, cs.crashed)
	}
	for _, action := range []string{"preempt_notice", "preempt_release", "preempt_requeue", "preempt_finish"} {
		if n := countRows(t, f.st, `SELECT count(*) FROM audit_log WHERE subject = $1 AND action = $2`, f.preemptionID, action); n != 1 {
			t.Errorf("%d %s audit entries, want 1", n, action)
		}
	}
	if j, _ := f.st.GetJob(context.Background(), f.victim.ID); j.Recovery.VerifiedResumes != 1 {
		t.Fatalf("verified resumes %d, want 1", j.Recovery.VerifiedResumes)
	}
	if n := countRows(t, f.st, `SELECT count(*) FROM runs WHERE job_id = $1 AND outcome = 'preempted'`, f.victim.ID); n != 1 {
		t.Fatalf("%d preempted runs, want 1", n)
	}
	// Notify's first attempt died after recording the notice, before its
	// signal; the retry kept the notice and sent the one signal.
	if n := len(env.sig.named(temporalx.SignalPreempt)); n != 1 {
		t.Fatalf("%d preempt signals, want 1", n)
	}
}

// errNotFound is the server's answer for a closed or absent workflow.
func errNotFound(workflowID string) error {
	return serviceerror.NewNotFound("workflow " + workflowID + " not found")
}
