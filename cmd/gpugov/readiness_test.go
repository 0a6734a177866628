package main

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpugov/gpugov/api"
	"github.com/gpugov/gpugov/internal/policy"
	"github.com/gpugov/gpugov/internal/scheduling"
	"github.com/gpugov/gpugov/internal/vocab"
	"github.com/gpugov/gpugov/store"
	"github.com/gpugov/gpugov/store/storetest"
)

// drillingWorkflows stands in for Temporal as startedWorkflows does and
// records the drills it is asked to start.
type drillingWorkflows struct {
	startedWorkflows
	mu     sync.Mutex
	drills []string
}

func (w *drillingWorkflows) StartDrill(_ context.Context, preemptionID, _, _, _ string) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.drills = append(w.drills, preemptionID)
	return nil
}

// TestDrillAndReadinessCommands: `gpugov pool readiness` prints each check
// with its numbers and fails save_restore_proven while the running job's
// profile has no evidence; `gpugov drill` starts a drill (a second one is
// refused, exit 2, naming why); with a verified resume the pool is ready.
// An unknown pool and a bad --history are usage errors.
func TestDrillAndReadinessCommands(t *testing.T) {
	node := scheduling.Node{Name: govNode, CPUMilli: 64000, MemoryMiB: 512 * 1024, Schedulable: true}
	for _, u := range []string{"GPU-0", "GPU-1"} {
		node.GPUs = append(node.GPUs, scheduling.GPU{UUID: u, Model: "A100-SXM4-80GB", MemoryMiB: 81920, Healthy: true})
	}
	st, _ := storetest.NewStore(t, storetest.Fixture{
		Pools:  []scheduling.Pool{{Name: govPool, Available: true, Stage: vocab.StageTrial, Nodes: []scheduling.Node{node}}},
		Queues: []scheduling.Queue{{Name: govQueue, Tier: vocab.TierStandard, ServiceShare: 1, LowRisk: true}},
	})
	ctx := context.Background()
	p, err := policy.Parse("policy.yaml", []byte("version: gpugov.policy/v1\nqueues:\n  - {name: train, tier: standard, share: 1, low_risk: true}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if err := st.SavePolicyVersion(ctx, p.Hash(), p.Canonical()); err != nil {
		t.Fatal(err)
	}
	if err := st.ActivatePolicyVersion(ctx, p.Hash(), "serve", "loaded from policy.yaml"); err != nil {
		t.Fatal(err)
	}
	wf := &drillingWorkflows{}
	env := serveCLIEnv(t, st, wf, map[string]api.Principal{cliToken: {Name: "olga", Project: "platform", Role: vocab.RoleOperator}})
	now := time.Now().UTC().Truncate(time.Second)
	job, _, err := st.CreateJob(ctx, &store.NewJob{Project: "vision", Queue: govQueue, Tier: vocab.TierStandard, RunSeconds: 36000,
		SubmitTime: now.Add(-time.Hour), Request: scheduling.ResourceRequest{GPUs: 1, Pool: govPool},
		Recovery: scheduling.RecoveryEvidence{Checkpointable: true, CheckpointIntervalSeconds: 60}})
	if err != nil {
		t.Fatal(err)
	}
	_, run := placeAndRun(t, st, job.ID, []string{"GPU-0"}, 0, now.Add(-time.Hour))
	if err := st.RecordCheckpoint(ctx, job.ID, run, scheduling.Checkpoint{At: now.Add(-time.Minute), Step: 3540, Location: "s3://ckpt/3540"}); err != nil {
		t.Fatal(err)
	}

	out, _, err := env.run(t, "pool", "readiness", govPool)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("gpugov pool readiness %s (before the evidence):\n%s", govPool, out)
	for _, want := range []string{"pool a100-east (stage trial): not ready: save_restore_proven failed",
		"save_restore_proven           precondition  fail    0 of 1 checkpointable profiles have 1+ verified resumes",
		"protection_explicit           precondition  pass    all 1 queues set protected or low_risk explicitly",
		"vision/simulated  1     0         0", "stage history: none"} {
		if !strings.Contains(out, want) {
			t.Errorf("readiness output lacks %q", want)
		}
	}

	out, _, err = env.run(t, "drill", job.ID, "--reason", "earn evidence")
	if err != nil || len(wf.drills) != 1 || !strings.Contains(out, "drill "+wf.drills[0]+" started on job "+job.ID) ||
		!strings.Contains(out, "started by olga: earn evidence") {
		t.Fatalf("drill: %v\n%s", err, out)
	}
	t.Logf("gpugov drill %s:\n%s", job.ID, out)
	_, _, err = env.run(t, "drill", job.ID)
	var ue usageError
	if !errors.As(err, &ue) || !strings.Contains(err.Error(), "job is already in drill "+wf.drills[0]) {
		t.Fatalf("second drill: %v, want a usage error naming the open drill", err)
	}

	if err := st.RecordResumeEvidence(ctx, store.ResumeEvidence{Key: "verified-1", JobID: job.ID, Kind: vocab.EvidenceDrill,
		Outcome: vocab.ResumeVerified, At: now}); err != nil {
		t.Fatal(err)
	}
	out, _, err = env.run(t, "pool", "readiness", govPool)
	if err != nil || !strings.Contains(out, "pool a100-east (stage trial): ready: every check passed") {
		t.Fatalf("readiness after the evidence: %v\n%s", err, out)
	}
	t.Logf("gpugov pool readiness %s (after the evidence):\n%s", govPool, out)
	if _, _, err := env.run(t, "pool", "readiness", "nosuch"); !errors.As(err, &ue) || !strings.Contains(err.Error(), "pool nosuch not found") {
		t.Errorf("unknown pool: %v", err)
	}
	if _, _, err := env.run(t, "pool", "readiness", govPool, "--history", "0"); !errors.As(err, &ue) {
		t.Errorf("--history 0: %v, want a usage error", err)
	}
}
