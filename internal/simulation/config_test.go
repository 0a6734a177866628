package simulation

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/gpugov/gpugov/internal/policy"
	"github.com/gpugov/gpugov/internal/scheduling"
	"github.com/gpugov/gpugov/internal/vocab"
)

func TestFromPolicyGood(t *testing.T) {
	p, err := policy.Load("testdata/policy_good.yaml")
	if err != nil {
		t.Fatal(err)
	}
	c, err := FromPolicy(p)
	if err != nil {
		t.Fatal(err)
	}
	d := DefaultConfig()
	if c.Seed != 7 || c.Stage != vocab.StageObserve {
		t.Errorf("seed %d stage %s, want 7 and observe (pools.alibaba.stage)", c.Seed, c.Stage)
	}
	if c.Policy.Preemption.MinRuntimeSeconds != 10 || c.Policy.Preemption.SaveRestoreSeconds != 5 {
		t.Errorf("preemption %+v", c.Policy.Preemption)
	}
	// Fields the file leaves out keep their defaults.
	if c.Policy.Preemption.MaxPreemptions != d.Policy.Preemption.MaxPreemptions ||
		!c.Policy.Preemption.RequireVerifiedResume || !reflect.DeepEqual(c.Policy.Aging, d.Policy.Aging) ||
		!reflect.DeepEqual(c.Policy.TierBase, d.Policy.TierBase) || c.Projects != d.Projects ||
		c.CycleIntervalSeconds != d.CycleIntervalSeconds || c.Recovery.VerifiedResumes != 1 {
		t.Errorf("defaults not kept: %+v", c)
	}
	if c.Queues[0].MaxWait != 30*time.Second || !c.Queues[0].Protected || !c.Queues[3].LowRisk ||
		c.Queues[3].MaxWait != 2*time.Hour {
		t.Errorf("queues %+v", c.Queues)
	}
	wantQuota := []scheduling.Quota{{Project: "project-01", Pool: "alibaba", NominalMilli: 4000}}
	if !reflect.DeepEqual(c.Quotas, wantQuota) {
		t.Errorf("quotas %+v, want %+v", c.Quotas, wantQuota)
	}
	if !reflect.DeepEqual(c.ProjectWeights, map[string]float64{"project-01": 3}) {
		t.Errorf("project weights %v", c.ProjectWeights)
	}
	if !reflect.DeepEqual(c.Recovery.Tiers, []vocab.Tier{vocab.TierExperiment}) ||
		c.Recovery.Probability != 1 || c.Recovery.CheckpointIntervalSeconds != 50 {
		t.Errorf("recovery %+v", c.Recovery)
	}
	if c.Policy.Version != p.Hash() || len(c.Policy.Version) != 64 {
		t.Errorf("policy version %q, want the policy hash %s", c.Policy.Version, p.Hash())
	}
	if d.Policy.Version != policy.Default().Hash() || !reflect.DeepEqual(d.Queues, mustQueues(t, policy.DefaultQueues())) {
		t.Errorf("DefaultConfig: version %q, queues %+v", d.Policy.Version, d.Queues)
	}
}

func mustQueues(t *testing.T, qs []policy.Queue) []scheduling.Queue {
	t.Helper()
	out, err := policy.SchedulingQueues(qs)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestFromPolicyRejectsWhatCannotBeSimulated: a policy that loads can still
// lack what the simulator needs, a queue named after each tier.
func TestFromPolicyRejectsWhatCannotBeSimulated(t *testing.T) {
	p := policy.Default()
	p.Queues = []policy.Queue{{Name: "production", Tier: "production"}}
	if _, err := FromPolicy(p); err == nil || !strings.Contains(err.Error(), `queues: no queue named "key-project"`) {
		t.Fatalf("error %v, want the missing key-project queue", err)
	}
	p = policy.Default()
	p.Queues = []policy.Queue{{Name: "production", Tier: "standard"}, {Name: "key-project", Tier: "key-project"},
		{Name: "standard", Tier: "standard"}, {Name: "experiment", Tier: "experiment"}}
	if _, err := FromPolicy(p); err == nil || !strings.Contains(err.Error(), "queues[0].tier") {
		t.Fatalf("error %v, want queues[0].tier", err)
	}
}

func TestRunRejectsInvalidConfig(t *testing.T) {
	cfg := DefaultConfig()
	cfg.CycleIntervalSeconds = 0 // would re-arm the timer at the same instant forever
	if _, err := Run(Input{}, cfg, nil); err == nil || !strings.Contains(err.Error(), "simulation.cycle_interval_s") {
		t.Fatalf("error %v, want simulation.cycle_interval_s", err)
	}
	cfg = DefaultConfig()
	cfg.Queues = cfg.Queues[:3]
	if _, err := Run(Input{}, cfg, nil); err == nil || !strings.Contains(err.Error(), `no queue named "experiment"`) {
		t.Fatalf("error %v, want the missing experiment queue", err)
	}
}

// TestFromPolicyQueueAging checks that a queue's aging ceiling and cap reach
// the simulator's scheduling policy as they reach serve's (Policy.Scheduling),
// so both plan with the same rule.
func TestFromPolicyQueueAging(t *testing.T) {
	p, err := policy.Parse("p.yaml", []byte("version: gpugov.policy/v1\nqueues:\n"+
		"  - {name: production, tier: production}\n  - {name: key-project, tier: key-project}\n"+
		"  - {name: standard, tier: standard, aging_ceiling_tier: key-project, aging_cap_points: 15000}\n"+
		"  - {name: experiment, tier: experiment}\n"))
	if err != nil {
		t.Fatal(err)
	}
	c, err := FromPolicy(p)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]scheduling.QueueAging{"standard": {HasCap: true, CapPoints: 15000, HasCeiling: true, CeilingTier: vocab.TierKeyProject}}
	if !reflect.DeepEqual(c.Policy.Aging.Queues, want) || !reflect.DeepEqual(c.Policy.Aging, p.Scheduling().Aging) {
		t.Fatalf("simulator aging %+v, want serve's %+v", c.Policy.Aging, p.Scheduling().Aging)
	}
}

// TestFromPolicyPhillyOptions: the Philly mimic's simulation options reach
// the Config, and the default policy sets none of them.
func TestFromPolicyPhillyOptions(t *testing.T) {
	pol, err := policy.Load("../../deploy/gpugov/philly-fifo.yaml")
	if err != nil {
		t.Fatal(err)
	}
	c, err := FromPolicy(pol)
	if err != nil {
		t.Fatal(err)
	}
	if c.BackgroundStepS != 3600 || !c.BackgroundRandom || c.BackgroundByQuota || c.LocalityRelaxS != 1800 || c.CyclePeriodSeconds != 60 {
		t.Errorf("philly-fifo: background %d random %v by quota %v relax %d period %d",
			c.BackgroundStepS, c.BackgroundRandom, c.BackgroundByQuota, c.LocalityRelaxS, c.CyclePeriodSeconds)
	}
	d := DefaultConfig()
	if d.BackgroundStepS != 0 || d.BackgroundRandom || d.BackgroundByQuota || d.LocalityRelaxS != 0 || d.CyclePeriodSeconds != 0 {
		t.Errorf("default config sets a Philly option: %+v", d)
	}
	bad := d
	bad.LocalityRelaxS = -1
	if err := bad.Validate(); err == nil || !strings.Contains(err.Error(), "simulation.locality_relax_s") {
		t.Errorf("negative relaxation: %v", err)
	}
}
