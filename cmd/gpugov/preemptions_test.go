package main

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpugov/gpugov/api"
	"github.com/gpugov/gpugov/internal/accounting"
	"github.com/gpugov/gpugov/internal/scheduling"
	"github.com/gpugov/gpugov/internal/vocab"
	"github.com/gpugov/gpugov/store"
	"github.com/gpugov/gpugov/store/storetest"
)

// Pool, node and queues of the governance CLI tests.
const (
	govPool  = "a100-east"
	govNode  = "node-1"
	govQueue = "train" // standard tier (newGovCLIEnv adds "serve", production)
)

// decidingWorkflows stands in for Temporal behind the API, as
// startedWorkflows does, and records the reclaim decisions it is sent.
type decidingWorkflows struct {
	startedWorkflows
	mu        sync.Mutex
	decisions []string // "signal allocation actor: reason"
}

func (w *decidingWorkflows) DecideReclaim(_ context.Context, allocationID, signal, actor, reason string) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.decisions = append(w.decisions, signal+" "+allocationID+" "+actor+": "+reason)
	return nil
}

// govCLIEnv is the real API on a fresh database with pool a100-east (one
// node of four A100s), queues train (standard) and serve (production), and
// cliToken held by who.
type govCLIEnv struct {
	*cliEnv
	wf *decidingWorkflows
}

func newGovCLIEnv(t *testing.T, who api.Principal) *govCLIEnv {
	t.Helper()
	node := scheduling.Node{Name: govNode, CPUMilli: 64000, MemoryMiB: 512 * 1024, Schedulable: true}
	for _, u := range []string{"GPU-0", "GPU-1", "GPU-2", "GPU-3"} {
		node.GPUs = append(node.GPUs, scheduling.GPU{UUID: u, Model: "A100-SXM4-80GB", MemoryMiB: 81920, Healthy: true})
	}
	st, _ := storetest.NewStore(t, storetest.Fixture{
		Pools: []scheduling.Pool{{Name: govPool, Available: true, Stage: vocab.StageAutomate, Nodes: []scheduling.Node{node}}},
		Queues: []scheduling.Queue{{Name: govQueue, Tier: vocab.TierStandard, ServiceShare: 1},
			{Name: "serve", Tier: vocab.TierProduction, ServiceShare: 1}},
	})
	wf := &decidingWorkflows{}
	return &govCLIEnv{cliEnv: serveCLIEnv(t, st, wf, map[string]api.Principal{cliToken: who}), wf: wf}
}

// placeAndRun stores a placement of job on gpus at `at` and starts its run
// there from startStep; it returns the allocation and the run.
func placeAndRun(t *testing.T, st *store.Store, jobID string, gpus []string, startStep int64, at time.Time) (string, string) {
	t.Helper()
	out := storetest.Place(t, st, "place-"+jobID+"-"+gpus[0], at, storetest.Placement(jobID, govPool, govNode, 1000, gpus...))
	run, err := st.MarkRunning(context.Background(), jobID, out.Placed[0].AllocationID, startStep, at)
	if err != nil {
		t.Fatal(err)
	}
	return out.Placed[0].AllocationID, run
}

// completedPreemption stores, step by step as a PreemptionWorkflow records
// it, the preemption of a two-GPU checkpointable training job for a
// production job: the victim's last checkpoint (step 400) is 20 minutes
// older than the notice, no newer one comes within the grace period (the
// policy releases anyway), and its next run resumes at step 400 and is back
// at step 520, the step reached at the notice, 18 minutes later. The loss
// is the formula's: 2 GPUs × (1200 s lost + 1080 s recomputed) = 4560 GPU-s.
func completedPreemption(t *testing.T, st *store.Store) *store.PreemptionRecord {
	t.Helper()
	ctx := context.Background()
	now := time.Now().UTC().Truncate(time.Second)
	mk := func(project, queue string, tier vocab.Tier, gpus int, recovery scheduling.RecoveryEvidence) *store.Job {
		j, _, err := st.CreateJob(ctx, &store.NewJob{Project: project, Queue: queue, Tier: tier, RunSeconds: 36000,
			Request: scheduling.ResourceRequest{GPUs: gpus, Pool: govPool}, Recovery: recovery})
		if err != nil {
			t.Fatal(err)
		}
		return j
	}
	victim := mk("vision", govQueue, vocab.TierStandard, 2, scheduling.RecoveryEvidence{Checkpointable: true, CheckpointIntervalSeconds: 1800})
	trigger := mk("serving", "serve", vocab.TierProduction, 4, scheduling.RecoveryEvidence{})
	started, notified := now.Add(-3*time.Hour), now.Add(-40*time.Minute)
	alloc, run := placeAndRun(t, st, victim.ID, []string{"GPU-0", "GPU-1"}, 0, started)
	if err := st.RecordCheckpoint(ctx, victim.ID, run, scheduling.Checkpoint{At: notified.Add(-20 * time.Minute), Step: 400,
		Location: "s3://ckpt/step-400"}); err != nil {
		t.Fatal(err)
	}
	out, err := st.ApplyCycle(ctx, "c-preempt", &scheduling.Result{PolicyVersion: "t", At: notified, Preemptions: []scheduling.PreemptionProposal{{
		ForJobID: trigger.ID, Pool: govPool, Node: govNode, Act: true, EstimatedLossGPUSeconds: 7320,
		Reason:  trigger.ID + " (production) needs 4 GPU(s); stopping 1 eligible job(s) on node node-1 frees 2 GPU(s) next to 2 free",
		Victims: []scheduling.Victim{{JobID: victim.ID, AllocationID: alloc, GPUs: 2, EstimatedLossGPUSeconds: 7320}},
		Candidates: []scheduling.Candidate{{JobID: victim.ID, Queue: govQueue, GPUs: 2, EstimatedLossGPUSeconds: 7320, Chosen: true},
			{JobID: "j-inference", Queue: "serve", GPUs: 2, EstimatedLossGPUSeconds: 120, Gate: "protected queue"}}}}}, notified)
	if err != nil || len(out.Preemptions) != 1 {
		t.Fatalf("preemption not opened: %+v %v", out, err)
	}
	id := out.Preemptions[0].PreemptionID
	if _, err := st.NoticePreemption(ctx, id, "preempt/"+victim.ID+"/"+run, notified); err != nil {
		t.Fatal(err)
	}
	reached := int64(520)
	if _, err := st.RecordPreemptionCheckpoint(ctx, id, &reached); err != nil {
		t.Fatal(err)
	}
	if _, err := st.ReleasePreempted(ctx, id, "preempted for "+trigger.ID, notified.Add(2*time.Minute)); err != nil {
		t.Fatal(err)
	}
	if _, err := st.RequeuePreempted(ctx, id, notified.Add(2*time.Minute)); err != nil {
		t.Fatal(err)
	}
	resumedAt := notified.Add(10 * time.Minute)
	_, run2 := placeAndRun(t, st, victim.ID, []string{"GPU-2", "GPU-3"}, 400, resumedAt)
	passedAt := resumedAt.Add(18 * time.Minute)
	rec, err := st.GetPreemption(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	loss := accounting.EffectiveRunLoss(accounting.LossInput{GPUs: rec.GPUs, NotifiedAt: notified, RunStartedAt: started,
		Resumable: rec.SavedCheckpoint, ResumedAt: resumedAt, PassedAt: passedAt})
	yes, from := true, int64(400)
	rec, err = st.FinishPreemption(ctx, id, store.PreemptionResume{Outcome: vocab.PreemptionCompleted, ResumedRunID: run2,
		ResumedFromStep: &from, ResumedAt: &resumedAt, PassedAt: &passedAt, ResumedCorrectly: &yes, Progressed: true,
		LostSeconds: loss.LostSeconds, SaveRestoreS: loss.SaveRestoreSeconds, RecomputeS: &loss.RecomputeSeconds,
		LossGPUSeconds: loss.GPUSeconds, At: passedAt,
		Failures: []string{"no checkpoint newer than the notice within the 120 s grace period; released anyway, lost work counted"},
		Detail:   "resumed at the saved step 400; back at step 520 after 1080 s"})
	if err != nil {
		t.Fatal(err)
	}
	if rec.EffectiveLossGPUSeconds == nil || *rec.EffectiveLossGPUSeconds != 4560 {
		t.Fatalf("fixture loss %v, want 4560 GPU-s", rec.EffectiveLossGPUSeconds)
	}
	// The victim then finishes its work: the record gets its final outcome.
	if err := st.FinishRun(ctx, victim.ID, run2, vocab.RunSucceeded, "done", passedAt.Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	if rec, err = st.GetPreemption(ctx, rec.ID); err != nil {
		t.Fatal(err)
	}
	return rec
}

// writeCLIArtifact saves a command's output under $GPUGOV_ARTIFACTS, so a
// run's printed records can be shown.
func writeCLIArtifact(t *testing.T, name, out string) {
	t.Helper()
	if dir := os.Getenv("GPUGOV_ARTIFACTS"); dir != "" {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(out), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// TestPreemptionsCommand runs `gpugov preemptions` against the real API:
// with none recorded it says so instead of printing an empty table; then
// the list, one record step by step with its loss by parts, JSON, filters,
// and the errors (bad flags and values exit 2, an unknown ID too).
func TestPreemptionsCommand(t *testing.T) {
	env := newGovCLIEnv(t, alice)
	out, _, err := env.run(t, "preemptions")
	if err != nil || !strings.HasPrefix(out, "no preemptions") || strings.Contains(out, "VICTIM") {
		t.Fatalf("preemptions with none: %v\n%s", err, out)
	}

	rec := completedPreemption(t, env.store)
	out, _, err = env.run(t, "preemptions")
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"ID", "VICTIM", rec.ID, "released", "completed", rec.ForJobID, rec.VictimJobID, "7320", "4560.0", "yes"} {
		if !strings.Contains(out, s) {
			t.Errorf("list lacks %q:\n%s", s, out)
		}
	}
	writeCLIArtifact(t, "cli-preemptions.txt", out)

	out, _, err = env.run(t, "preemptions", rec.ID)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{
		rec.ID + " (released, completed)",
		rec.ForJobID + " in queue serve:",
		rec.VictimJobID + " in queue train, run " + rec.RunID + ", 2 GPU(s)",
		"step 400 at", // the checkpoint at the notice
		"no new checkpoint; resumes from checkpoint step 400 (s3://ckpt/step-400)",
		"at step 400 correct: yes",
		"(step 520, reached by the run when it stopped)",
		"4560.0 GPU-s = 2 GPU(s) × (lost 1200.0 + save/restore 0.0 + recompute 1080.0) s; estimated 7320",
		"Failure", "released anyway, lost work counted",
		"Resume verified       yes",
		"succeeded at ", "0 failure(s) since the resume; output affected: no (not affected: verified resume, job succeeded)",
		"Candidates (low-risk queues first, then least expected loss):",
		"j-inference", "protected queue",
	} {
		if !strings.Contains(out, s) {
			t.Errorf("record lacks %q:\n%s", s, out)
		}
	}
	writeCLIArtifact(t, "cli-preemption-record.txt", out)

	out, _, err = env.run(t, "preemptions", "--format", "json", "--outcome", "completed", "--pool", govPool, "--job", rec.VictimJobID)
	var list api.PreemptionList
	if err != nil || json.Unmarshal([]byte(out), &list) != nil || len(list.Preemptions) != 1 || list.Preemptions[0].ID != rec.ID {
		t.Fatalf("filtered JSON list: %v\n%s", err, out)
	}
	out, _, err = env.run(t, "preemptions", "--outcome", "resume_failed")
	if err != nil || !strings.HasPrefix(out, "no preemptions") {
		t.Fatalf("no match: %v\n%s", err, out)
	}

	for _, args := range [][]string{
		{"--format", "yaml"},
		{"--limit", "5000"},
		{"--state", "lost"}, // rejected by the server: 422
		{"p-nope"},          // 404
		{"a", "b"},
	} {
		_, _, err := env.run(t, append([]string{"preemptions"}, args...)...)
		var ue usageError
		if !errors.As(err, &ue) {
			t.Errorf("preemptions %v: %T %v, want a usage error (exit 2)", args, err, err)
		}
	}
}

// The record prints each figure with its unit: the step the run had
// reached when it stopped (step_at_notice, 2102) on its own row, apart from
// the checkpoint at the notice (1800); and a victim holding a share of one
// GPU (810 milli-GPU) as milli-GPU of 1 GPU, not as "0.81 GPU(s)", in the
// victim row and the loss formula.
func TestPrintPreemptionStepsAndShare(t *testing.T) {
	notified := time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)
	passed := notified.Add(20 * time.Minute)
	reached, loss, lost, zero := int64(2102), 810.0, 600.0, 0.0
	p := api.Preemption{ID: "p-1", Kind: "preemption", State: "released", Outcome: "completed", ForJobID: "j-1",
		VictimJobID: "j-2", VictimQueue: "train", RunID: "r-1", GPUs: 0.81, NotifiedAt: &notified, PassedAt: &passed,
		CheckpointAtNotice: &api.Checkpoint{Step: 1800, At: notified.Add(-10 * time.Minute)}, StepAtNotice: &reached,
		EffectiveLossGPUSeconds: &loss, LostSeconds: &lost, SaveRestoreSeconds: &zero, RecomputeSeconds: &lost,
		Candidates: []api.PreemptionCandidate{{JobID: "j-2", Queue: "train", GPUs: 1, Chosen: true}}}
	var b strings.Builder
	if err := printPreemption(&b, &p); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{
		"Checkpoint at notice  step 1800 at 2026-12-03 09:50:00Z",
		"Back at step reached  2026-12-03 10:20:00Z (step 2102, reached by the run when it stopped)",
		"j-2 in queue train, run r-1, 810 milli-GPU (0.81 GPU) of 1 GPU",
		"810.0 GPU-s = 810 milli-GPU (0.81 GPU) × (lost 600.0",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("record lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "0.81 GPU(s)") || strings.Contains(out, "notice step") {
		t.Errorf("record still prints a share as GPUs or the reached step as the notice's:\n%s", out)
	}
}

// A preemption whose victim ended by itself says it cost nothing, in the
// list and in the record, instead of a loss "not measured yet".
func TestPrintPreemptionVictimEnded(t *testing.T) {
	p := api.Preemption{ID: "p-1", Kind: "preemption", State: "released", Outcome: "victim_ended", ForJobID: "j-1",
		VictimJobID: "j-2", GPUs: 1, EstimatedLossGPUSeconds: 12.7}
	var one, list strings.Builder
	if err := printPreemption(&one, &p); err != nil {
		t.Fatal(err)
	}
	if err := printPreemptions(&list, &api.PreemptionList{Preemptions: []api.Preemption{p}}); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"none: the victim's run ended by itself before the release", "- (the victim's run ended by itself"} {
		if !strings.Contains(one.String(), want) {
			t.Errorf("record lacks %q:\n%s", want, one.String())
		}
	}
	if !strings.Contains(list.String(), " none ") {
		t.Errorf("list shows no \"none\" loss:\n%s", list.String())
	}
}
