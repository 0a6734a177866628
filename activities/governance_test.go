package activities_test

import (
	"context"
	"errors"
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

// govQueues adds an experiment queue (the victims') and a production queue
// (the trigger's) to the store.
func govQueues(t *testing.T, st *store.Store) {
	t.Helper()
	if err := st.UpsertQueues(context.Background(), []scheduling.Queue{
		{Name: "exp", Tier: vocab.TierExperiment, ServiceShare: 1},
		{Name: "prod", Tier: vocab.TierProduction, ServiceShare: 1},
	}); err != nil {
		t.Fatal(err)
	}
}

// runningJob stores a checkpointable job of queue on GPU gpu whose run
// started at started, and returns it with its allocation and run.
func runningJob(t *testing.T, st *store.Store, queue string, tier vocab.Tier, gpu string, started time.Time) (*store.Job, string, string) {
	t.Helper()
	ctx := context.Background()
	j := storetest.Submit(t, st, &store.NewJob{Project: "vision", Queue: queue, Tier: tier, RunSeconds: 1e6,
		Request:  scheduling.ResourceRequest{GPUs: 1, Pool: testPool},
		Recovery: scheduling.RecoveryEvidence{Checkpointable: true, CheckpointIntervalSeconds: 60}})
	out := storetest.Place(t, st, "place-"+j.ID, started, storetest.Placement(j.ID, testPool, testNode, 1000, gpu))
	run, err := st.MarkRunning(ctx, j.ID, out.Placed[0].AllocationID, 0, started)
	if err != nil {
		t.Fatal(err)
	}
	return j, out.Placed[0].AllocationID, run
}

// TestRunCycleSparesVictimsTheConfigProtects runs real scheduling cycles on
// a one-GPU pool held by a checkpointable experiment job while a production
// job waits: a protection window of the policy in force keeps
// the experiment job from being proposed as a victim, and so does recovery
// evidence downgraded by a wrong-step resume; with neither, it is proposed.
func TestRunCycleSparesVictimsTheConfigProtects(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := newStore(t, 1, 1)
	govQueues(t, st)
	exp, _, _ := runningJob(t, st, "exp", vocab.TierExperiment, gpuUUID(0), time.Now().Add(-2*time.Hour))
	if _, _, err := st.CreateJob(ctx, &store.NewJob{Project: "serving", Queue: "prod", Tier: vocab.TierProduction,
		RunSeconds: 60, Request: scheduling.ResourceRequest{GPUs: 1, Pool: testPool}}); err != nil {
		t.Fatal(err)
	}
	pol := scheduling.DefaultPolicy()
	pol.Preemption.RequireVerifiedResume = false
	var mu sync.Mutex
	cfg := policy.Default()
	cfg.ProtectionWindows = []policy.Window{{Name: "launch", Start: time.Now().Add(-time.Hour),
		End: time.Now().Add(time.Hour), Queues: []string{"exp"}}}
	sched := activities.NewScheduler(activities.Deps{Store: st,
		Policy: func(context.Context) (*scheduling.Policy, error) { return &pol, nil }})
	sched.Governance = func() *policy.Policy { mu.Lock(); defer mu.Unlock(); return cfg }
	proposals := func() int {
		ps, err := st.ListPreemptions(ctx, store.PreemptionFilter{JobID: exp.ID})
		if err != nil {
			t.Fatal(err)
		}
		return len(ps)
	}
	prev := ""
	cycle := func(id string) {
		runCycle(t, sched, &activities.RunCycleInput{Shard: "default", CycleID: id, PreviousCycleID: prev})
		prev = id
	}

	cycle("c-window")
	if n := proposals(); n != 0 {
		t.Fatalf("inside the protection window: %d preemption records of %s, want none", n, exp.ID)
	}

	mu.Lock()
	cfg = policy.Default()
	mu.Unlock()
	if _, err := st.Pool().Exec(ctx, `UPDATE jobs SET recovery = recovery || '{"resume_downgraded": {"preemption_id": "p-test"}}' WHERE id = $1`, exp.ID); err != nil {
		t.Fatal(err)
	}
	cycle("c-downgraded")
	if n := proposals(); n != 0 {
		t.Fatalf("downgraded recovery evidence: %d preemption records of %s, want none", n, exp.ID)
	}

	if _, err := st.Pool().Exec(ctx, `UPDATE jobs SET recovery = recovery - 'resume_downgraded' WHERE id = $1`, exp.ID); err != nil {
		t.Fatal(err)
	}
	cycle("c-open")
	if n := proposals(); n != 1 {
		t.Fatalf("no window, no downgrade: %d preemption records of %s, want the would-preempt one", n, exp.ID)
	}
}

// heartbeats stands in for Temporal's view of the runs: the last heartbeat
// of each job's run activity, or an error.
type heartbeats struct {
	at   map[string]time.Time
	fail map[string]bool
}

func (h heartbeats) RunStep(context.Context, string) (int64, bool, error) { return 0, false, nil }

func (h heartbeats) LastHeartbeat(_ context.Context, jobID string) (time.Time, bool, error) {
	if h.fail[jobID] {
		return time.Time{}, false, errors.New("temporal unreachable")
	}
	at, ok := h.at[jobID]
	return at, ok, nil
}

// TestReclaimScanFailsRunsWhoseExecutorStoppedHeartbeating scans three long
// runs: one whose run activity last heartbeated an hour ago (its agent is
// gone) is a failed finding with the heartbeat's age in its basis and
// evidence; one that heartbeated seconds ago is not reclaimable (no
// utilisation samples: no evidence of idleness); one whose heartbeat cannot
// be read is classified without it and counted.
func TestReclaimScanFailsRunsWhoseExecutorStoppedHeartbeating(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := newStore(t, 1, 3)
	govQueues(t, st)
	now := time.Now()
	started := now.Add(-2 * time.Hour)
	lost, lostAlloc, lostRun := runningJob(t, st, "exp", vocab.TierExperiment, gpuUUID(0), started)
	alive, _, _ := runningJob(t, st, "exp", vocab.TierExperiment, gpuUUID(1), started)
	unread, _, _ := runningJob(t, st, "exp", vocab.TierExperiment, gpuUUID(2), started)
	cfg := policy.Default()
	cfg.Reclaim.Enabled = true
	hb := heartbeats{at: map[string]time.Time{lost.ID: now.Add(-time.Hour), alive.ID: now.Add(-10 * time.Second)},
		fail: map[string]bool{unread.ID: true}}
	// The lost run's job workflow, told `cancel`, ends the run (releasing
	// its GPUs) as JobWorkflow does.
	jobs := &cancellingJobs{st: st, runs: map[string]string{lost.ID: lostRun}}
	var suite testsuite.WorkflowTestSuite
	env := suite.NewTestActivityEnvironment()
	activities.Register(env, activities.Deps{Store: st, Progress: hb, Temporal: jobs,
		PollInterval: 20 * time.Millisecond, Governance: func() *policy.Policy { return cfg }, Now: func() time.Time { return now }})

	val, err := env.ExecuteActivity("ScanReclaims", &activities.ScanInput{})
	if err != nil {
		t.Fatal(err)
	}
	var scan activities.ScanResult
	if err := val.Get(&scan); err != nil {
		t.Fatal(err)
	}
	if scan.Active != 3 || scan.HeartbeatsUnread != 1 || len(scan.Findings) != 1 {
		t.Fatalf("scan %+v, want 3 active, 1 heartbeat unread, 1 finding", scan)
	}
	f := scan.Findings[0]
	if f.JobID != lost.ID || f.Class != string(vocab.ClassFailed) || !strings.Contains(f.Basis, "has not heartbeated for 1h0m0s") {
		t.Fatalf("finding %+v, want %s failed for its lost heartbeat", f, lost.ID)
	}

	val, err = env.ExecuteActivity("AssessReclaim", &activities.AssessInput{AllocationID: lostAlloc, WorkflowID: "reclaim/" + lostAlloc})
	if err != nil {
		t.Fatal(err)
	}
	var as activities.AssessResult
	if err := val.Get(&as); err != nil {
		t.Fatal(err)
	}
	if !as.Proceed || as.Class != string(vocab.ClassFailed) {
		t.Fatalf("assess %+v, want a failed reclaim recorded", as)
	}
	r, err := st.GetReclaim(ctx, as.ReclaimID)
	if err != nil {
		t.Fatal(err)
	}
	if age, _ := r.Evidence["heartbeat_age_s"].(float64); age < 3599 || age > 3601 || r.Evidence["last_heartbeat_at"] == nil {
		t.Fatalf("reclaim evidence %v, want the heartbeat's time and its age of 3600 s", r.Evidence)
	}

	// Its run is still going: the release goes through its job workflow.
	val, err = env.ExecuteActivity("ReleaseReclaimed", &activities.ReleaseReclaimInput{ReclaimID: as.ReclaimID, By: vocab.ActorReclaim})
	if err != nil {
		t.Fatal(err)
	}
	var rel activities.ReleaseReclaimResult
	if err := val.Get(&rel); err != nil {
		t.Fatal(err)
	}
	if rel.State != vocab.ReclaimReleased || rel.GPUsReleased != 1 || jobs.cancelled() != 1 {
		t.Fatalf("release %+v after %d cancel signals, want released through one cancel of the job", rel, jobs.cancelled())
	}
	if j, _ := st.GetJob(ctx, lost.ID); j.State != vocab.JobCancelled {
		t.Fatalf("lost job is %s, want cancelled", j.State)
	}
	var detail string
	if err := st.Pool().QueryRow(ctx, `SELECT detail FROM runs WHERE id = $1`, lostRun).Scan(&detail); err != nil || detail != "cancelled by the reclaim" {
		t.Fatalf("run ended with %q (%v), want ended by its job workflow", detail, err)
	}
}

// cancellingJobs plays the job workflows at the signal boundary: a `cancel`
// to a job in runs ends that run cancelled in the store.
type cancellingJobs struct {
	st   *store.Store
	runs map[string]string // job ID → its running run

	mu      sync.Mutex
	cancels int
}

func (c *cancellingJobs) SignalWorkflow(ctx context.Context, workflowID, _, name string, _ any) error {
	if name != temporalx.SignalCancel {
		return nil
	}
	c.mu.Lock()
	c.cancels++
	c.mu.Unlock()
	for job, run := range c.runs {
		if temporalx.JobWorkflowID(job) == workflowID {
			return c.st.FinishRun(ctx, job, run, vocab.RunCancelled, "cancelled by the reclaim", time.Now())
		}
	}
	return nil
}

func (c *cancellingJobs) cancelled() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.cancels
}

// TestRunCycleWeighsProjectsByPolicy runs a real scheduling cycle on a
// one-GPU pool with two equal waiting jobs of projects that have used the
// same GPU time: without project weights the earlier submission is placed;
// with the policy weighing project "late" 3:1, its fair share is larger,
// its fair-share points higher, and its job is placed instead.
func TestRunCycleWeighsProjectsByPolicy(t *testing.T) {
	placed := func(weights map[string]float64) string {
		ctx := context.Background()
		st := newStore(t, 1, 1)
		govQueues(t, st)
		if _, err := st.Pool().Exec(ctx, `INSERT INTO project_usage (project, decayed_gpu_seconds, as_of)
			VALUES ('early', 36000, now()), ('late', 36000, now())`); err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, project := range []string{"early", "late"} {
			j, _, err := st.CreateJob(ctx, &store.NewJob{Project: project, Queue: "exp", Tier: vocab.TierExperiment,
				RunSeconds: 60, Request: scheduling.ResourceRequest{GPUs: 1, Pool: testPool}})
			if err != nil {
				t.Fatal(err)
			}
			ids = append(ids, j.ID)
		}
		cfg := policy.Default()
		cfg.FairShare.ProjectWeights = weights
		sched := activities.NewScheduler(activities.Deps{Store: st,
			Policy:     func(context.Context) (*scheduling.Policy, error) { return cfg.Scheduling(), nil },
			Governance: func() *policy.Policy { return cfg }})
		res := runCycle(t, sched, &activities.RunCycleInput{Shard: "default", CycleID: "c1"})
		if len(res.Placements) != 1 {
			t.Fatalf("placements %+v, want one", res.Placements)
		}
		if res.PolicyVersion != cfg.Hash() {
			t.Errorf("cycle ran with policy %q, want the policy's hash %s", res.PolicyVersion, cfg.Hash())
		}
		switch res.Placements[0].JobID {
		case ids[0]:
			return "early"
		case ids[1]:
			return "late"
		}
		t.Fatalf("placed %s, neither job", res.Placements[0].JobID)
		return ""
	}
	if got := placed(nil); got != "early" {
		t.Errorf("equal weights: placed project %s's job, want early's (submitted first)", got)
	}
	if got := placed(map[string]float64{"late": 3}); got != "late" {
		t.Errorf("late weighted 3:1: placed project %s's job, want late's", got)
	}
}
