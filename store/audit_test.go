package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/gpugov/gpugov/internal/governance"
	"github.com/gpugov/gpugov/internal/scheduling"
	"github.com/gpugov/gpugov/internal/vocab"
	"github.com/gpugov/gpugov/store"
	"github.com/gpugov/gpugov/store/storetest"
)

// TestGovernanceActionsAudited runs each governance action the store
// carries out — policy activation, quota change, stage change, hold and its
// release, amendment, completion, preemption (proposal and every workflow
// step), reclaim (open, close) — and checks that each left an audit entry
// with who (actor), why (reason) and its evidence keys (docs/design.md
// invariant 6, the action list of §3 "The audit").
func TestGovernanceActionsAudited(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, _ := quotaStore(t) // activate_policy by serve
	if _, err := s.SetQuota(ctx, store.QuotaChange{Pool: "p", Project: "vision", NominalMilli: 3000, Actor: "admin",
		Reason: "vision's launch"}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.SetPoolStages(ctx, map[string]vocab.AutomationStage{"p": vocab.StageTrial}, "admin", "trial after the review"); err != nil {
		t.Fatal(err)
	}
	held := submit(t, s, "vision", "p", 1, 1000)
	if _, err := s.SetHold(ctx, held.ID, true, "vision", "waiting for data"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.SetHold(ctx, held.ID, false, "vision", "data staged"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.AmendJob(ctx, held.ID, scheduling.ResourceRequest{Pool: "p", GPUs: 2}, "vision", "two GPUs fit"); err != nil {
		t.Fatal(err)
	}
	done, _, _ := runningOn(t, s, 0, 0)
	if _, _, err := s.CompleteJob(ctx, done.ID, "vision", "weights exported", t0.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}

	// A preemption, step by step as its workflow records it.
	victim, alloc, run := runningOn(t, s, 1, 0)
	trigger := submit(t, s, "serving", "p", 1, 1000)
	out, err := s.ApplyCycle(ctx, "c-preempt", &scheduling.Result{At: t0.Add(time.Hour), Preemptions: []scheduling.PreemptionProposal{{
		ForJobID: trigger.ID, Pool: "p", Node: storetest.NodeName("p", 0), Act: true, Reason: "production needs it",
		Victims: []scheduling.Victim{{JobID: victim.ID, AllocationID: alloc, GPUs: 1, EstimatedLossGPUSeconds: 30}}}}}, t0.Add(time.Hour))
	if err != nil || len(out.Preemptions) != 1 {
		t.Fatalf("preemption: %+v %v", out, err)
	}
	pid := out.Preemptions[0].PreemptionID
	if _, err := s.NoticePreemption(ctx, pid, "preempt/"+victim.ID+"/"+run, t0.Add(61*time.Minute)); err != nil {
		t.Fatal(err)
	}
	step := int64(40)
	if _, err := s.RecordPreemptionCheckpoint(ctx, pid, &step); err != nil {
		t.Fatal(err)
	}
	if _, err := s.ReleasePreempted(ctx, pid, "preempted for "+trigger.ID, t0.Add(62*time.Minute)); err != nil {
		t.Fatal(err)
	}
	if _, err := s.RequeuePreempted(ctx, pid, t0.Add(62*time.Minute)); err != nil {
		t.Fatal(err)
	}
	from, yes, recompute := int64(40), true, 12.0
	resumedAt := t0.Add(70 * time.Minute)
	if _, err := s.FinishPreemption(ctx, pid, store.PreemptionResume{Outcome: vocab.PreemptionCompleted, ResumedRunID: "r-next",
		ResumedFromStep: &from, ResumedAt: &resumedAt, ResumedCorrectly: &yes, LostSeconds: 20, SaveRestoreS: 5,
		RecomputeS: &recompute, LossGPUSeconds: 37, Detail: "resumed at step 40", At: t0.Add(75 * time.Minute)}); err != nil {
		t.Fatal(err)
	}

	// A report-mode reclaim, recorded and closed.
	idle, idleAlloc, idleRun := runningOn(t, s, 2, 0)
	r, _, err := s.OpenReclaim(ctx, store.NewReclaim{
		Evidence: governance.Evidence{AllocationID: idleAlloc, JobID: idle.ID, Project: "vision", Queue: "train", Pool: "p",
			GPUs: 1, RunID: idleRun, JobState: vocab.JobRunning, GrantedAt: t0},
		Finding: governance.Finding{Class: vocab.ClassIdle, Basis: "averaged 1% for 30 min", NotifyAtMost: "1 burst(s)",
			GPUs: []governance.GPUWindow{{GPUUUID: storetest.GPUName("p", 0, 2), Samples: 60, MeanPercent: 2.5, PeakPercent: 90, Bursts: 1}}},
		Decision: governance.ModeDecision{Mode: vocab.ModeReport, Configured: vocab.ModeNotify, Stage: vocab.StageTrial,
			Why: "trial stage: recorded only"},
		At: t0.Add(2 * time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.SetReclaimState(ctx, r.ID, vocab.ReclaimReported, "report mode: recorded only", t0.Add(2*time.Hour)); err != nil {
		t.Fatal(err)
	}

	entries, _, err := s.ListAudit(ctx, store.AuditFilter{Limit: store.MaxListLimit})
	if err != nil {
		t.Fatal(err)
	}
	byAction := map[string][]store.AuditEntry{}
	for _, e := range entries {
		byAction[e.Action] = append(byAction[e.Action], e)
		if !vocab.ValidAuditAction(e.Action) {
			t.Errorf("action %q is not in vocab.AuditActions (GET /v1/audit?action= would refuse it)", e.Action)
		}
	}
	for action, keys := range map[string][]string{
		store.AuditActivatePolicy: {"previous"},
		store.AuditSetQuota:       {"pool", "project", "before", "after", "policy"},
		"set_pool_stage":          {"from", "to"},
		"hold":                    {"state"},
		"release_hold":            {"state"},
		store.AuditAmendResources: {"state", "before", "after"},
		store.AuditCompleteJob:    {"allocation_id", "run_id", "state", "gpus"},
		"preempt":                 {"proposal", "allocation_id"},
		"preempt_notice":          {"workflow_step", "victim_job_id", "for_job_id", "allocation_id", "run_id", "gpus", "estimated_loss_gpu_s"},
		"preempt_release":         {"victim_job_id", "released_at", "checkpoint_in_grace", "step_at_notice"},
		"preempt_requeue":         {"victim_job_id", "released_at"},
		"preempt_finish":          {"outcome", "resumed_run_id", "resumed_from_step", "resumed_correctly", "lost_s", "save_restore_s", "recompute_s", "effective_loss_gpu_s"},
		store.AuditReclaimOpen:    {"reclaim_id", "allocation_id", "class", "mode", "configured_mode", "stage", "mode_reason", "gpu_windows", "notify_at_most"},
		store.AuditReclaimClose:   {"reclaim_id", "allocation_id", "class", "mode", "state"},
		"submit":                  {},
	} {
		es := byAction[action]
		if len(es) == 0 {
			t.Errorf("no %s entry", action)
			continue
		}
		e := es[0]
		if e.Actor == "" || e.Reason == "" || e.Subject == "" {
			t.Errorf("%s: who %q, why %q, subject %q", action, e.Actor, e.Reason, e.Subject)
		}
		for _, k := range keys {
			if _, ok := e.Evidence[k]; !ok {
				t.Errorf("%s: evidence %v lacks %q", action, e.Evidence, k)
			}
		}
	}
	if n := len(byAction["preempt_notice"]); n != 1 {
		t.Errorf("%d preempt_notice entries, want 1", n)
	}
	if fin := byAction["preempt_finish"][0]; fin.Evidence["outcome"] != "completed" || fin.Evidence["effective_loss_gpu_s"] != 37.0 {
		t.Errorf("preempt_finish evidence %v", fin.Evidence)
	}
}
