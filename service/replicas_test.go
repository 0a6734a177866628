package service

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gpugov/gpugov/internal/policy"
	"github.com/gpugov/gpugov/internal/scheduling"
	"github.com/gpugov/gpugov/internal/vocab"
	"github.com/gpugov/gpugov/store"
	"github.com/gpugov/gpugov/store/storetest"
)

// The per-process passes of `gpugov serve` run by two replicas at once on
// one database (docs/design.md §10 "Several replicas"): each replica is a
// Service on a store of its own (its own connection pool), as two processes.

// replicaPolicy is a start policy that writes something of every kind:
// queues (one low-risk), a quota, a pool stage.
func replicaPolicy() *policy.Policy {
	p := policy.Default()
	p.Queues = []policy.Queue{{Name: "standard", Tier: "standard", Share: 2},
		{Name: "experiment", Tier: "experiment", Share: 1, LowRisk: true}}
	p.Quotas = []policy.Quota{{Project: "vision", Pool: "p", NominalMilli: 1000}}
	p.Pools = map[string]policy.Pool{"p": {Stage: vocab.StageTrial}}
	return p
}

// startWrites is what applying the start policy wrote: the audit entries
// by action and subject, the pool stage changes, the active versions.
func startWrites(t *testing.T, st *store.Store) string {
	t.Helper()
	ctx := context.Background()
	audit, _, err := st.ListAudit(ctx, store.AuditFilter{Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	count := map[string]int{}
	for _, a := range audit {
		count[a.Action+" "+a.Subject]++
	}
	hist, err := st.PoolStageHistory(ctx, "p", 100)
	if err != nil {
		t.Fatal(err)
	}
	hash, err := st.ActivePolicyHash(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("audit %v; %d stage changes of p; active %s", count, len(hist), hash)
}

// TestStartPolicyTwoReplicasAtOnce: two replicas applying the same start
// policy at the same moment write what one replica writes — one version
// switch, one audit entry per queue flag, quota and stage, one stage
// change — and both have it in force; a third started later writes nothing.
func TestStartPolicyTwoReplicasAtOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	pools := []scheduling.Pool{storetest.Pool("p", vocab.StageObserve, 1, 2)}
	replica := func(st *store.Store) *Service {
		return &Service{cfg: Config{Logger: logger}, store: st, static: replicaPolicy()}
	}

	single, _ := storetest.NewStore(t, storetest.Fixture{Pools: pools})
	if err := replica(single).applyStartPolicy(ctx); err != nil {
		t.Fatal(err)
	}
	want := startWrites(t, single)

	for round := range 3 {
		st, url := storetest.NewStore(t, storetest.Fixture{Pools: pools})
		other := storetest.OpenStore(t, url, storetest.Fixture{})
		a, b := replica(st), replica(other)
		var wg sync.WaitGroup
		errs := make([]error, 2)
		gate := make(chan struct{})
		for i, s := range []*Service{a, b} {
			wg.Go(func() {
				<-gate
				errs[i] = s.applyStartPolicy(ctx)
			})
		}
		close(gate)
		wg.Wait()
		if errs[0] != nil || errs[1] != nil {
			t.Fatalf("round %d: start policy: %v, %v", round, errs[0], errs[1])
		}
		if got := startWrites(t, st); got != want {
			t.Errorf("round %d: two replicas at once wrote\n  %s\none replica writes\n  %s", round, got, want)
		}
		if a.currentPolicy().Hash() != b.currentPolicy().Hash() {
			t.Errorf("round %d: the replicas have %s and %s in force", round, a.currentPolicy().Hash(), b.currentPolicy().Hash())
		}
		if err := replica(st).applyStartPolicy(ctx); err != nil {
			t.Fatal(err)
		}
		if got := startWrites(t, st); got != want {
			t.Errorf("round %d: a third replica's start wrote more:\n  %s\nwant\n  %s", round, got, want)
		}
	}
}

// TestDrillPassTwoReplicasAtOnce: two replicas' drill passes at the same
// moment in a trial pool with two drillable jobs open one drill and start
// its workflow once (at most one drill per pool at a time); a pass while
// another replica holds the drill-pass lock is skipped, not run.
func TestDrillPassTwoReplicasAtOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	low := scheduling.Queue{Name: "exp", Tier: vocab.TierExperiment, ServiceShare: 1, LowRisk: true}
	p := policy.Default()
	p.Drills = &policy.Drills{AutoInTrial: true, PerProfilePerDay: 5}
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	for round := range 3 {
		st, url := storetest.NewStore(t, storetest.Fixture{Queues: []scheduling.Queue{low},
			Pools: []scheduling.Pool{storetest.Pool("t", vocab.StageTrial, 1, 4)}})
		now := time.Now().UTC().Truncate(time.Second)
		for i := range 2 {
			j := storetest.Submit(t, st, &store.NewJob{Project: "vision", Queue: "exp", Tier: vocab.TierExperiment, SubmitTime: now.Add(-time.Hour),
				Request:  scheduling.ResourceRequest{GPUs: 1, Pool: "t"},
				Recovery: scheduling.RecoveryEvidence{Checkpointable: true, CheckpointIntervalSeconds: 60}})
			out := storetest.Place(t, st, fmt.Sprintf("c%d-%s", i, j.ID), now.Add(-50*time.Minute),
				storetest.Placement(j.ID, "t", storetest.NodeName("t", 0), 1000, storetest.GPUName("t", 0, i)))
			if _, err := st.MarkRunning(ctx, j.ID, out.Placed[0].AllocationID, 0, now.Add(-50*time.Minute)); err != nil {
				t.Fatal(err)
			}
		}
		var started atomic.Int32
		replica := func(st *store.Store) *Service {
			s := &Service{cfg: Config{Logger: logger}, store: st, static: p}
			s.startDrill = func(context.Context, string, string, string, string) error {
				started.Add(1)
				time.Sleep(50 * time.Millisecond) // a Temporal call: the other pass runs meanwhile
				return nil
			}
			return s
		}
		a, b := replica(st), replica(storetest.OpenStore(t, url, storetest.Fixture{}))
		var wg sync.WaitGroup
		ran := make([]bool, 2)
		errs := make([]error, 2)
		gate := make(chan struct{})
		for i, s := range []*Service{a, b} {
			wg.Go(func() {
				<-gate
				ran[i], errs[i] = s.lockedDrillPass(ctx, now)
			})
		}
		close(gate)
		wg.Wait()
		if errs[0] != nil || errs[1] != nil || !(ran[0] || ran[1]) {
			t.Fatalf("round %d: passes ran %v: %v, %v", round, ran, errs[0], errs[1])
		}
		drills, err := st.DrillsSince(ctx, now.Add(-time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, c := range drills {
			n += c
		}
		if n != 1 || started.Load() != 1 {
			t.Errorf("round %d: passes ran %v: %d drills recorded, %d workflows started; want 1 and 1", round, ran, n, started.Load())
		}
	}

	// A pass while another replica's pass holds the lock is skipped.
	st, url := storetest.NewStore(t, storetest.Fixture{Queues: []scheduling.Queue{low}})
	holding, release := make(chan struct{}), make(chan struct{})
	go func() {
		_ = st.WithLock(ctx, store.LockDrillPass, func(context.Context) error {
			close(holding)
			<-release
			return nil
		})
	}()
	<-holding
	s := &Service{cfg: Config{Logger: logger}, store: storetest.OpenStore(t, url, storetest.Fixture{}), static: p}
	ran, err := s.lockedDrillPass(ctx, time.Now())
	close(release)
	if ran || err != nil {
		t.Errorf("pass while another replica holds the lock: ran %v, %v; want skipped", ran, err)
	}
}
