package deploy_test

import (
	"slices"
	"testing"
	"time"

	"github.com/gpugov/gpugov/internal/policy"
	"github.com/gpugov/gpugov/internal/scheduling"
	"github.com/gpugov/gpugov/internal/simulation"
	"github.com/gpugov/gpugov/internal/vocab"
)

// runHeartbeatTimeout is JobWorkflow's default run heartbeat timeout: a
// shorter reclaim observation window would take healthy runs, whose
// heartbeats reach Temporal batched up to 80 % of it apart, for lost ones.
const runHeartbeatTimeout = 30 * time.Second

// TestPolicyExampleLoads loads deploy/gpugov/policy.yaml through the loader
// `gpugov serve --policy` and `gpugov simulate --policy` use and checks what
// `make demo-governance` relies on: pool sim acts (automate); a freshly
// started checkpointable experiment job is a preemption victim (preemption
// on, no minimum runtime, no verified resume required, a grace of seconds,
// only saved work released); production protected and experiment low-risk;
// no protection window covers the demo's queues now; the reclaim scan is on
// with a window above the heartbeat timeout; the demo's finding (an idle
// experiment run) is handled in notify mode with a short notice; the rules
// show all four modes; and the simulator accepts the file.
func TestPolicyExampleLoads(t *testing.T) {
	p, err := policy.Load("gpugov/policy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if got := p.Stages()["sim"]; got != vocab.StageAutomate {
		t.Errorf("pools.sim.stage = %q, want automate", got)
	}
	pre := p.Scheduling().Preemption
	if !pre.Enabled || pre.MinRuntimeSeconds != 0 || pre.RequireVerifiedResume {
		t.Errorf("preemption = %+v, want enabled, min_runtime_s 0, require_verified_resume false", pre)
	}
	if pre.GraceSeconds <= 0 || pre.GraceSeconds > 60 {
		t.Errorf("preemption.grace_s = %v, want a few seconds", pre.GraceSeconds)
	}
	if pre.ReleaseWithoutCheckpoint {
		t.Error("preemption.release_without_checkpoint = true, want false: only saved work is released")
	}
	queues, err := policy.SchedulingQueues(p.Queues)
	if err != nil {
		t.Fatal(err)
	}
	queue := func(name string) scheduling.Queue {
		i := slices.IndexFunc(queues, func(q scheduling.Queue) bool { return q.Name == name })
		if i < 0 {
			t.Fatalf("queues: no queue %q", name)
		}
		return queues[i]
	}
	if q := queue("production"); !q.Protected || q.Tier != vocab.TierProduction {
		t.Errorf("queue production = %+v, want tier production, protected", q)
	}
	if q := queue("experiment"); !q.LowRisk || q.Tier != vocab.TierExperiment || !p.LowRisk("experiment") {
		t.Errorf("queue experiment = %+v, want tier experiment, low-risk", q)
	}
	if len(p.ProtectionWindows) == 0 {
		t.Error("protection_windows: want one example window")
	}
	for _, q := range []string{"experiment", "production"} {
		if w := p.InProtectionWindow(q, time.Now()); w != "" {
			t.Errorf("protection window %q covers queue %s now: the demo's preemption and reclaim would be blocked", w, q)
		}
	}
	r := p.Reclaim
	if !r.Enabled {
		t.Error("reclaim.enabled = false, want the scan on")
	}
	if w := policy.Seconds(r.ObservationWindowSeconds); w <= runHeartbeatTimeout {
		t.Errorf("reclaim.observation_window_s = %s, want above the %s run heartbeat timeout", w, runHeartbeatTimeout)
	}
	if m := p.ConfiguredMode("sim", "experiment", vocab.ClassIdle); m != vocab.ModeNotify {
		t.Errorf("mode of an idle experiment run in pool sim = %s, want notify (the demo waits for its notice and release)", m)
	}
	if w := policy.Seconds(r.NotifyWindowSeconds); w > time.Minute {
		t.Errorf("reclaim.notify_window_s = %s, want at most a minute (the demo waits it out)", w)
	}
	var modes []vocab.ReclaimMode
	for _, rule := range r.Rules {
		modes = append(modes, rule.Mode)
	}
	for _, m := range vocab.ReclaimModes {
		if !slices.Contains(modes, m) {
			t.Errorf("reclaim.rules: no rule in mode %s; the example should show every mode", m)
		}
	}
	if _, err := simulation.FromPolicy(p); err != nil {
		t.Errorf("simulation.FromPolicy: %v", err)
	}
}
