package deploy_test

import (
	"slices"
	"testing"

	"github.com/gpugov/gpugov/internal/policy"
	"github.com/gpugov/gpugov/internal/scheduling"
	"github.com/gpugov/gpugov/internal/vocab"
	"github.com/gpugov/gpugov/replay"
)

// TestReplayPolicyLoads loads deploy/gpugov/replay-policy.yaml, the policy
// `make run` serves its contended replay with, and checks what the replay's
// report relies on: pool alibaba (the replay's) in trial, where only the
// low-risk experiment queue's jobs are preempted; preemption of
// checkpointable jobs only, with a grace a real executor can save in and
// no release without a checkpoint; aging on, its interval the default's
// 600 s divided by the replay's speed; every queue's objective at least a
// second (the loader's unit) and at most the default's divided by the speed,
// rounded up.
func TestReplayPolicyLoads(t *testing.T) {
	p, err := policy.Load("gpugov/replay-policy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if got := p.Stages()["alibaba"]; got != vocab.StageTrial {
		t.Errorf("pools.alibaba.stage = %q, want trial", got)
	}
	sp := p.Scheduling()
	pre := sp.Preemption
	if !pre.Enabled || pre.ReleaseWithoutCheckpoint || pre.GraceSeconds < 10 {
		t.Errorf("preemption = %+v, want enabled, a grace of at least 10 s, nothing released without a checkpoint", pre)
	}
	if want := 600.0 / replay.ContendedSpeed; !sp.Aging.Enabled || sp.Aging.IntervalSeconds != want {
		t.Errorf("aging = %+v, want enabled with interval_s %g (600 s at %d×)", sp.Aging, want, replay.ContendedSpeed)
	}
	queues, err := policy.SchedulingQueues(p.Queues)
	if err != nil {
		t.Fatal(err)
	}
	defaults := map[string]float64{"production": 60, "key-project": 600, "standard": 3600, "experiment": 21600}
	for name, def := range defaults {
		i := slices.IndexFunc(queues, func(q scheduling.Queue) bool { return q.Name == name })
		if i < 0 {
			t.Fatalf("queues: no queue %q", name)
		}
		q := queues[i]
		want := max(1, def/replay.ContendedSpeed)
		if got := q.MaxWait.Seconds(); got < want || got >= want+1 {
			t.Errorf("queue %s max_wait %gs, want %g s rounded up (%g s at %d×)", name, got, want, def, replay.ContendedSpeed)
		}
		if q.LowRisk != (name == "experiment") {
			t.Errorf("queue %s low_risk %v, want only experiment low-risk", name, q.LowRisk)
		}
	}
}
