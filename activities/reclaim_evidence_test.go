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
	"github.com/gpugov/gpugov/internal/vocab"
	"github.com/gpugov/gpugov/store"
)

// stepReports stands in for Temporal's view of the runs through
// RunReportSource: each job's heartbeated step, heartbeating now.
type stepReports struct {
	mu    sync.Mutex
	steps map[string]int64
	now   func() time.Time
}

func (s *stepReports) RunStep(_ context.Context, jobID string) (int64, bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	st, ok := s.steps[jobID]
	return st, ok, nil
}

func (s *stepReports) RunReport(ctx context.Context, jobID string) (activities.RunReport, bool, error) {
	st, ok, _ := s.RunStep(ctx, jobID)
	return activities.RunReport{Step: st, HasStep: ok, HeartbeatAt: s.now(), HasHeartbeat: true}, true, nil
}

func (s *stepReports) set(jobID string, step int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.steps[jobID] = step
}

// TestReclaimScanWeighsProgressBurstsAndCompletion scans three long runs on
// an automate-stage pool whose rules release idle and completed work
// automatically: one on an idle GPU whose step advances is not idle until a
// whole window passes without an advance, and not idle again once its step
// advances; one at 1 % with one 90 % burst is an idle finding handled in
// notify mode (the burst caps auto); one on a busy GPU whose owner declared
// the work done is a completed finding released automatically by stopping
// its run through its job workflow.
func TestReclaimScanWeighsProgressBurstsAndCompletion(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := newStore(t, 1, 3)
	govQueues(t, st)
	if _, err := st.SetPoolStages(ctx, map[string]vocab.AutomationStage{testPool: vocab.StageAutomate}, "test", "automate"); err != nil {
		t.Fatal(err)
	}
	t0 := time.Now().UTC().Truncate(time.Second)
	started := t0.Add(-2 * time.Hour)
	progressing, _, _ := runningJob(t, st, "exp", vocab.TierExperiment, gpuUUID(0), started)
	bursty, burstyAlloc, _ := runningJob(t, st, "exp", vocab.TierExperiment, gpuUUID(1), started)
	done, doneAlloc, doneRun := runningJob(t, st, "exp", vocab.TierExperiment, gpuUUID(2), started)
	var samples []store.GPUSample
	for at := t0.Add(-590 * time.Second); !at.After(t0.Add(15 * time.Minute)); at = at.Add(30 * time.Second) {
		burst := 1
		if at.Equal(t0.Add(-290 * time.Second)) {
			burst = 90
		}
		samples = append(samples,
			store.GPUSample{GPUUUID: gpuUUID(0), At: at, GPUPercent: 0, MemoryUsedMiB: 300},
			store.GPUSample{GPUUUID: gpuUUID(1), At: at, GPUPercent: burst, MemoryUsedMiB: 300},
			store.GPUSample{GPUUUID: gpuUUID(2), At: at, GPUPercent: 80, MemoryUsedMiB: 40000})
	}
	if _, err := st.InsertGPUSamples(ctx, testNode, samples); err != nil {
		t.Fatal(err)
	}
	if _, _, err := st.CompleteJob(ctx, done.ID, "vision", "weights exported; uploading logs", t0.Add(-time.Minute)); err != nil {
		t.Fatal(err)
	}

	cfg := policy.Default()
	cfg.Reclaim.Enabled, cfg.Reclaim.ObservationWindowSeconds = true, 600
	cfg.Reclaim.Rules = []policy.ModeRule{{Class: vocab.ClassIdle, Mode: vocab.ModeAuto}, {Class: vocab.ClassCompleted, Mode: vocab.ModeAuto}}
	var mu sync.Mutex
	now := t0
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	reports := &stepReports{steps: map[string]int64{progressing.ID: 5, bursty.ID: 0, done.ID: 0}, now: clock}
	jobs := &cancellingJobs{st: st, runs: map[string]string{done.ID: doneRun}}
	var suite testsuite.WorkflowTestSuite
	env := suite.NewTestActivityEnvironment()
	activities.Register(env, activities.Deps{Store: st, Progress: reports, Temporal: jobs, PollInterval: 20 * time.Millisecond,
		Governance: func() *policy.Policy { return cfg }, Now: clock})
	scan := func(at time.Time) map[string]activities.ReclaimFinding {
		t.Helper()
		mu.Lock()
		now = at
		mu.Unlock()
		val, err := env.ExecuteActivity("ScanReclaims", &activities.ScanInput{})
		if err != nil {
			t.Fatal(err)
		}
		var res activities.ScanResult
		if err := val.Get(&res); err != nil {
			t.Fatal(err)
		}
		out := map[string]activities.ReclaimFinding{}
		for _, f := range res.Findings {
			out[f.JobID] = f
		}
		return out
	}

	found := scan(t0)
	if _, ok := found[progressing.ID]; ok {
		t.Errorf("a run whose step advanced (first seen at step 5 > 0) was found: %+v", found[progressing.ID])
	}
	if f := found[bursty.ID]; f.Class != string(vocab.ClassIdle) || !strings.Contains(f.Basis, "1 burst(s) above 5%") {
		t.Errorf("bursty run: %+v, want idle with its burst in the basis", f)
	}
	if f := found[done.ID]; f.Class != string(vocab.ClassCompleted) || !strings.Contains(f.Basis, "declared the work done") {
		t.Errorf("declared complete: %+v, want completed", f)
	}

	assess := func(alloc string) activities.AssessResult {
		t.Helper()
		val, err := env.ExecuteActivity("AssessReclaim", &activities.AssessInput{AllocationID: alloc, WorkflowID: "reclaim/" + alloc})
		if err != nil {
			t.Fatal(err)
		}
		var as activities.AssessResult
		if err := val.Get(&as); err != nil {
			t.Fatal(err)
		}
		return as
	}
	if as := assess(burstyAlloc); !as.Proceed || as.Mode != string(vocab.ModeNotify) {
		t.Errorf("bursty assessment %+v, want notify (auto capped by the burst)", as)
	} else if r, _ := st.GetReclaim(ctx, as.ReclaimID); r.ConfiguredMode != vocab.ModeAuto || r.Evidence["notify_at_most"] == nil ||
		r.Evidence["gpu_windows"] == nil {
		t.Errorf("bursty reclaim %+v, want configured auto and the window's measures in its evidence", r)
	}
	as := assess(doneAlloc)
	if !as.Proceed || as.Mode != string(vocab.ModeAuto) || as.Class != string(vocab.ClassCompleted) {
		t.Fatalf("completed assessment %+v, want auto", as)
	}
	val, err := env.ExecuteActivity("ReleaseReclaimed", &activities.ReleaseReclaimInput{ReclaimID: as.ReclaimID, By: vocab.ActorReclaim})
	if err != nil {
		t.Fatal(err)
	}
	var rel activities.ReleaseReclaimResult
	if err := val.Get(&rel); err != nil {
		t.Fatal(err)
	}
	if rel.State != vocab.ReclaimReleased || jobs.cancelled() != 1 {
		t.Fatalf("release %+v after %d cancel signals, want the run stopped through its job workflow", rel, jobs.cancelled())
	}

	// A whole window without an advance: idle. An advance: output again.
	found = scan(t0.Add(11 * time.Minute))
	if f := found[progressing.ID]; f.Class != string(vocab.ClassIdle) {
		t.Errorf("no advance for a window: %+v, want idle", f)
	}
	reports.set(progressing.ID, 6)
	found = scan(t0.Add(12 * time.Minute))
	if f, ok := found[progressing.ID]; ok {
		t.Errorf("step advanced to 6: %+v, want not idle", f)
	}
}
