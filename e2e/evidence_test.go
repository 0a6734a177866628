package e2e

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpugov/gpugov/api"
	apiclient "github.com/gpugov/gpugov/api/client"
	"github.com/gpugov/gpugov/internal/policy"
	"github.com/gpugov/gpugov/internal/vocab"
	"github.com/gpugov/gpugov/store"
)

// evidPool is one node with four A100s, in the automate stage.
var evidPool = a100Pool("evid", "evid-1", "evid", vocab.StageAutomate, 4)

// evidencePolicy is the default policy — its preemption requirement
// included: a victim's recovery profile needs a verified resume and at most
// 20 % failed resumes in the last 30 days — with the default queues, pool
// evid in automate, and a young run eligible (no minimum run time) with a
// short grace period, so the test need not wait ten minutes.
func evidencePolicy() *policy.Policy {
	p := policy.Default()
	p.FairShare = policy.FairShare{}
	p.Preemption.MinRuntimeSeconds = 0
	p.Preemption.GraceSeconds = 5
	p.Preemption.VerifyResumeTimeoutSeconds = 10
	p.Preemption.RecomputeTimeoutSeconds = 10
	p.Queues = policy.DefaultQueues()
	p.Pools = map[string]policy.Pool{"evid": {Stage: vocab.StageAutomate}}
	return p
}

// submitEvid submits a simulated job of project vision to pool evid in
// queue, checkpointable with recovery profile profile when profile is set.
func submitEvid(t *testing.T, e *env, queue, profile string, gpus int) *api.Job {
	t.Helper()
	spec := &api.JobSpec{Project: "vision", Queue: queue, RunSeconds: 3600, Resources: api.ResourceSpec{GPUs: gpus, Pool: "evid"}}
	if profile != "" {
		spec.Recovery = api.RecoverySpec{Checkpointable: true, CheckpointIntervalSeconds: 1, Profile: profile}
	}
	job, status, err := e.client.Submit(context.Background(), spec, "")
	if err != nil || status != http.StatusCreated {
		t.Fatalf("submit: status %d, %v", status, err)
	}
	return job
}

// TestPreemptionNeedsProfileEvidence runs the live service under the
// default policy's verified-resume requirement. Two fresh checkpointable
// experiment jobs, neither ever resumed, fill the pool: one of recovery
// profile vision/trained, which an earlier job of that profile earned a
// verified resume for, and one of vision/untried, which has no evidence. A
// production job that needs two GPUs preempts the first (it inherits its
// profile's record) and not the second; a second production job then waits
// and the untried job is never preempted. The preemption's record lists the
// untried job among its candidates with the gate that spared it.
func TestPreemptionNeedsProfileEvidence(t *testing.T) {
	e := startEnv(t, envOptions{pools: evidPool, simSpeed: 1, policy: evidencePolicy()})
	ctx := context.Background()
	st := e.svc.Store()

	// An earlier job of profile vision/trained resumed correctly after a
	// preemption an hour ago: the profile's evidence.
	earlier := submitEvid(t, e, "experiment", "trained", 1)
	if _, err := e.client.Cancel(ctx, earlier.ID, "its work was done elsewhere"); err != nil {
		t.Fatal(err)
	}
	if err := st.RecordResumeEvidence(ctx, store.ResumeEvidence{Key: "seed/" + earlier.ID, JobID: earlier.ID,
		Kind: vocab.EvidencePreemption, Outcome: vocab.ResumeVerified, At: time.Now().Add(-time.Hour),
		Detail: "resumed at the saved step and progressed past it"}); err != nil {
		t.Fatal(err)
	}
	if rec, err := st.ProfileEvidence(ctx, "vision/trained", 30*24*time.Hour, time.Now()); err != nil || rec.Verified != 1 {
		t.Fatalf("profile record %+v (%v), want one verified resume", rec, err)
	}

	trained := submitEvid(t, e, "experiment", "trained", 2)
	untried := submitEvid(t, e, "experiment", "untried", 2)
	for _, j := range []*api.Job{trained, untried} {
		if j.Recovery.VerifiedResumes != 0 {
			t.Fatalf("job %s starts with %d verified resumes of its own, want 0", j.ID, j.Recovery.VerifiedResumes)
		}
		id := j.ID
		waitFor(t, 30*time.Second, "job "+id+" running with a checkpoint", func() (bool, string) {
			got, err := e.client.GetJob(ctx, id)
			if err != nil {
				return false, err.Error()
			}
			return got.State == vocab.JobRunning && got.Recovery.LastCheckpoint != nil, string(got.State)
		})
	}

	prod := submitEvid(t, e, "production", "", 2)
	waitFor(t, 60*time.Second, "the production job placed", func() (bool, string) {
		n := e.queryInt(t, `SELECT count(*) FROM allocations WHERE job_id = $1 AND released_at IS NULL`, prod.ID)
		return n == 1, fmt.Sprintf("%d allocations", n)
	})
	ps, err := e.client.Preemptions(ctx, apiclient.PreemptionOptions{Job: prod.ID})
	if err != nil {
		t.Fatal(err)
	}
	var rec *api.Preemption
	for i := range ps.Preemptions {
		if ps.Preemptions[i].State != string(vocab.PreemptionObserved) {
			if rec != nil {
				t.Fatalf("more than one preemption for %s: %+v", prod.ID, ps.Preemptions)
			}
			rec = &ps.Preemptions[i]
		}
	}
	if rec == nil || rec.VictimJobID != trained.ID {
		t.Fatalf("preemptions for the production job %+v, want one of %s (profile with evidence)", ps.Preemptions, trained.ID)
	}
	full, err := e.client.Preemption(ctx, rec.ID)
	if err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(full.Candidates, func(c api.PreemptionCandidate) bool { return c.JobID == untried.ID })
	if i < 0 || full.Candidates[i].Chosen || !strings.Contains(full.Candidates[i].Gate, "recovery profile vision/untried has 0 verified resumes") {
		t.Errorf("candidates %+v, want %s listed with the evidence gate", full.Candidates, untried.ID)
	}
	t.Logf("preemption %s: victim %s (profile vision/trained); candidates %+v", rec.ID, rec.VictimJobID, full.Candidates)

	// A second production job finds only the untried job to stop: it waits,
	// and the untried job keeps running.
	prod2 := submitEvid(t, e, "production", "", 2)
	waitReason(t, e, prod2.ID, vocab.ReasonCapacityBusy, 5)
	if n := e.queryInt(t, `SELECT count(*) FROM preemptions WHERE victim_job_id = $1`, untried.ID); n != 0 {
		t.Errorf("the job of a profile without evidence has %d preemption records, want none", n)
	}
	got, err := e.client.GetJob(ctx, untried.ID)
	if err != nil || got.State != vocab.JobRunning {
		t.Fatalf("untried job %+v (%v), want it still running", got, err)
	}
	w, _ := e.client.GetJob(ctx, prod2.ID)
	t.Logf("second production job waits: %s: %s", w.Wait.Reason, w.Wait.Detail)
}
