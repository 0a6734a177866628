package activities_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"go.temporal.io/sdk/testsuite"

	"github.com/gpugov/gpugov/activities"
	"github.com/gpugov/gpugov/internal/policy"
	"github.com/gpugov/gpugov/internal/scheduling"
	"github.com/gpugov/gpugov/internal/temporalx"
	"github.com/gpugov/gpugov/internal/vocab"
	"github.com/gpugov/gpugov/store"
	"github.com/gpugov/gpugov/store/storetest"
)

// steps stands in for Temporal's view of the runs: the step each job's run
// activity last heartbeated.
type steps struct {
	mu   sync.Mutex
	step map[string]int64
}

func (s *steps) RunStep(_ context.Context, jobID string) (int64, bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	st, ok := s.step[jobID]
	return st, ok, nil
}

// resumedVictim stores a victim preempted at step 50 (its saved checkpoint
// at step 40, older than the notice), released and requeued, then placed
// again with its next run started at startStep; it returns the store, the
// preemption, the victim and the next run.
func resumedVictim(t *testing.T, startStep int64) (*store.Store, string, *store.Job, string) {
	t.Helper()
	ctx := context.Background()
	st := newStore(t, 1, 2)
	govQueues(t, st)
	now := time.Now().UTC().Truncate(time.Millisecond)
	victim, alloc, run := runningJob(t, st, "exp", vocab.TierExperiment, gpuUUID(0), now.Add(-time.Hour))
	if err := st.RecordCheckpoint(ctx, victim.ID, run, scheduling.Checkpoint{At: now.Add(-10 * time.Minute), Step: 40, Location: "s3://40"}); err != nil {
		t.Fatal(err)
	}
	trigger := storetest.Submit(t, st, &store.NewJob{Project: "serving", Queue: "prod", Tier: vocab.TierProduction, RunSeconds: 60,
		Request: scheduling.ResourceRequest{GPUs: 1, Pool: testPool}})
	out, err := st.ApplyCycle(ctx, "c-preempt", &scheduling.Result{Preemptions: []scheduling.PreemptionProposal{{ForJobID: trigger.ID,
		Pool: testPool, Node: testNode, Act: true, Victims: []scheduling.Victim{{JobID: victim.ID, AllocationID: alloc, GPUs: 1}}}}}, now)
	if err != nil || len(out.Preemptions) != 1 {
		t.Fatalf("preemption not opened: %+v %v", out, err)
	}
	id := out.Preemptions[0].PreemptionID
	if _, err := st.NoticePreemption(ctx, id, "preempt/test", now); err != nil {
		t.Fatal(err)
	}
	atNotice := int64(50)
	if _, err := st.RecordPreemptionCheckpoint(ctx, id, &atNotice); err != nil {
		t.Fatal(err)
	}
	if _, err := st.ReleasePreempted(ctx, id, "test release", now.Add(time.Second)); err != nil {
		t.Fatal(err)
	}
	if _, err := st.RequeuePreempted(ctx, id, now.Add(time.Second)); err != nil {
		t.Fatal(err)
	}
	again := storetest.Place(t, st, "c-again", now.Add(2*time.Second), storetest.Placement(victim.ID, testPool, testNode, 1000, gpuUUID(1)))
	next, err := st.MarkRunning(ctx, victim.ID, again.Placed[0].AllocationID, startStep, now.Add(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	return st, id, victim, next
}

// verify runs the VerifyResume activity for preemption id whose victim's
// next run is run, with a 300 ms recompute bound.
func verify(t *testing.T, st *store.Store, progress activities.RunProgressSource, id string, victim *store.Job, run string) *activities.VerifyResumeResult {
	t.Helper()
	var suite testsuite.WorkflowTestSuite
	env := suite.NewTestActivityEnvironment()
	activities.Register(env, activities.Deps{Store: st, Progress: progress, PollInterval: 20 * time.Millisecond,
		Governance: func() *policy.Policy { return policy.Default() }})
	val, err := env.ExecuteActivity("VerifyResume", &activities.VerifyResumeInput{
		PreemptionStep:          activities.PreemptionStep{PreemptionID: id, VictimJobID: victim.ID},
		Resumed:                 &temporalx.ResumedSignal{PreemptionID: id, JobID: victim.ID, RunID: run},
		RecomputeTimeoutSeconds: 0.3})
	if err != nil {
		t.Fatal(err)
	}
	var res activities.VerifyResumeResult
	if err := val.Get(&res); err != nil {
		t.Fatal(err)
	}
	return &res
}

// evidenceOf returns the one resume evidence row of job, failing otherwise.
func evidenceOf(t *testing.T, st *store.Store, job string) store.ResumeEvidence {
	t.Helper()
	evs, err := st.ResumeEvidenceOf(context.Background(), job)
	if err != nil || len(evs) != 1 {
		t.Fatalf("resume evidence of %s: %+v (%v), want one row", job, evs, err)
	}
	return evs[0]
}

// TestVerifyResumeCountsOnlyProgress checks that VerifyResume counts a
// verified resume only when the next run started at the saved step and was
// seen past it: a checkpoint or a heartbeat beyond the saved step verifies
// it (even when the step reached at the notice is not passed within the
// bound); a run that started right but did not progress — it failed, or no
// step past the saved one came within the bound — is a failed resume that
// neither adds a verified resume nor downgrades the job; a wrong start is a
// wrong-step resume. Each is recorded as evidence of the victim's profile.
func TestVerifyResumeCountsOnlyProgress(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	type check struct {
		outcome  vocab.PreemptionOutcome
		evidence vocab.ResumeOutcome
		resumes  int
		failure  string
	}
	cases := []struct {
		name  string
		start int64
		act   func(t *testing.T, st *store.Store, victim *store.Job, run string, hb *steps)
		want  check
	}{
		{"checkpoint past the saved step", 40, func(t *testing.T, st *store.Store, victim *store.Job, run string, _ *steps) {
			if err := st.RecordCheckpoint(ctx, victim.ID, run, scheduling.Checkpoint{At: time.Now(), Step: 45, Location: "s3://45"}); err != nil {
				t.Fatal(err)
			}
		}, check{vocab.PreemptionCompleted, vocab.ResumeVerified, 1, "did not pass step 50"}},
		{"heartbeat past the saved step", 40, func(_ *testing.T, _ *store.Store, victim *store.Job, _ string, hb *steps) {
			hb.step[victim.ID] = 60
		}, check{vocab.PreemptionCompleted, vocab.ResumeVerified, 1, ""}},
		{"heartbeat stuck at the saved step", 40, func(_ *testing.T, _ *store.Store, victim *store.Job, _ string, hb *steps) {
			hb.step[victim.ID] = 40
		}, check{vocab.PreemptionResumeFailed, vocab.ResumeFailed, 0, "no step past 40 within 300ms"}},
		{"failed before progressing", 40, func(t *testing.T, st *store.Store, victim *store.Job, run string, _ *steps) {
			if err := st.FinishRun(ctx, victim.ID, run, vocab.RunFailed, "exit 1", time.Now()); err != nil {
				t.Fatal(err)
			}
		}, check{vocab.PreemptionResumeFailed, vocab.ResumeFailed, 0, "ended failed before progressing past step 40"}},
		{"wrong step", 0, func(*testing.T, *store.Store, *store.Job, string, *steps) {},
			check{vocab.PreemptionResumeFailed, vocab.ResumeWrongStep, 0, "resumed from step 0, but the saved checkpoint is at step 40"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			st, id, victim, run := resumedVictim(t, tc.start)
			hb := &steps{step: map[string]int64{}}
			tc.act(t, st, victim, run, hb)
			res := verify(t, st, hb, id, victim, run)
			if res.Outcome != tc.want.outcome {
				t.Fatalf("outcome %s (%+v), want %s", res.Outcome, res, tc.want.outcome)
			}
			if tc.want.failure != "" && !strings.Contains(strings.Join(res.Failures, "; "), tc.want.failure) {
				t.Errorf("failures %q, want one naming %q", res.Failures, tc.want.failure)
			}
			ev := evidenceOf(t, st, victim.ID)
			if ev.Key != id || ev.Kind != vocab.EvidencePreemption || ev.Outcome != tc.want.evidence || ev.Profile != "vision/simulated" {
				t.Errorf("evidence %+v, want %s of kind preemption for vision/simulated keyed by %s", ev, tc.want.evidence, id)
			}
			j, err := st.GetJob(ctx, victim.ID)
			if err != nil || j.Recovery.VerifiedResumes != tc.want.resumes {
				t.Errorf("the job's verified resumes %d (%v), want %d", j.Recovery.VerifiedResumes, err, tc.want.resumes)
			}
			rec, _ := st.GetPreemption(ctx, id)
			wantVerified := tc.want.evidence == vocab.ResumeVerified
			if rec.ResumeVerified == nil || *rec.ResumeVerified != wantVerified {
				t.Errorf("record's resume_verified %v, want %v", rec.ResumeVerified, wantVerified)
			}
			v, _ := st.GetPreemptionVictim(ctx, id)
			if v.ResumeDowngraded != (tc.want.evidence == vocab.ResumeWrongStep) {
				t.Errorf("downgraded %v, want it only after a wrong-step resume", v.ResumeDowngraded)
			}
		})
	}
}

// TestFinishRunRecordsCrashResume checks the evidence a run's resume after
// a crash gives its job's recovery profile: progress past the checkpoint is
// verified, a job reporting another start step is wrong_step, a failure at
// the checkpoint is failed, and a run stopped on request before it
// progressed gives none; a retried FinishRun stores nothing twice.
func TestFinishRunRecordsCrashResume(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := newStore(t, 1, 4)
	jobs := &activities.Jobs{Store: st}
	forty := int64(40)
	zero := int64(0)
	cases := []struct {
		outcome vocab.RunOutcome
		resume  activities.CrashResume
		want    vocab.ResumeOutcome // "": no evidence
	}{
		{vocab.RunSucceeded, activities.CrashResume{FromStep: 40, Step: 90, ReportedStartStep: &forty}, vocab.ResumeVerified},
		{vocab.RunFailed, activities.CrashResume{FromStep: 40, Step: 60, ReportedStartStep: &zero}, vocab.ResumeWrongStep},
		{vocab.RunFailed, activities.CrashResume{FromStep: 40, Step: 40}, vocab.ResumeFailed},
		{vocab.RunCancelled, activities.CrashResume{FromStep: 40, Step: 40}, ""},
	}
	for i, tc := range cases {
		j, _, run := runningJob(t, st, "train", vocab.TierStandard, gpuUUID(i), time.Now().Add(-time.Hour))
		for range 2 {
			if _, err := jobs.FinishRun(ctx, &activities.FinishRunInput{JobID: j.ID, RunID: run, Outcome: tc.outcome,
				CrashResume: &tc.resume}); err != nil {
				t.Fatal(err)
			}
		}
		evs, err := st.ResumeEvidenceOf(ctx, j.ID)
		switch {
		case err != nil:
			t.Fatal(err)
		case tc.want == "" && len(evs) != 0:
			t.Errorf("case %d: evidence %+v, want none", i, evs)
		case tc.want != "" && (len(evs) != 1 || evs[0].Outcome != tc.want || evs[0].Kind != vocab.EvidenceCrash || evs[0].Key != "crash/"+run):
			t.Errorf("case %d: evidence %+v, want one %s crash resume", i, evs, tc.want)
		}
	}
}

// TestVerifyResumeInterruptedGivesNoEvidence: a next run that started at
// the saved step and was cancelled (its owner, a reclaim) before it was
// seen past it is no failed resume: the preemption completes with the
// resume unverified, and the profile gets no evidence either way (as a
// crash resume stopped on request gives none).
func TestVerifyResumeInterruptedGivesNoEvidence(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, id, victim, run := resumedVictim(t, 40)
	if err := st.FinishRun(ctx, victim.ID, run, vocab.RunCancelled, "cancelled by its owner", time.Now()); err != nil {
		t.Fatal(err)
	}
	res := verify(t, st, &steps{step: map[string]int64{}}, id, victim, run)
	if res.Outcome != vocab.PreemptionCompleted || len(res.Failures) != 0 {
		t.Fatalf("outcome %s, failures %q: want completed with no failure", res.Outcome, res.Failures)
	}
	if evs, err := st.ResumeEvidenceOf(ctx, victim.ID); err != nil || len(evs) != 0 {
		t.Fatalf("resume evidence %+v (%v), want none", evs, err)
	}
	rec, _ := st.GetPreemption(ctx, id)
	if rec.ResumeVerified != nil {
		t.Errorf("record's resume_verified %v, want null (not observed)", *rec.ResumeVerified)
	}
	if !strings.Contains(rec.Detail, "ended cancelled before progressing past step 40") {
		t.Errorf("record's detail %q, want it to name the cancel", rec.Detail)
	}
	if j, err := st.GetJob(ctx, victim.ID); err != nil || j.Recovery.VerifiedResumes != 0 {
		t.Errorf("the job's verified resumes %d (%v), want 0", j.Recovery.VerifiedResumes, err)
	}
}
