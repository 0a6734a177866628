package service

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/gpugov/gpugov/internal/policy"
	"github.com/gpugov/gpugov/internal/scheduling"
	"github.com/gpugov/gpugov/internal/vocab"
	"github.com/gpugov/gpugov/store"
	"github.com/gpugov/gpugov/store/storetest"
)

// TestChooseDrillsFromStore: the governance loop's choice reads the
// stored pools, jobs, free GPUs and evidence: a trial pool's running
// checkpointable job of a low-risk queue whose profile has no evidence is
// drilled while a matching GPU is free; not once its drill is recorded
// (the pool is busy, the daily bound reached), nor in an automate pool,
// nor with automatic drills off.
func TestChooseDrillsFromStore(t *testing.T) {
	t.Parallel()
	low := scheduling.Queue{Name: "exp", Tier: vocab.TierExperiment, ServiceShare: 1, LowRisk: true}
	st, _ := storetest.NewStore(t, storetest.Fixture{Queues: []scheduling.Queue{low},
		Pools: []scheduling.Pool{storetest.Pool("t", vocab.StageTrial, 1, 2), storetest.Pool("a", vocab.StageAutomate, 1, 2)}})
	ctx := context.Background()
	now := time.Now().UTC().Truncate(time.Second)
	running := func(pool string) *store.Job {
		t.Helper()
		j := storetest.Submit(t, st, &store.NewJob{Project: "vision", Queue: "exp", Tier: vocab.TierExperiment, SubmitTime: now.Add(-time.Hour),
			Request:  scheduling.ResourceRequest{GPUs: 1, Pool: pool},
			Recovery: scheduling.RecoveryEvidence{Checkpointable: true, CheckpointIntervalSeconds: 60}})
		out := storetest.Place(t, st, "c-"+j.ID, now.Add(-50*time.Minute),
			storetest.Placement(j.ID, pool, storetest.NodeName(pool, 0), 1000, storetest.GPUName(pool, 0, 0)))
		if _, err := st.MarkRunning(ctx, j.ID, out.Placed[0].AllocationID, 0, now.Add(-50*time.Minute)); err != nil {
			t.Fatal(err)
		}
		return j
	}
	j := running("t")
	running("a")
	p := policy.Default()
	p.Drills = &policy.Drills{AutoInTrial: true, PerProfilePerDay: 1}
	s := &Service{store: st}
	got, err := s.chooseDrills(ctx, p, now)
	if err != nil || len(got) != 1 || got[0].JobID != j.ID || got[0].Pool != "t" || got[0].Profile != "vision/simulated" ||
		!strings.Contains(got[0].Reason, "profile vision/simulated has 0 verified resumes, needs 1") {
		t.Fatalf("choices %+v, %v", got, err)
	}
	if _, err := st.OpenDrill(ctx, store.NewDrill{JobID: j.ID, Actor: store.ActorGovernance, Reason: got[0].Reason, At: now}); err != nil {
		t.Fatal(err)
	}
	if got, err := s.chooseDrills(ctx, p, now); err != nil || len(got) != 0 {
		t.Fatalf("with the drill recorded: %+v, %v", got, err)
	}
	p.Drills.AutoInTrial = false
	if got, err := s.chooseDrills(ctx, p, now); err != nil || len(got) != 0 {
		t.Fatalf("automatic drills off: %+v, %v", got, err)
	}
}
