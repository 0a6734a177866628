package simulation

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/gpugov/gpugov/internal/scheduling"
	"github.com/gpugov/gpugov/internal/vocab"
)

func TestLoadConfigGood(t *testing.T) {
	c, err := LoadConfig("testdata/policy_good.yaml")
	if err != nil {
		t.Fatal(err)
	}
	d := DefaultConfig()
	if c.Seed != 7 || c.Stage != vocab.StageObserve {
		t.Errorf("seed %d stage %s", c.Seed, c.Stage)
	}
	if c.Policy.Preemption.MinRuntimeSeconds != 10 || c.Policy.Preemption.SaveRestoreSeconds != 5 {
		t.Errorf("preemption %+v", c.Policy.Preemption)
	}
	// Fields the file leaves out keep their defaults.
	if c.Policy.Preemption.MaxPreemptions != d.Policy.Preemption.MaxPreemptions ||
		!c.Policy.Preemption.RequireVerifiedResume || c.Policy.Aging != d.Policy.Aging ||
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
	if !reflect.DeepEqual(c.Recovery.Tiers, []vocab.Tier{vocab.TierExperiment}) ||
		c.Recovery.Probability != 1 || c.Recovery.CheckpointIntervalSeconds != 50 {
		t.Errorf("recovery %+v", c.Recovery)
	}
	if !strings.HasPrefix(c.Policy.Version, "file:") || len(c.Policy.Version) != len("file:")+12 {
		t.Errorf("version %q, want file:<12 hex>", c.Policy.Version)
	}
	named, err := ParseConfig([]byte("version: candidate-3\n"))
	if err != nil || named.Policy.Version != "candidate-3" {
		t.Errorf("named version: %q, %v", named.Policy.Version, err)
	}
	empty, err := ParseConfig(nil)
	if err != nil || !reflect.DeepEqual(empty.Queues, d.Queues) {
		t.Errorf("empty file: %v", err)
	}
}

func TestLoadConfigErrors(t *testing.T) {
	cases := []struct{ name, yaml, want string }{
		{"unknown field", "preemption:\n  min_runtime: 5\n", "field min_runtime not found"},
		{"wrong type", "aging:\n  enabled: true\n  interval_s: soon\n", "line 3 (aging.interval_s): cannot unmarshal"},
		{"wrong type in list", "queues:\n  - name: production\n    max_wait_s: [1]\n", "(queues[0].max_wait_s)"},
		{"syntax", "seed: [1\n", "line"},
		{"negative", "preemption:\n  window_s: -1\n", "preemption.window_s: -1 is negative"},
		{"bad tier base", "tier_base:\n  gold: 5\n", `tier_base.gold: unknown tier "gold"`},
		{"bad stage", "stage: later\n", `stage: "later" is not observe, trial or automate`},
		{"bad queue tier", "queues:\n  - {name: production, tier: top}\n", `queues[0].tier: unknown tier "top"`},
		{"missing queue", "queues:\n  - {name: production, tier: production}\n", `queues: no queue named "key-project"`},
		{"duplicate queue", "queues:\n  - {name: production, tier: production}\n  - {name: production, tier: production}\n", "queues[1].name: \"production\" repeats queues[0]"},
		{"probability", "recovery:\n  probability: 1.5\n", "recovery.probability: 1.5 is outside 0..1"},
		{"recovery tier", "recovery:\n  tiers: [gold]\n", "recovery.tiers[0]: unknown tier"},
		{"quota project", "quotas:\n  - {nominal_milli: 1000}\n", "quotas[0].project: is empty"},
		{"cycle", "cycle_interval_s: 0\n", "cycle_interval_s: 0, want at least 1"},
		{"projects", "projects: 0\n", "projects: 0, want at least 1"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "policy.yaml")
			if err := os.WriteFile(path, []byte(tc.yaml), 0o644); err != nil {
				t.Fatal(err)
			}
			_, err := LoadConfig(path)
			if err == nil {
				t.Fatalf("no error, want %q", tc.want)
			}
			if !strings.HasPrefix(err.Error(), "policy file "+path+": ") || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %q, want the file and %q", err, tc.want)
			}
		})
	}
}

func TestRunRejectsInvalidConfig(t *testing.T) {
	cfg := DefaultConfig()
	cfg.CycleIntervalSeconds = 0 // would re-arm the timer at the same instant forever
	if _, err := Run(Input{}, cfg, nil); err == nil || !strings.Contains(err.Error(), "cycle_interval_s") {
		t.Fatalf("error %v, want cycle_interval_s", err)
	}
	cfg = DefaultConfig()
	cfg.Queues = cfg.Queues[:3]
	if _, err := Run(Input{}, cfg, nil); err == nil || !strings.Contains(err.Error(), `no queue named "experiment"`) {
		t.Fatalf("error %v, want the missing experiment queue", err)
	}
}
