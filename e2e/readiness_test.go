package e2e

import (
	"context"
	"encoding/json"
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

// rehearsePool is one node of four A100s, imported in the observe stage;
// the policy gives it its first stage, trial, at start.
var rehearsePool = a100Pool("rehearse", "rehearse-1", "rh", vocab.StageObserve, 4)

// rehearsePolicyYAML is the tests' policy file: every queue's protection
// explicit, pool rehearse in the trial stage, preemptions that wait for a
// checkpoint (10 s grace) and bound the verify-resume waits, and a
// five-minute readiness window (the test's history is minutes long).
const rehearsePolicyYAML = `version: gpugov.policy/v1
queues:
  - {name: production, tier: production, share: 4, max_wait_s: 60, protected: true}
  - {name: key-project, tier: key-project, share: 3, max_wait_s: 600, protected: false}
  - {name: standard, tier: standard, share: 2, max_wait_s: 3600, low_risk: false}
  - {name: experiment, tier: experiment, share: 1, max_wait_s: 21600, low_risk: true}
pools:
  rehearse: {stage: %s}
preemption:
  grace_s: 10
  verify_resume_timeout_s: 60
  recompute_timeout_s: 30
automation:
  readiness: {window_s: 300}
`

// rehearsePolicy is rehearsePolicyYAML with pool rehearse in stage.
func rehearsePolicy(stage vocab.AutomationStage) string {
	return fmt.Sprintf(rehearsePolicyYAML, stage)
}

// logJSON logs v as indented JSON under title (the record the note quotes).
func logJSON(t *testing.T, title string, v any) {
	t.Helper()
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s:\n%s", title, b)
}

// TestDrillEarnsEvidenceAndReadinessGatesAutomate: on the dev server, a
// pool in trial whose only checkpointable job's profile has no evidence is
// not ready — readiness fails save_restore_proven alone — and a policy
// applied through the API that widens it to automate is refused with 422
// naming that check; an operator's drill of the running job runs the whole
// preemption workflow with no beneficiary, is recorded as a drill with its
// effective run loss, and gives the job's profile a verified resume (kind
// drill); readiness then passes, and the same policy widens the pool to
// automate, in its stage history. Before the drill an admin's override
// widens it despite the failed check and a narrowing puts it back in
// trial. After it, bogus checkpoint reports through the agent's route are
// refused and change nothing (checkBogusCheckpoints), and the audit lists
// each action of the run with who, why and the evidence, through the API
// and the CLI (checkLiveAudit).
func TestDrillEarnsEvidenceAndReadinessGatesAutomate(t *testing.T) {
	p, err := policy.Parse("policy.yaml", []byte(rehearsePolicy(vocab.StageTrial)))
	if err != nil {
		t.Fatal(err)
	}
	since := time.Now()
	cli := startCLIBuild(t)
	e := startEnv(t, envOptions{pools: rehearsePool, simSpeed: 1, policy: p})
	ctx := context.Background()
	spec := &api.JobSpec{Project: "vision", Queue: "experiment", RunSeconds: 3600,
		Recovery:  api.RecoverySpec{Checkpointable: true, CheckpointIntervalSeconds: 1},
		Resources: api.ResourceSpec{GPUs: 1, Pool: "rehearse"}}
	job, status, err := e.client.Submit(ctx, spec, "")
	if err != nil || status != http.StatusCreated {
		t.Fatalf("submit: %d %v", status, err)
	}
	waitFor(t, 30*time.Second, "the job running with a checkpoint", func() (bool, string) {
		n := e.queryInt(t, `SELECT count(*) FROM runs WHERE job_id = $1 AND ended_at IS NULL AND last_checkpoint IS NOT NULL`, job.ID)
		return n == 1, fmt.Sprintf("%d running runs with a checkpoint", n)
	})

	before, err := e.client.PoolReadiness(ctx, "rehearse", 0)
	if err != nil {
		t.Fatal(err)
	}
	logJSON(t, "readiness of pool rehearse before the evidence", before)
	if before.Ready || before.Stage != vocab.StageTrial || !slices.Equal(before.Failed, []vocab.ReadinessCheck{vocab.ReadinessSaveRestore}) {
		t.Fatalf("readiness before the drill: %s", before.Readiness.Summary())
	}
	if len(before.History) != 1 || before.History[0].Outcome != vocab.StageChangeInitial || before.History[0].To != vocab.StageTrial {
		t.Fatalf("history at start %+v, want the initial trial stage", before.History)
	}

	// The widening is refused, naming the failed check; nothing changes.
	_, err = e.client.ApplyPolicyWith(ctx, api.PolicyApply{Policy: rehearsePolicy(vocab.StageAutomate), Reason: "automate rehearse"})
	ae, ok := apiclient.AsError(err)
	if !ok || ae.Status != http.StatusUnprocessableEntity || ae.Body.Code != api.CodeNotReady || len(ae.Body.Details) != 1 ||
		!strings.Contains(ae.Body.Details[0].Message, "readiness check save_restore_proven failed") {
		t.Fatalf("apply automate without evidence: %v", err)
	}
	t.Logf("POST /v1/policies (automate) refused: %d %s: %s", ae.Status, ae.Body.Code, ae.Body.Message)

	// An admin's override widens it anyway (audited with the failed
	// checks); the pool is then put back in trial for the drill.
	overridden, err := e.client.ApplyPolicyWith(ctx, api.PolicyApply{Policy: rehearsePolicy(vocab.StageAutomate),
		Reason: "override: automate rehearse before its drill", OverrideReadiness: true})
	if err != nil || len(overridden.Stages) != 1 || overridden.Stages[0].Outcome != vocab.StageChangeOverridden {
		t.Fatalf("apply automate with override_readiness: %+v %v", overridden, err)
	}
	back, err := e.client.ApplyPolicyWith(ctx, api.PolicyApply{Policy: rehearsePolicy(vocab.StageTrial), Reason: "back to trial for the drill"})
	if err != nil || len(back.Stages) != 1 || back.Stages[0].Outcome != vocab.StageChangeApplied || back.Stages[0].To != vocab.StageTrial {
		t.Fatalf("apply trial: %+v %v", back, err)
	}

	// A drill: the whole preemption workflow, no beneficiary.
	started, status, err := e.client.Drill(ctx, job.ID, "earn the first verified resume of vision/simulated")
	if err != nil || status != http.StatusCreated || started.Drill.Kind != "drill" || started.Drill.ForJobID != "" {
		t.Fatalf("drill: %d %+v %v", status, started, err)
	}
	id := started.Drill.ID
	var rec *api.Preemption
	waitFor(t, 90*time.Second, "the drill finished", func() (bool, string) {
		rec, err = e.client.Preemption(ctx, id)
		if err != nil {
			return false, err.Error()
		}
		return rec.FinishedAt != nil, fmt.Sprintf("state %s outcome %q detail %q", rec.State, rec.Outcome, rec.Detail)
	})
	logJSON(t, "the drill's record (GET /v1/preemptions/"+id+")", rec)
	if rec.Outcome != string(vocab.PreemptionCompleted) || rec.ResumedCorrectly == nil || !*rec.ResumedCorrectly || rec.PassedAt == nil ||
		rec.EffectiveLossGPUSeconds == nil || rec.NotifiedAt == nil || rec.ReleasedAt == nil || rec.RescheduledAt == nil ||
		rec.WorkflowID == "" || rec.DrillActor != "e2e-admin" {
		t.Fatalf("drill record %+v", rec)
	}
	// VerifyResume records the evidence right after the record.
	var evidence []store.ResumeEvidence
	waitFor(t, 10*time.Second, "the drill's evidence", func() (bool, string) {
		evidence, err = e.svc.Store().ResumeEvidenceOf(ctx, job.ID)
		return err == nil && len(evidence) > 0, fmt.Sprint(err)
	})
	if len(evidence) != 1 || evidence[0].Kind != vocab.EvidenceDrill || evidence[0].Outcome != vocab.ResumeVerified ||
		evidence[0].Key != id || evidence[0].Profile != "vision/simulated" {
		t.Fatalf("evidence %+v, %v", evidence, err)
	}
	logJSON(t, "the profile's evidence", evidence)
	// The workflow's steps, in order, from Temporal's history.
	steps := historyActivities(t, &agentStack{env: e}, rec.WorkflowID)
	if want := []string{"Notify", "Checkpoint", "Release", "Reschedule", "VerifyResume"}; !slices.Equal(steps, want) {
		t.Errorf("drill workflow activities %v, want %v", steps, want)
	}

	var after *api.PoolReadiness
	waitFor(t, 30*time.Second, "readiness passes", func() (bool, string) {
		after, err = e.client.PoolReadiness(ctx, "rehearse", 0)
		if err != nil {
			return false, err.Error()
		}
		return after.Ready, after.Readiness.Summary()
	})
	logJSON(t, "readiness of pool rehearse after the evidence", after)
	applied, err := e.client.ApplyPolicyWith(ctx, api.PolicyApply{Policy: rehearsePolicy(vocab.StageAutomate), Reason: "automate rehearse: drilled"})
	if err != nil || len(applied.Stages) != 1 || applied.Stages[0].Outcome != vocab.StageChangeApplied {
		t.Fatalf("apply automate with evidence: %+v %v", applied, err)
	}
	final, err := e.client.PoolReadiness(ctx, "rehearse", 0)
	if err != nil || final.Stage != vocab.StageAutomate || len(final.History) != 4 || final.History[0].Outcome != vocab.StageChangeApplied ||
		final.History[0].Actor != "e2e-admin" || final.History[0].Ready == nil || !*final.History[0].Ready ||
		final.History[1].To != vocab.StageTrial || final.History[2].Outcome != vocab.StageChangeOverridden {
		t.Fatalf("stage after the apply: %+v %v", final, err)
	}
	if n := e.queryInt(t, `SELECT count(*) FROM audit_log WHERE subject = $1 AND action = 'drill'`, job.ID); n != 1 {
		t.Errorf("%d drill audit entries", n)
	}

	// Bogus checkpoint reports change nothing; the audit lists the run.
	checkBogusCheckpoints(t, e, job, rec.RunID)
	checkLiveAudit(t, e, since, job, rec, cli())
}

// TestAutomaticDrillInTrialPool: with drills.auto_in_trial, the governance
// loop drills a running job of a low-risk queue in a trial pool whose
// profile has no evidence, while matching GPUs are free — started by
// governance, its resume verified and recorded — and, the daily bound of
// one drill per profile reached, drills it no more.
func TestAutomaticDrillInTrialPool(t *testing.T) {
	p, err := policy.Parse("policy.yaml", []byte(rehearsePolicy(vocab.StageTrial)+"drills: {auto_in_trial: true, per_profile_per_day: 1}\n"))
	if err != nil {
		t.Fatal(err)
	}
	e := startEnv(t, envOptions{pools: rehearsePool, simSpeed: 1, policy: p, drillInterval: time.Second})
	ctx := context.Background()
	spec := &api.JobSpec{Project: "nlp", Queue: "experiment", RunSeconds: 3600,
		Recovery:  api.RecoverySpec{Checkpointable: true, CheckpointIntervalSeconds: 1},
		Resources: api.ResourceSpec{GPUs: 1, Pool: "rehearse"}}
	job, status, err := e.client.Submit(ctx, spec, "")
	if err != nil || status != http.StatusCreated {
		t.Fatalf("submit: %d %v", status, err)
	}
	var drills *api.PreemptionList
	waitFor(t, 90*time.Second, "an automatic drill finished", func() (bool, string) {
		drills, err = e.client.Preemptions(ctx, apiclient.PreemptionOptions{Kind: "drill", Job: job.ID})
		if err != nil || len(drills.Preemptions) == 0 {
			return false, fmt.Sprint(err)
		}
		d := drills.Preemptions[0]
		return d.FinishedAt != nil, fmt.Sprintf("state %s outcome %q", d.State, d.Outcome)
	})
	d := drills.Preemptions[0]
	if d.DrillActor != "governance" || d.Outcome != string(vocab.PreemptionCompleted) || !strings.Contains(d.Reason, "automatic drill in trial pool rehearse") ||
		!strings.Contains(d.Reason, "profile nlp/simulated has 0 verified resumes, needs 1") {
		t.Fatalf("automatic drill %+v", d)
	}
	t.Logf("automatic drill %s: %s; loss %s GPU-s", d.ID, d.Reason, fmt.Sprint(*d.EffectiveLossGPUSeconds))
	waitFor(t, 10*time.Second, "the drill's evidence", func() (bool, string) {
		ev, err := e.svc.Store().ResumeEvidenceOf(ctx, job.ID)
		return err == nil && len(ev) == 1 && ev[0].Kind == vocab.EvidenceDrill && ev[0].Outcome == vocab.ResumeVerified, fmt.Sprint(ev, err)
	})
	time.Sleep(3 * time.Second) // three more passes
	if n := e.queryInt(t, `SELECT count(*) FROM preemptions WHERE kind = 'drill' AND victim_job_id = $1`, job.ID); n != 1 {
		t.Fatalf("%d drills of the job, want 1 (one per profile a day, and the profile is proven)", n)
	}
}
