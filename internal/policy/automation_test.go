package policy

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/gpugov/gpugov/internal/vocab"
)

// TestDrillsAndAutomationLoad: the drill rule and the readiness rule are
// read from the file over their defaults, are part of the hash, and their
// bad values are refused naming the field.
func TestDrillsAndAutomationLoad(t *testing.T) {
	const v = "version: gpugov.policy/v1\n"
	d := Default()
	if got := d.DrillRule(); got != DefaultDrills() || got.AutoInTrial || got.PerProfilePerDay != 1 {
		t.Errorf("default drill rule %+v", got)
	}
	if got := d.AutomationRule(); got != DefaultAutomation() || got.Readiness.WindowSeconds != 86400 ||
		got.RecoveryLossBudgetGPUSecondsPerDay != 28800 || got.Readiness.MinReasonShare != 0.8 {
		t.Errorf("default automation rule %+v", got)
	}
	p, err := Parse("p.yaml", []byte(v+`drills: {auto_in_trial: true, per_profile_per_day: 2}
automation:
  recovery_loss_budget_gpu_s_per_day: 3600
  readiness: {window_s: 600, min_observed_share: 0.5, max_starving_jobs: 1}
`))
	if err != nil {
		t.Fatal(err)
	}
	if got := p.DrillRule(); !got.AutoInTrial || got.PerProfilePerDay != 2 {
		t.Errorf("drills %+v", got)
	}
	a := p.AutomationRule()
	if a.RecoveryLossBudgetGPUSecondsPerDay != 3600 || a.Readiness.WindowSeconds != 600 || a.Readiness.MinObservedShare != 0.5 ||
		a.Readiness.MaxStarvingJobs != 1 || a.Readiness.MinReasonShare != DefaultMinReasonShare ||
		a.Readiness.FreshnessSeconds != DefaultFreshnessSeconds {
		t.Errorf("automation %+v: want the file's values over the defaults", a)
	}
	if p.Hash() == d.Hash() {
		t.Error("drills and automation are not part of the hash")
	}
	groups := Groups(Diff(d, p))
	if len(groups) != 2 || groups[0] != vocab.PolicyPreemption || groups[1] != vocab.PolicyAutomationStage {
		t.Errorf("diff groups %v, want preemption (drills) and automation_stage (automation)", groups)
	}
	q, err := FromCanonical(p.Canonical())
	if err != nil || q.Hash() != p.Hash() || q.DrillRule() != p.DrillRule() || q.AutomationRule() != a {
		t.Errorf("decoded version %+v (%v), want the same rules and hash", q, err)
	}
	for _, tc := range []struct{ name, file, want string }{
		{"zero per day", v + "drills: {per_profile_per_day: 0}\n", "p.yaml:2: drills.per_profile_per_day: 0, want at least 1"},
		{"unknown drills field", v + "drills: {auto: true}\n", "p.yaml:2: drills.auto: unknown field"},
		{"negative budget", v + "automation: {recovery_loss_budget_gpu_s_per_day: -1}\n",
			"p.yaml:2: automation.recovery_loss_budget_gpu_s_per_day: -1 is negative"},
		{"share over one", v + "automation:\n  readiness: {min_reason_share: 1.5}\n",
			"p.yaml:3: automation.readiness.min_reason_share: 1.5 is outside 0..1"},
		{"zero window", v + "automation:\n  readiness: {window_s: 0}\n", "p.yaml:3: automation.readiness.window_s: 0, want > 0"},
		{"window over two report windows", v + "automation:\n  readiness: {window_s: 3888001}\n",
			"p.yaml:3: automation.readiness.window_s: 3888001 s is longer than 3888000 s (45 days: readiness reads two windows, a queue report at most 90 days)"},
		{"fractional count", v + "automation:\n  readiness: {max_starving_jobs: 0.5}\n",
			"p.yaml:3: automation.readiness.max_starving_jobs: want a whole number"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse("p.yaml", []byte(tc.file))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want %q", err, tc.want)
			}
		})
	}
}

// TestVersionWithoutDrillsKeepsItsHash: a version stored before drills and
// automation existed decodes with neither, reads the defaults, and
// re-encodes to the same body, so its hash still matches its key.
func TestVersionWithoutDrillsKeepsItsHash(t *testing.T) {
	old := Default()
	old.Drills, old.Automation = nil, nil
	body := old.Canonical()
	var doc map[string]any
	if err := json.Unmarshal(body, &doc); err != nil {
		t.Fatal(err)
	}
	if _, ok := doc["drills"]; ok {
		t.Fatalf("a policy without drills writes them: %s", body)
	}
	q, err := FromCanonical(body)
	if err != nil || q.Hash() != old.Hash() || q.Drills != nil {
		t.Fatalf("decoded %+v (%v): want the same hash and no drills", q, err)
	}
	if q.DrillRule() != DefaultDrills() || q.AutomationRule() != DefaultAutomation() {
		t.Errorf("rules %+v %+v, want the defaults", q.DrillRule(), q.AutomationRule())
	}
}

// TestProtectionExplicit: a queue whose entry sets protected or low_risk,
// to true or false, is explicit; one that sets neither is not, and the
// flag survives the stored version.
func TestProtectionExplicit(t *testing.T) {
	p, err := Parse("p.yaml", []byte(`version: gpugov.policy/v1
queues:
  - {name: prod, tier: production, protected: true}
  - {name: std, tier: standard, protected: false}
  - {name: exp, tier: experiment, low_risk: false}
  - {name: key, tier: key-project}
`))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{"prod": true, "std": true, "exp": true, "key": false}
	q, err := FromCanonical(p.Canonical())
	if err != nil {
		t.Fatal(err)
	}
	for i, qu := range p.Queues {
		if qu.ProtectionExplicit != want[qu.Name] || q.Queues[i].ProtectionExplicit != want[qu.Name] {
			t.Errorf("queue %s: explicit %v (stored %v), want %v", qu.Name, qu.ProtectionExplicit, q.Queues[i].ProtectionExplicit, want[qu.Name])
		}
	}
	if _, err := Parse("p.yaml", []byte("version: gpugov.policy/v1\nqueues:\n  - {name: a, tier: standard, protection_explicit: true}\n")); err == nil {
		t.Error("a file may not write protection_explicit")
	}
}
