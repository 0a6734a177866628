package deploy_test

import (
	"slices"
	"testing"
	"time"

	"github.com/gpugov/gpugov/internal/governance"
	"github.com/gpugov/gpugov/internal/scheduling"
	"github.com/gpugov/gpugov/internal/simulation"
	"github.com/gpugov/gpugov/internal/vocab"
)

// runHeartbeatTimeout is JobWorkflow's default run heartbeat timeout: a
// shorter reclaim observation window would take healthy runs, whose
// heartbeats reach Temporal batched up to 80 % of it apart, for lost ones.
const runHeartbeatTimeout = 30 * time.Second

// TestGovernanceExampleLoads loads deploy/gpugov/governance.yaml through the
// loader `gpugov serve --governance-file` uses and checks what
// `make demo-governance` relies on: pool sim acts (automate), experiment is
// low-risk, no protection window covers the demo's queues now, the reclaim
// scan is on with a window above the heartbeat timeout, the demo's finding
// (an idle experiment run) is handled in notify mode with a short notice,
// and the rules show all four modes.
func TestGovernanceExampleLoads(t *testing.T) {
	cfg, err := governance.Load("gpugov/governance.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if got := cfg.Stages()["sim"]; got != vocab.StageAutomate {
		t.Errorf("pools.sim.stage = %q, want automate", got)
	}
	if !cfg.LowRisk("experiment") {
		t.Errorf("low_risk_queues = %v, want experiment among them", cfg.LowRiskQueues)
	}
	if len(cfg.ProtectionWindows) == 0 {
		t.Error("protection_windows: want one example window")
	}
	for _, q := range []string{"experiment", "production"} {
		if w := cfg.InProtectionWindow(q, time.Now()); w != "" {
			t.Errorf("protection window %q covers queue %s now: the demo's preemption and reclaim would be blocked", w, q)
		}
	}
	r := cfg.Reclaim
	if !r.Enabled {
		t.Error("reclaim.enabled = false, want the scan on")
	}
	if w := governance.Seconds(r.ObservationWindowSeconds); w <= runHeartbeatTimeout {
		t.Errorf("reclaim.observation_window_seconds = %s, want above the %s run heartbeat timeout", w, runHeartbeatTimeout)
	}
	if m := cfg.ConfiguredMode("sim", "experiment", vocab.ClassIdle); m != vocab.ModeNotify {
		t.Errorf("mode of an idle experiment run in pool sim = %s, want notify (the demo waits for its notice and release)", m)
	}
	if w := governance.Seconds(r.NotifyWindowSeconds); w > time.Minute {
		t.Errorf("reclaim.notify_window_seconds = %s, want at most a minute (the demo waits it out)", w)
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
}

// TestDemoPolicyLoads loads deploy/gpugov/demo-policy.yaml through the loader
// `gpugov serve --policy` uses and checks that a freshly started
// checkpointable experiment job is a preemption victim under it: preemption
// on, no minimum runtime, no verified resume required, a grace period of
// seconds, production protected and experiment low-risk.
func TestDemoPolicyLoads(t *testing.T) {
	cfg, err := simulation.LoadConfig("gpugov/demo-policy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	p := cfg.Policy.Preemption
	if !p.Enabled || p.MinRuntimeSeconds != 0 || p.RequireVerifiedResume {
		t.Errorf("preemption = %+v, want enabled, min_runtime_s 0, require_verified_resume false", p)
	}
	if p.GraceSeconds <= 0 || p.GraceSeconds > 60 {
		t.Errorf("preemption.grace_s = %v, want a few seconds", p.GraceSeconds)
	}
	if p.ReleaseWithoutCheckpoint {
		t.Error("preemption.release_without_checkpoint = true, want false: only saved work is released")
	}
	queue := func(name string) scheduling.Queue {
		i := slices.IndexFunc(cfg.Queues, func(q scheduling.Queue) bool { return q.Name == name })
		if i < 0 {
			t.Fatalf("queues: no queue %q", name)
		}
		return cfg.Queues[i]
	}
	if q := queue("production"); !q.Protected || q.Tier != vocab.TierProduction {
		t.Errorf("queue production = %+v, want tier production, protected", q)
	}
	if q := queue("experiment"); !q.LowRisk || q.Tier != vocab.TierExperiment {
		t.Errorf("queue experiment = %+v, want tier experiment, low-risk", q)
	}
}
