package store_test

import (
	"context"
	"fmt"
	"math"
	"reflect"
	"testing"
	"time"

	"github.com/gpugov/gpugov/internal/scheduling"
	"github.com/gpugov/gpugov/internal/vocab"
	"github.com/gpugov/gpugov/store"
	"github.com/gpugov/gpugov/store/storetest"
)

func TestUpsertInventoryKeepsGPUsWithActiveAllocations(t *testing.T) {
	t.Parallel()
	s, _ := newStore(t)
	ctx := context.Background()
	pool := testPool("p", 2, 2)
	other := testPool("q", 1, 1)
	if err := s.UpsertInventory(ctx, []scheduling.Pool{pool, other}); err != nil {
		t.Fatal(err)
	}
	if got, _ := s.GetInventory(ctx); !reflect.DeepEqual(got, []scheduling.Pool{pool, other}) {
		t.Fatalf("inventory round trip:\n got %+v\nwant %+v", got, []scheduling.Pool{pool, other})
	}
	n0, n1 := pool.Nodes[0], pool.Nodes[1]
	j := submit(t, s, "x", "p", 1, 0)
	out, err := s.ApplyCycle(ctx, "c1", &scheduling.Result{Placements: []scheduling.Placement{
		place(j.ID, "p", n0.Name, 500, n0.GPUs[0].UUID)}}, t0)
	if err != nil || len(out.Placed) != 1 {
		t.Fatalf("place: %+v %v", out, err)
	}
	// The new report of pool p drops node n0 (whose GPU 0 is busy) and n1's
	// GPU 1, changes n1's GPU 0 and adds node n2; pool q is not reported.
	n1.GPUs = n1.GPUs[:1]
	n1.GPUs[0].Healthy = false
	n2 := testPool("p", 3, 1).Nodes[2]
	report := scheduling.Pool{Name: "p", Available: true, Stage: vocab.StageTrial, Nodes: []scheduling.Node{n1, n2}}
	for range 2 { // the second call must change nothing
		if err := s.UpsertInventory(ctx, []scheduling.Pool{report}); err != nil {
			t.Fatal(err)
		}
	}
	kept := n0
	kept.Schedulable = false
	kept.GPUs = []scheduling.GPU{n0.GPUs[0]}
	kept.GPUs[0].Healthy = false
	want := []scheduling.Pool{{Name: "p", Available: true, Stage: vocab.StageTrial,
		Nodes: []scheduling.Node{kept, n1, n2}}, other}
	got, err := s.GetInventory(ctx)
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("after removal: %v\n got %+v\nwant %+v", err, got, want)
	}
	// Once released, the vanished GPU and node go too.
	if err := s.ReleasePlacement(ctx, j.ID, out.Placed[0].AllocationID, vocab.RunRequeued, "", t0); err != nil {
		t.Fatal(err)
	}
	if err := s.UpsertInventory(ctx, []scheduling.Pool{report}); err != nil {
		t.Fatal(err)
	}
	want[0].Nodes = []scheduling.Node{n1, n2}
	if got, _ := s.GetInventory(ctx); !reflect.DeepEqual(got, want) {
		t.Fatalf("after release:\n got %+v\nwant %+v", got, want)
	}
	if err := s.UpsertInventory(ctx, []scheduling.Pool{report, report}); err == nil {
		t.Fatal("a pool listed twice must be refused")
	}
}

// TestLoadSnapshotRoundTrip writes inventory, queues, quotas, pending jobs of
// every shape, placed and running jobs (with a checkpoint and a past
// preemption) and a preemption in progress, and checks that LoadSnapshot
// returns exactly that.
func TestLoadSnapshotRoundTrip(t *testing.T) {
	t.Parallel()
	s, _ := newStore(t)
	ctx := context.Background()
	pools := []scheduling.Pool{testPool("p", 2, 4), testPool("q", 1, 2)}
	pools[1].Available, pools[1].Stage = false, vocab.StageObserve
	pools[0].Nodes[1].GPUs[3].Healthy = false
	queues := []scheduling.Queue{
		{Name: "infer", Tier: vocab.TierProduction, ServiceShare: 4, MaxWait: time.Minute, Protected: true},
		{Name: "train", Tier: vocab.TierStandard, ServiceShare: 1.5, MaxWait: 2 * time.Hour, LowRisk: true},
	}
	quotas := []scheduling.Quota{{Project: "nlp", Pool: "p", NominalMilli: 4000, BorrowingLimitMilli: 2000},
		{Project: "vision", Pool: "p", NominalMilli: 3000}}
	if err := s.UpsertInventory(ctx, pools); err != nil {
		t.Fatal(err)
	}
	if err := s.UpsertQueues(ctx, queues); err != nil {
		t.Fatal(err)
	}
	if err := s.UpsertQuotas(ctx, quotas); err != nil {
		t.Fatal(err)
	}

	pendingIn := []store.NewJob{
		{Project: "nlp", Queue: "train", Tier: vocab.TierStandard, SubmitTime: t0,
			Request: scheduling.ResourceRequest{GPUs: 4, GPUMemoryMiB: 40960, GPUModels: []string{"A100-SXM4-80GB", "H100"},
				Pool: "p", Topology: scheduling.TopologyNVLinkDomain, CPUMilli: 32000, MemoryMiB: 262144,
				Labels: map[string]string{"storage": "nvme"}},
			Prerequisites: []scheduling.Prerequisite{{Name: "image", Ready: true}, {Name: "dataset", Message: "copying 40%"}},
			Recovery: scheduling.RecoveryEvidence{Checkpointable: true, CheckpointIntervalSeconds: 900,
				LastCheckpoint: &scheduling.Checkpoint{At: t0.Add(-time.Hour), Step: 1200, Location: "s3://c/1200"}, VerifiedResumes: 2}},
		{Project: "vision", Queue: "infer", Tier: vocab.TierProduction, SubmitTime: t0.Add(time.Second), Protected: true,
			Held: true, Request: scheduling.ResourceRequest{GPUs: 1, GPUMilli: 250, Pool: "p"}},
		{Project: "vision", Queue: "train", Tier: vocab.TierExperiment, SubmitTime: t0.Add(2 * time.Second),
			Request: scheduling.ResourceRequest{GPUs: 2, Pool: "q", Topology: scheduling.TopologySameNode}},
	}
	runningIn := []store.NewJob{
		{Project: "nlp", Queue: "train", Tier: vocab.TierStandard, SubmitTime: t0.Add(-3 * time.Hour), RunSeconds: 7200.5,
			Recovery: scheduling.RecoveryEvidence{Checkpointable: true, CheckpointIntervalSeconds: 600},
			Request:  scheduling.ResourceRequest{GPUs: 2, Pool: "p", CPUMilli: 8000, MemoryMiB: 65536}},
		{Project: "vision", Queue: "infer", Tier: vocab.TierProduction, SubmitTime: t0.Add(-2 * time.Hour), Protected: true,
			Request: scheduling.ResourceRequest{GPUs: 1, GPUMilli: 500, Pool: "p"}},
	}
	ids := func(njs []store.NewJob) []string {
		ptrs := make([]*store.NewJob, len(njs))
		for i := range njs {
			ptrs[i] = &njs[i]
		}
		out, err := s.CreateJobs(ctx, ptrs)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	pendingIDs, runningIDs := ids(pendingIn), ids(runningIn)

	// Running job 0 has a past preempted run, then a running run with a checkpoint;
	// running job 1 is placed (no run yet).
	n0, n1 := pools[0].Nodes[0], pools[0].Nodes[1]
	placeA := place(runningIDs[0], "p", n0.Name, 1000, n0.GPUs[2].UUID, n0.GPUs[1].UUID)
	placeA.Borrowed = true
	first, err := s.ApplyCycle(ctx, "c0", &scheduling.Result{Placements: []scheduling.Placement{placeA}}, t0.Add(-150*time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	run0, _ := s.MarkRunning(ctx, runningIDs[0], first.Placed[0].AllocationID, 0, t0.Add(-150*time.Minute))
	preemptedAt := t0.Add(-2 * time.Hour)
	if err := s.FinishRun(ctx, runningIDs[0], run0, vocab.RunPreempted, "", preemptedAt); err != nil {
		t.Fatal(err)
	}
	out, err := s.ApplyCycle(ctx, "c1", &scheduling.Result{Placements: []scheduling.Placement{
		placeA, place(runningIDs[1], "p", n1.Name, 500, n1.GPUs[0].UUID)}}, t0.Add(-time.Hour))
	if err != nil || len(out.Placed) != 2 {
		t.Fatalf("placements: %+v %v", out, err)
	}
	startedAt := t0.Add(-50 * time.Minute)
	run1, err := s.MarkRunning(ctx, runningIDs[0], out.Placed[0].AllocationID, 1000, startedAt)
	if err != nil {
		t.Fatal(err)
	}
	cp := scheduling.Checkpoint{At: t0.Add(-10 * time.Minute), Step: 1300, Location: "s3://a/1300"}
	if err := s.RecordCheckpoint(ctx, runningIDs[0], run1, cp); err != nil {
		t.Fatal(err)
	}
	// A preemption of running job 1 is in progress for pending job 1.
	if _, err := s.ApplyCycle(ctx, "c2", &scheduling.Result{Preemptions: []scheduling.PreemptionProposal{{
		ForJobID: pendingIDs[1], Act: true, Victims: []scheduling.Victim{{JobID: runningIDs[1], AllocationID: out.Placed[1].AllocationID}}}}},
		t0); err != nil {
		t.Fatal(err)
	}

	now := t0.Add(10 * time.Minute)
	// The profile nlp/simulated has two verified resumes and a failed one in
	// the 30-day window, one verified resume before it and one after now.
	for i, ev := range []struct {
		outcome vocab.ResumeOutcome
		at      time.Time
	}{{vocab.ResumeVerified, now.Add(-time.Hour)}, {vocab.ResumeWrongStep, now.Add(-2 * time.Hour)},
		{vocab.ResumeVerified, now.Add(-29 * 24 * time.Hour)}, {vocab.ResumeVerified, now.Add(-31 * 24 * time.Hour)},
		{vocab.ResumeFailed, now.Add(time.Minute)}} {
		if err := s.RecordResumeEvidence(ctx, store.ResumeEvidence{Key: fmt.Sprintf("e%d", i), JobID: runningIDs[0],
			Kind: vocab.EvidencePreemption, Outcome: ev.outcome, At: ev.at}); err != nil {
			t.Fatal(err)
		}
	}
	withProfile := func(r scheduling.RecoveryEvidence, project string) scheduling.RecoveryEvidence {
		r.Profile = project + "/simulated"
		if project == "nlp" {
			r.ProfileVerifiedResumes, r.ProfileFailedResumes = 2, 1
		}
		return r
	}
	got, err := s.LoadSnapshot(ctx, now)
	if err != nil {
		t.Fatal(err)
	}
	want := &scheduling.Snapshot{Pools: pools, Queues: queues, Quotas: quotas}
	want.Allocations = []scheduling.Allocation{
		{ID: out.Placed[0].AllocationID, JobID: runningIDs[0], Pool: "p", Node: n0.Name, GPUs: placeA.GPUs,
			CPUMilli: 8000, MemoryMiB: 65536, Borrowed: true},
		{ID: out.Placed[1].AllocationID, JobID: runningIDs[1], Pool: "p", Node: n1.Name,
			GPUs: []scheduling.GPUShare{{UUID: n1.GPUs[0].UUID, Milli: 500}}},
	}
	if want.Allocations[0].JobID > want.Allocations[1].JobID { // ordered by job ID
		want.Allocations[0], want.Allocations[1] = want.Allocations[1], want.Allocations[0]
	}
	withCP := withProfile(runningIn[0].Recovery, "nlp")
	withCP.LastCheckpoint = &cp
	want.Running = []scheduling.RunningJob{
		{ID: runningIDs[0], Project: "nlp", Queue: "train", Tier: vocab.TierStandard, Request: runningIn[0].Request,
			Allocation: allocOf(want.Allocations, runningIDs[0]), StartedAt: startedAt, Recovery: withCP,
			RecentPreemptions: []time.Time{preemptedAt}, RunSeconds: 7201}, // the declared run_seconds, rounded up
		{ID: runningIDs[1], Project: "vision", Queue: "infer", Tier: vocab.TierProduction, Request: runningIn[1].Request,
			Allocation: allocOf(want.Allocations, runningIDs[1]), StartedAt: t0.Add(-time.Hour), Protected: true,
			Recovery: withProfile(scheduling.RecoveryEvidence{}, "vision")},
	}
	if want.Running[0].ID > want.Running[1].ID {
		want.Running[0], want.Running[1] = want.Running[1], want.Running[0]
	}
	for i, nj := range pendingIn {
		pj := scheduling.PendingJob{ID: pendingIDs[i], Project: nj.Project, Queue: nj.Queue, Tier: nj.Tier,
			Request: nj.Request, SubmitTime: nj.SubmitTime, WaitingSince: nj.SubmitTime, AgingSince: nj.SubmitTime, Prerequisites: nj.Prerequisites,
			Held: nj.Held, Recovery: withProfile(nj.Recovery, nj.Project), Protected: nj.Protected}
		if i == 1 {
			pj.PreemptionInProgress, pj.PreemptionNoticeAt = []string{runningIDs[1]}, t0
		}
		want.Pending = append(want.Pending, pj)
	}
	// Usage: the preempted run (2 GPUs, 30 min, ended 2 h before now-10 min)
	// decayed to now, plus the running allocations so far.
	h := store.DefaultUsageHalfLife.Seconds()
	decayed := func(g, d float64) float64 { return g * h / math.Ln2 * (1 - math.Exp2(-d/h)) }
	want.Usage = []scheduling.ProjectUsage{
		{Project: "nlp", AsOf: now, DecayedGPUSeconds: decayed(2, 1800)*math.Exp2(-now.Sub(preemptedAt).Seconds()/h) +
			decayed(2, now.Sub(startedAt).Seconds())},
		{Project: "vision", AsOf: now, DecayedGPUSeconds: decayed(0.5, now.Sub(t0.Add(-time.Hour)).Seconds())},
	}
	roundUsage(got, want)
	compareSnapshots(t, got, want)

	// A second load is served partly from the cache (inventory, static job
	// data) and must be identical, even after the caller modified the first.
	got.Pools[0].Nodes[0].GPUs[0].Healthy = false
	got.Pools[0].Nodes[0].Name = "scribbled"
	again, err := s.LoadSnapshot(ctx, now)
	if err != nil {
		t.Fatal(err)
	}
	roundUsage(again, want)
	compareSnapshots(t, again, want)

	// Under a simulated executor's speed the declared run time of a job
	// without a command is given in real seconds (7201 / 600, rounded up).
	s.SetSimulatedRunSpeed(600)
	fast, err := s.LoadSnapshot(ctx, now)
	if err != nil {
		t.Fatal(err)
	}
	for _, rj := range fast.Running {
		if want := map[bool]int64{true: 13, false: 0}[rj.ID == runningIDs[0]]; rj.RunSeconds != want {
			t.Errorf("running job %s at 600x: RunSeconds %d, want %d (7201 s / 600; none declared: 0)", rj.ID, rj.RunSeconds, want)
		}
	}
	s.SetSimulatedRunSpeed(1)

	// Changes after the cache was filled show up: a new submission, a
	// cancelled job, an inventory change.
	extra := store.NewJob{Project: "nlp", Queue: "train", Tier: vocab.TierStandard, SubmitTime: t0.Add(3 * time.Second),
		Request: scheduling.ResourceRequest{GPUs: 8, Pool: "p", Labels: map[string]string{"net": "ib"}}}
	extraID := ids([]store.NewJob{extra})[0]
	if err := s.CancelJob(ctx, pendingIDs[2], "alice", "not needed"); err != nil {
		t.Fatal(err)
	}
	pools[1].Nodes[0].GPUs[1].Healthy = false
	if err := s.UpsertInventory(ctx, pools[1:]); err != nil {
		t.Fatal(err)
	}
	want.Pending = append(want.Pending[:2], scheduling.PendingJob{ID: extraID, Project: "nlp", Queue: "train",
		Tier: vocab.TierStandard, Request: extra.Request, SubmitTime: extra.SubmitTime, WaitingSince: extra.SubmitTime, AgingSince: extra.SubmitTime,
		Recovery: withProfile(scheduling.RecoveryEvidence{}, "nlp")})
	third, err := s.LoadSnapshot(ctx, now)
	if err != nil {
		t.Fatal(err)
	}
	roundUsage(third, want)
	compareSnapshots(t, third, want)

	// A wider evidence window (the policy's evidence_window_s) counts the
	// older verified resume too.
	s.SetEvidenceWindow(40 * 24 * time.Hour)
	wide, err := s.LoadSnapshot(ctx, now)
	if err != nil {
		t.Fatal(err)
	}
	for _, rj := range wide.Running {
		if rec := rj.Recovery; rj.Project == "nlp" && (rec.ProfileVerifiedResumes != 3 || rec.ProfileFailedResumes != 1) {
			t.Errorf("over 40 days, %s's profile %s: %d verified, %d failed; want 3 and 1", rj.ID, rec.Profile,
				rec.ProfileVerifiedResumes, rec.ProfileFailedResumes)
		}
	}
}

// roundUsage replaces got's usage figures by want's where they differ by
// float rounding only.
func roundUsage(got, want *scheduling.Snapshot) {
	for i := range got.Usage {
		if i < len(want.Usage) && math.Abs(got.Usage[i].DecayedGPUSeconds-want.Usage[i].DecayedGPUSeconds) < 1e-6 {
			got.Usage[i].DecayedGPUSeconds = want.Usage[i].DecayedGPUSeconds
		}
	}
}

func allocOf(as []scheduling.Allocation, jobID string) scheduling.Allocation {
	for _, a := range as {
		if a.JobID == jobID {
			return a
		}
	}
	return scheduling.Allocation{}
}

// compareSnapshots reports the first differing part of two snapshots.
func compareSnapshots(t *testing.T, got, want *scheduling.Snapshot) {
	t.Helper()
	// Request versions are the store's job_queue.seq: each pending job has
	// its own, non-zero; a want without one takes the loaded value, which
	// later loads must then repeat (it moves only on an amendment).
	seen := map[int64]bool{}
	for i, pj := range got.Pending {
		if pj.RequestVersion == 0 || seen[pj.RequestVersion] {
			t.Errorf("pending job %s: request version %d, want a non-zero one of its own", pj.ID, pj.RequestVersion)
		}
		seen[pj.RequestVersion] = true
		if i < len(want.Pending) && want.Pending[i].ID == pj.ID && want.Pending[i].RequestVersion == 0 {
			want.Pending[i].RequestVersion = pj.RequestVersion
		}
	}
	parts := []struct {
		name      string
		got, want any
	}{
		{"Pools", got.Pools, want.Pools}, {"Allocations", got.Allocations, want.Allocations},
		{"Running", got.Running, want.Running}, {"Pending", got.Pending, want.Pending},
		{"Quotas", got.Quotas, want.Quotas}, {"Queues", got.Queues, want.Queues}, {"Usage", got.Usage, want.Usage},
		{"ProtectionWindows", got.ProtectionWindows, want.ProtectionWindows},
	}
	for _, p := range parts {
		if !reflect.DeepEqual(p.got, p.want) {
			t.Errorf("snapshot %s differs:\n got %s\nwant %s", p.name, dump(p.got), dump(p.want))
		}
	}
}

func dump(v any) string { return fmt.Sprintf("%+v", v) }

// TestLoadSnapshotClampsStoredRunSeconds checks that run_seconds stored
// before the API's bound (docs/design.md "job spec bounds") cannot break the
// snapshot: a huge value is read as store.MaxRunSeconds, a huge negative one
// as 0, and every scheduling cycle keeps loading.
func TestLoadSnapshotClampsStoredRunSeconds(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testPool("p", 1, 2)
	s := newStoreWith(t, pool)
	node := pool.Nodes[0]
	huge := submit(t, s, "nlp", "p", 1, 0)
	negative := submit(t, s, "nlp", "p", 1, 0)
	for id, v := range map[string]string{huge.ID: "1e300", negative.ID: "-1e300"} {
		if _, err := s.Pool().Exec(ctx, `UPDATE jobs SET spec = jsonb_set(spec, '{run_seconds}', $2::jsonb) WHERE id = $1`, id, v); err != nil {
			t.Fatal(err)
		}
	}
	storetest.Place(t, s, "c0", t0, place(huge.ID, "p", node.Name, 1000, node.GPUs[0].UUID),
		place(negative.ID, "p", node.Name, 1000, node.GPUs[1].UUID))
	snap, err := s.LoadSnapshot(ctx, t0.Add(time.Minute))
	if err != nil {
		t.Fatalf("LoadSnapshot with huge stored run_seconds: %v", err)
	}
	got := map[string]int64{}
	for _, r := range snap.Running {
		got[r.ID] = r.RunSeconds
	}
	if want := map[string]int64{huge.ID: store.MaxRunSeconds, negative.ID: 0}; !reflect.DeepEqual(got, want) {
		t.Fatalf("running RunSeconds %v, want %v", got, want)
	}
}
