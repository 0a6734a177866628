package policy

import (
	"context"
	"errors"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/gpugov/gpugov/internal/scheduling"
	"github.com/gpugov/gpugov/internal/vocab"
)

func mustLoad(t *testing.T, path string) *Policy {
	t.Helper()
	p, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestLoadGoodFile(t *testing.T) {
	p := mustLoad(t, "testdata/good.yaml")
	d := Default()
	if p.Version != FormatV1 || p.TierBase["experiment"] != 5 || p.TierBase["production"] != d.TierBase["production"] {
		t.Errorf("tier_base %v: want experiment 5 and the other tiers' defaults", p.TierBase)
	}
	if p.Aging != (Aging{Enabled: true, StepPoints: 50, IntervalSeconds: 300, CapPoints: 1000}) {
		t.Errorf("aging %+v", p.Aging)
	}
	if !p.FairShare.Enabled || p.FairShare.Weight != 500 || p.FairShare.HalfLifeSeconds != d.FairShare.HalfLifeSeconds ||
		!reflect.DeepEqual(p.FairShare.ProjectWeights, map[string]float64{"vision": 3, "nlp": 1}) {
		t.Errorf("fair_share %+v", p.FairShare)
	}
	// Fields left out keep their defaults.
	if p.Reservation.Depth != 2 || !p.Reservation.Enabled || p.Preemption.GraceSeconds != 30 ||
		p.Preemption.MinRuntimeSeconds != d.Preemption.MinRuntimeSeconds || p.Preemption.VerifyResumeTimeoutSeconds != 600 ||
		p.Preemption.RecomputeTimeoutSeconds != DefaultRecomputeTimeoutSeconds {
		t.Errorf("reservation %+v preemption %+v", p.Reservation, p.Preemption)
	}
	wantQueues := []Queue{{Name: "prod", Tier: "production", Share: 4, MaxWaitSeconds: 60, Protected: true, ProtectionExplicit: true},
		{Name: "exp", Tier: "experiment", Share: 1, LowRisk: true, ProtectionExplicit: true, MinShare: 0.2, MaxShare: 0.5}}
	if !reflect.DeepEqual(p.Queues, wantQueues) || !reflect.DeepEqual(p.LowRiskQueues(), []string{"exp"}) || !p.LowRisk("exp") || p.LowRisk("prod") {
		t.Errorf("queues %+v", p.Queues)
	}
	if sq, err := SchedulingQueues(p.Queues); err != nil || sq[1].MinShare != 0.2 || sq[1].MaxShare != 0.5 || sq[0].MinShare != 0 || sq[0].MaxShare != 0 {
		t.Errorf("scheduling queues %+v (%v), want exp's min_share 0.2 and max_share 0.5, prod none", sq, err)
	}
	// The shares are part of the stored version: serve's policy in force is decoded from it.
	if q, err := FromCanonical(p.Canonical()); err != nil || q.Queues[1].MinShare != 0.2 || q.Queues[1].MaxShare != 0.5 {
		t.Errorf("queues decoded from the stored version %+v (%v), want exp's shares kept", q, err)
	}
	if !reflect.DeepEqual(p.SchedulingQuotas(), []scheduling.Quota{{Project: "vision", Pool: "a100", NominalMilli: 8000, BorrowingLimitMilli: 2000}}) {
		t.Errorf("quotas %+v", p.Quotas)
	}
	if !reflect.DeepEqual(p.Stages(), map[string]vocab.AutomationStage{"a100": vocab.StageTrial}) {
		t.Errorf("stages %v", p.Stages())
	}
	in := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	if p.InProtectionWindow("prod", in) != "launch" || p.InProtectionWindow("exp", in) != "" || p.InProtectionWindow("prod", in.Add(12*time.Hour)) != "" {
		t.Error("protection window not applied as [start, end) to its queues")
	}
	if !p.Reclaim.Enabled || p.Reclaim.NotifyWindowSeconds != 600 || p.Reclaim.ObservationWindowSeconds != DefaultObservationWindowSeconds ||
		p.Reclaim.DefaultMode != vocab.ModeReport || p.Reclaim.IdleMaxBursts != DefaultIdleMaxBursts ||
		p.Reclaim.IdleMemoryMiB != DefaultIdleMemoryMiB || p.Reclaim.DisputeWindowSeconds != DefaultDisputeWindowSeconds {
		t.Errorf("reclaim %+v", p.Reclaim)
	}
	for _, tc := range []struct {
		pool, queue string
		class       vocab.ReclaimClass
		want        vocab.ReclaimMode
	}{{"a100", "exp", vocab.ClassIdle, vocab.ModeAuto}, {"a100", "exp", vocab.ClassFailed, vocab.ModeNotify}, {"other", "exp", vocab.ClassFailed, vocab.ModeReport}} {
		if got := p.ConfiguredMode(tc.pool, tc.queue, tc.class); got != tc.want {
			t.Errorf("mode(%s,%s,%s) = %s, want %s", tc.pool, tc.queue, tc.class, got, tc.want)
		}
	}
	s := p.Simulation
	if s.Pool != "a100" || s.Seed != 9 || s.Projects != d.Simulation.Projects || !reflect.DeepEqual(s.Recovery.Tiers, []string{"experiment"}) ||
		s.Recovery.Probability != 0.25 || s.Recovery.CheckpointIntervalSeconds != d.Simulation.Recovery.CheckpointIntervalSeconds {
		t.Errorf("simulation %+v", s)
	}
	sp := p.Scheduling()
	if sp.Version != p.Hash() || sp.TierBase[vocab.TierExperiment] != 5 || sp.Preemption.GraceSeconds != 30 || sp.FairShare.Weight != 500 {
		t.Errorf("scheduling policy %+v, want version %s and the file's rules", sp, p.Hash())
	}
}

// TestVersionOnlyIsTheDefault: a file with nothing but its version resolves
// to Default, with Default's hash.
func TestVersionOnlyIsTheDefault(t *testing.T) {
	p, err := Parse("p.yaml", []byte("version: gpugov.policy/v1\n"))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(p, Default()) || p.Hash() != Default().Hash() {
		t.Fatalf("policy %+v, want Default()", p)
	}
}

// TestHashStableUnderReordering: key order, time zones and defaults spelled
// out do not change the hash; a changed rule does; the simulation section
// is not part of it. The hash is 64 hex digits of SHA-256.
func TestHashStableUnderReordering(t *testing.T) {
	a, b := mustLoad(t, "testdata/good.yaml"), mustLoad(t, "testdata/reordered.yaml")
	if a.Hash() != b.Hash() {
		t.Fatalf("hashes differ for the same rules:\n%s\n%s", a.Canonical(), b.Canonical())
	}
	if len(a.Hash()) != 64 || strings.Trim(a.Hash(), "0123456789abcdef") != "" {
		t.Fatalf("hash %q, want 64 lower-case hex digits", a.Hash())
	}
	// Encoding again gives the same bytes (maps are encoded in key order).
	for range 20 {
		if string(mustLoad(t, "testdata/good.yaml").Canonical()) != string(b.Canonical()) {
			t.Fatal("canonical encoding is not deterministic")
		}
	}
	c := mustLoad(t, "testdata/good.yaml")
	c.Preemption.GraceSeconds++
	if c.Hash() == a.Hash() {
		t.Error("a changed grace period keeps the hash")
	}
	d := mustLoad(t, "testdata/good.yaml")
	d.Simulation.Seed++
	if d.Hash() != a.Hash() {
		t.Error("the simulation section changed the hash")
	}
	e := mustLoad(t, "testdata/good.yaml")
	e.Queues = append(e.Queues[:0:0], e.Queues[1], e.Queues[0])
	if e.Hash() == a.Hash() {
		t.Error("reordered queues keep the hash: the queue order is part of the policy (its list order)")
	}
	empty := Default()
	empty.Queues, empty.ProtectionWindows = []Queue{}, []Window{}
	if empty.Hash() != Default().Hash() {
		t.Error("an empty list and an absent one hash differently")
	}
}

// TestLoadErrors: every kind of problem is reported as "file:line: field:
// what is wrong", with the line of the offending key or value.
func TestLoadErrors(t *testing.T) {
	const v = "version: gpugov.policy/v1\n"
	cases := []struct{ name, yaml, want string }{
		{"unknown top-level field", v + "stage: observe\n", `p.yaml:2: stage: unknown field (want one of aging, `},
		{"unknown nested field", v + "preemption:\n  min_runtime: 5\n", "p.yaml:3: preemption.min_runtime: unknown field"},
		{"unknown field in a list item", v + "queues:\n  - {name: a, tier: standard, prio: 1}\n", "p.yaml:3: queues[0].prio: unknown field"},
		{"wrong type: number", v + "aging:\n  enabled: true\n  interval_s: soon\n", `p.yaml:4: aging.interval_s: want a number, got "soon"`},
		{"wrong type: whole number", v + "reservation:\n  depth: 1.5\n", `p.yaml:3: reservation.depth: want a whole number, got "1.5"`},
		{"wrong type: list for number", v + "queues:\n  - name: a\n    tier: standard\n    max_wait_s: [1]\n", "p.yaml:5: queues[0].max_wait_s: want a whole number, got a list"},
		{"wrong type: bool", v + "reclaim:\n  enabled: maybe\n", `p.yaml:3: reclaim.enabled: want true or false, got "maybe"`},
		{"wrong type: mapping", v + "preemption: 5\n", `p.yaml:2: preemption: want a mapping, got "5"`},
		{"wrong type: list", v + "queues: {name: a}\n", "p.yaml:2: queues: want a list, got a mapping"},
		{"no value", v + "preemption:\n  grace_s:\n", "p.yaml:3: preemption.grace_s: want a number, got no value"},
		{"not finite", v + "aging:\n  cap_points: .inf\n", `p.yaml:3: aging.cap_points: want a finite number, got ".inf"`},
		{"quota beyond the bound", v + "quotas:\n  - {project: a, pool: p, nominal_milli: 1000000001}\n", "p.yaml:3: quotas[0].nominal_milli: 1000000001 is more than 1000000000 milli-GPU"},
		{"bad tier", v + "queues:\n  - {name: a, tier: top}\n", `p.yaml:3: queues[0].tier: "top" is not production, key-project, standard or experiment`},
		{"bad tier base", v + "tier_base:\n  gold: 5\n", `p.yaml:3: tier_base.gold: "gold" is not production`},
		{"bad recovery tier", v + "simulation:\n  recovery:\n    tiers: [gold]\n", `p.yaml:4: simulation.recovery.tiers[0]: "gold" is not production`},
		{"bad stage", v + "pools:\n  a100:\n    stage: later\n", `p.yaml:4: pools.a100.stage: "later" is not observe, trial or automate`},
		{"missing stage", v + "pools:\n  a100: {}\n", "p.yaml:3: pools.a100.stage: is required"},
		{"bad mode", v + "reclaim:\n  rules:\n    - {mode: nag}\n", `p.yaml:4: reclaim.rules[0].mode: "nag" is not report, notify, auto or confirm`},
		{"bad default mode", v + "reclaim:\n  default_mode: loud\n", `p.yaml:3: reclaim.default_mode: "loud" is not report`},
		{"bad class", v + "reclaim:\n  rules:\n    - {class: dead, mode: auto}\n", `p.yaml:4: reclaim.rules[0].class: "dead" is not failed, idle or completed`},
		{"rule without mode", v + "reclaim:\n  rules:\n    - {class: idle}\n", "p.yaml:4: reclaim.rules[0].mode: is required"},
		{"negative duration", v + "preemption:\n  grace_s: -5\n", "p.yaml:3: preemption.grace_s: -5 is negative"},
		// Upper bounds (vocab.Bounds; found by FuzzPolicy: each was accepted
		// before and overflowed a time.Duration or an int conversion later).
		{"half-life beyond ten years", v + "fair_share:\n  half_life_s: 1e300\n", "p.yaml:3: fair_share.half_life_s: 1e+300 is outside 0..3.1536e+08"},
		{"grace beyond ten years", v + "preemption:\n  grace_s: 315360001\n", "p.yaml:3: preemption.grace_s: 3.15360001e+08 is outside 0..3.1536e+08"},
		{"points beyond the bound", v + "aging:\n  step_points: 1e308\n", "p.yaml:3: aging.step_points: 1e+308 is outside 0..1e+09"},
		{"tier base beyond the bound", v + "tier_base:\n  production: -1e18\n", "p.yaml:3: tier_base.production: -1e+18 is outside -1e+09..1e+09"},
		{"project weight beyond the bound", v + "fair_share:\n  project_weights: {a: 1e7}\n", "p.yaml:3: fair_share.project_weights.a: 1e+07 is more than 1e+06"},
		{"reservation depth beyond the bound", v + "reservation:\n  depth: 9223372036854775807\n", "p.yaml:3: reservation.depth: 9223372036854775807 is outside 0..1000000"},
		{"cycle interval beyond the bound", v + "simulation:\n  cycle_interval_s: 9223372036854775807\n", "p.yaml:3: simulation.cycle_interval_s: 9223372036854775807 is outside 1..315360000"},
		{"wait objective beyond the bound", v + "queues:\n  - {name: a, tier: standard, max_wait_s: 9223372036854775807}\n", "p.yaml:3: queues[0].max_wait_s: 9223372036854775807 is outside 0..315360000"},
		{"idle memory beyond a GPU", v + "reclaim:\n  idle_memory_mib: 2000000\n", "p.yaml:3: reclaim.idle_memory_mib: 2000000 is outside 0..1048576"},
		{"delivery timeout beyond the bound", v + "notifications:\n  delivery: {timeout_s: 1e12}\n", "p.yaml:3: notifications.delivery.timeout_s: 1e+12 is more than 3.1536e+08"},
		{"window year 0 in UTC", v + "protection_windows:\n  - {name: w, start: '0000-01-01T00:00:00+01:00', end: '2026-01-02T00:00:00Z'}\n", "p.yaml:3: protection_windows[0].start: 0000-01-01T00:00:00+01:00 is year -1 in UTC, want a time in 1970..9999"},
		{"window year 10000 in UTC", v + "protection_windows:\n  - {name: w, start: '2026-01-01T00:00:00Z', end: '9999-12-31T23:00:00-02:00'}\n", "p.yaml:3: protection_windows[0].end: 9999-12-31T23:00:00-02:00 is year 10000 in UTC, want a time in 1970..9999"},
		{"negative wait objective", v + "queues:\n  - {name: a, tier: standard, max_wait_s: -1}\n", "p.yaml:3: queues[0].max_wait_s: -1 is negative"},
		{"zero scan interval", v + "reclaim:\n  scan_interval_s: 0\n", "p.yaml:3: reclaim.scan_interval_s: 0, want > 0"},
		{"negative verify bound", v + "preemption:\n  recompute_timeout_s: -1\n", "p.yaml:3: preemption.recompute_timeout_s: -1, want > 0"},
		{"no verified resume required", v + "preemption:\n  min_verified_resumes: 0\n", "p.yaml:3: preemption.min_verified_resumes: 0, want at least 1"},
		{"failure rate above 1", v + "preemption:\n  max_resume_failure_rate: 1.5\n", "p.yaml:3: preemption.max_resume_failure_rate: 1.5 is outside 0..1"},
		{"zero evidence window", v + "preemption:\n  evidence_window_s: 0\n", "p.yaml:3: preemption.evidence_window_s: 0, want > 0"},
		{"negative quota", v + "quotas:\n  - {project: a, pool: p, nominal_milli: -1}\n", "p.yaml:3: quotas[0].nominal_milli: -1 is negative"},
		{"zero project weight", v + "fair_share:\n  project_weights: {a: 0}\n", "p.yaml:3: fair_share.project_weights.a: 0, want > 0"},
		{"idle percent", v + "reclaim:\n  idle_gpu_percent: 120\n", "p.yaml:3: reclaim.idle_gpu_percent: 120 is outside 0..100"},
		{"negative bursts", v + "reclaim:\n  idle_max_bursts: -1\n", "p.yaml:3: reclaim.idle_max_bursts: -1 is negative"},
		{"negative idle memory", v + "reclaim:\n  idle_memory_mib: -5\n", "p.yaml:3: reclaim.idle_memory_mib: -5 is negative"},
		{"zero dispute window", v + "reclaim:\n  dispute_window_s: 0\n", "p.yaml:3: reclaim.dispute_window_s: 0, want > 0"},
		{"probability", v + "simulation:\n  recovery:\n    probability: 1.5\n", "p.yaml:4: simulation.recovery.probability: 1.5 is outside 0..1"},
		{"projects", v + "simulation:\n  projects: 0\n", "p.yaml:3: simulation.projects: 0, want at least 1"},
		{"negative seed", v + "simulation:\n  seed: -1\n", `p.yaml:3: simulation.seed: want a whole number, got "-1"`},
		{"background placement", v + "simulation:\n  background_placement: spread\n", `p.yaml:3: simulation.background_placement: "spread", want pack or random`},
		{"negative background step", v + "simulation:\n  background_step_s: -1\n", "p.yaml:3: simulation.background_step_s: -1 is negative"},
		{"negative pass period", v + "simulation:\n  cycle_period_s: -60\n", "p.yaml:3: simulation.cycle_period_s: -60 is negative"},
		{"relaxation beyond the bound", v + "simulation:\n  locality_relax_s: 315360001\n", "p.yaml:3: simulation.locality_relax_s: 315360001 is outside 0..315360000"},
		{"aging interval", v + "aging:\n  enabled: true\n  interval_s: 0\n", "p.yaml:4: aging.interval_s: is 0 with aging enabled, want > 0"},
		{"window order", v + "protection_windows:\n  - name: w\n    start: 2026-01-02T00:00:00Z\n    end: 2026-01-01T00:00:00Z\n", "p.yaml:5: protection_windows[0].end: must be after start"},
		{"window time", v + "protection_windows:\n  - {name: w, start: tomorrow, end: 2026-01-01T00:00:00Z}\n", `p.yaml:3: protection_windows[0].start: want an RFC 3339 time`},
		{"window without end", v + "protection_windows:\n  - {name: w, start: 2026-01-01T00:00:00Z}\n", "p.yaml:3: protection_windows[0].end: is required"},
		{"queue without tier", v + "queues:\n  - {name: a}\n", "p.yaml:3: queues[0].tier: is required"},
		{"aging ceiling production", v + "queues:\n  - {name: a, tier: standard, aging_ceiling_tier: production}\n",
			"p.yaml:3: queues[0].aging_ceiling_tier: production is not allowed"},
		{"aging ceiling below the tier", v + "queues:\n  - {name: a, tier: key-project, aging_ceiling_tier: standard}\n",
			"p.yaml:3: queues[0].aging_ceiling_tier: standard is below the queue's tier key-project"},
		{"aging ceiling unknown", v + "queues:\n  - {name: a, tier: standard, aging_ceiling_tier: gold}\n",
			`p.yaml:3: queues[0].aging_ceiling_tier: "gold" is not production`},
		{"negative queue aging cap", v + "queues:\n  - {name: a, tier: standard, aging_cap_points: -1}\n",
			"p.yaml:3: queues[0].aging_cap_points: -1 is negative"},
		{"min share above 1", v + "queues:\n  - name: a\n    tier: standard\n    min_share: 1.5\n", "p.yaml:5: queues[0].min_share: 1.5 is outside 0..1"},
		{"negative min share", v + "queues:\n  - {name: a, tier: standard, min_share: -0.1}\n", "p.yaml:3: queues[0].min_share: -0.1 is outside 0..1"},
		{"zero max share", v + "queues:\n  - {name: a, tier: standard, max_share: 0}\n", "p.yaml:3: queues[0].max_share: 0 is outside (0, 1]"},
		{"max share above 1", v + "queues:\n  - {name: a, tier: standard, max_share: 2}\n", "p.yaml:3: queues[0].max_share: 2 is outside (0, 1]"},
		{"max below min", v + "queues:\n  - name: a\n    tier: standard\n    min_share: 0.5\n    max_share: 0.25\n", "p.yaml:6: queues[0].max_share: 0.25 is below min_share 0.5, want min_share ≤ max_share"},
		{"minimums past the pool", v + "queues:\n  - {name: a, tier: standard, min_share: 0.6}\n  - {name: b, tier: experiment}\n  - name: c\n    tier: experiment\n    min_share: 0.5\n",
			"p.yaml:7: queues[2].min_share: the queues' min_share add up to 1.1 (a 0.6 + c 0.5), want at most 1"},
		{"empty queue name", v + "queues:\n  - {name: '', tier: standard}\n", "p.yaml:3: queues[0].name: is empty"},
		{"duplicate queue", v + "queues:\n  - {name: a, tier: standard}\n  - {name: a, tier: experiment}\n", `p.yaml:4: queues[1].name: "a" repeats queues[0]`},
		{"duplicate quota", v + "quotas:\n  - {project: a, pool: p}\n  - {project: a, pool: p}\n", `p.yaml:4: quotas[1]: project "a" in pool "p" repeats quotas[0]`},
		{"repeated key", v + "reclaim:\n  enabled: true\n  enabled: false\n", "p.yaml:4: reclaim.enabled: repeats an earlier key"},
		{"unknown version", "version: gpugov.policy/v2\npreemption: {grace_s: 5}\n", `p.yaml:1: version: "gpugov.policy/v2" is not a known policy format: want "gpugov.policy/v1"`},
		{"version of the wrong shape", "version: [1]\n", `p.yaml:1: version: a list is not a known policy format`},
		{"missing version", "aging:\n  enabled: true\n", `p.yaml:1: version: is required: want "gpugov.policy/v1"`},
		{"empty file", "# nothing\n", `p.yaml:1: version: is required`},
		{"not a mapping", "- version\n", "p.yaml:1: want a mapping of policy sections, got a list"},
		{"syntax", v + "aging:\n\tenabled: true\n", "p.yaml:3: yaml: line 3: found character that cannot start any token"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse("p.yaml", []byte(tc.yaml))
			var pe *Error
			if !errors.As(err, &pe) {
				t.Fatalf("error %v (%T), want an *Error", err, err)
			}
			if !strings.HasPrefix(err.Error(), tc.want) {
				t.Fatalf("error\n  %q\nwant the prefix\n  %q", err, tc.want)
			}
		})
	}
}

// TestLoadListsEveryProblem: one load reports every problem, by line, each
// with its field.
func TestLoadListsEveryProblem(t *testing.T) {
	bad := "version: gpugov.policy/v1\nreclaim:\n  rules:\n    - {mode: nag}\n  idle_gpu_percent: 120\npools:\n  p1:\n    stage: fast\n"
	_, err := Parse("g.yaml", []byte(bad))
	var pe *Error
	if !errors.As(err, &pe) || len(pe.Problems) != 3 {
		t.Fatalf("error %v, want three problems", err)
	}
	want := []Problem{{Line: 4, Field: "reclaim.rules[0].mode"}, {Line: 5, Field: "reclaim.idle_gpu_percent"}, {Line: 8, Field: "pools.p1.stage"}}
	for i, w := range want {
		if pe.Problems[i].Line != w.Line || pe.Problems[i].Field != w.Field {
			t.Errorf("problem %d = %+v, want line %d field %s", i, pe.Problems[i], w.Line, w.Field)
		}
	}
	if lines := strings.Split(err.Error(), "\n"); len(lines) != 3 || !strings.HasPrefix(lines[2], "g.yaml:8: pools.p1.stage: ") {
		t.Errorf("message %q, want one problem a line", err)
	}
	if _, err := Load(filepath.Join(t.TempDir(), "absent.yaml")); err == nil || !strings.Contains(err.Error(), "absent.yaml") {
		t.Errorf("missing file: %v", err)
	}
}

func TestApplyProjectWeights(t *testing.T) {
	usage := []scheduling.ProjectUsage{{Project: "vision"}, {Project: "nlp"}, {Project: "vision"}, {Project: "misc"}}
	ApplyProjectWeights(usage, map[string]float64{"vision": 3, "absent": 10})
	// vision 3, nlp 1 (default), misc 1: shares 0.6, 0.2, 0.2 over the
	// distinct projects with usage; "absent" has none and takes no share.
	want := []float64{0.6, 0.2, 0.6, 0.2}
	for i, u := range usage {
		if math.Abs(u.Share-want[i]) > 1e-12 {
			t.Errorf("%s share %v, want %v", u.Project, u.Share, want[i])
		}
	}
	plain := []scheduling.ProjectUsage{{Project: "a"}, {Project: "b"}}
	ApplyProjectWeights(plain, nil)
	if plain[0].Share != 0 || plain[1].Share != 0 {
		t.Errorf("no weights: shares %v, %v, want 0 (equal shares)", plain[0].Share, plain[1].Share)
	}
	// Plan's fair-share factor follows the weights: with equal usage the
	// heavier project is further below its share and ranks higher.
	heavy := []scheduling.ProjectUsage{{Project: "a", DecayedGPUSeconds: 100}, {Project: "b", DecayedGPUSeconds: 100}}
	ApplyProjectWeights(heavy, map[string]float64{"a": 3})
	fa := scheduling.FairShareFactor(0.5, heavy[0].Share)
	fb := scheduling.FairShareFactor(0.5, heavy[1].Share)
	if !(fa > fb) {
		t.Errorf("fair-share factors a %v, b %v: want the weighted project higher", fa, fb)
	}
}

func TestWatcherKeepsLastGoodPolicyAndReportsChanges(t *testing.T) {
	path := filepath.Join(t.TempDir(), "p.yaml")
	write := func(s string, at time.Time) {
		if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(path, at, at); err != nil {
			t.Fatal(err)
		}
	}
	const v = "version: gpugov.policy/v1\n"
	t0 := time.Now().Add(-time.Hour)
	write(v+"pools:\n  a100: {stage: trial}\n", t0)
	w, err := NewWatcher(path)
	if err != nil {
		t.Fatal(err)
	}
	var changes []Change
	var errs []error
	w.OnChange = func(_ context.Context, c Change) error {
		if w.Current() != c.Old {
			t.Error("OnChange ran after the new policy became current")
		}
		changes = append(changes, c)
		return nil
	}
	w.OnError = func(err error) { errs = append(errs, err) }
	ctx := context.Background()
	if w.Check(ctx) {
		t.Fatal("unchanged file reported as a change")
	}
	write(v+"pools:\n  a100: {stage: sideways}\n", t0.Add(time.Minute))
	if w.Check(ctx) || len(errs) != 1 || w.Current().Pools["a100"].Stage != vocab.StageTrial {
		t.Fatalf("bad file: errors %v, stage %s; want the last good policy kept", errs, w.Current().Pools["a100"].Stage)
	}
	if !strings.Contains(errs[0].Error(), path+":3: pools.a100.stage: ") {
		t.Errorf("error %v, want the file, line and field", errs[0])
	}
	// Same rules, other spelling: no change.
	write(v+"pools:\n  a100:\n    stage: trial\n", t0.Add(2*time.Minute))
	if w.Check(ctx) || len(changes) != 0 {
		t.Fatalf("a file with the same rules reported as a change: %+v", changes)
	}
	write(v+"pools:\n  a100: {stage: automate}\n", t0.Add(3*time.Minute))
	if !w.Check(ctx) || len(changes) != 1 || changes[0].Old.Pools["a100"].Stage != vocab.StageTrial ||
		w.Current().Pools["a100"].Stage != vocab.StageAutomate || changes[0].New != w.Current() {
		t.Fatalf("good file: changes %+v", changes)
	}
	// OnChange fails (the store is unreachable): the old policy stays
	// current, and the unchanged file is tried again at the next check.
	failing := true
	w.OnChange = func(_ context.Context, c Change) error {
		if failing {
			return errors.New("store unreachable")
		}
		changes = append(changes, c)
		return nil
	}
	write(v+"pools:\n  a100: {stage: observe}\n", t0.Add(4*time.Minute))
	if w.Check(ctx) || w.Current().Pools["a100"].Stage != vocab.StageAutomate {
		t.Fatalf("failed OnChange: stage %s is current; want the previous policy kept", w.Current().Pools["a100"].Stage)
	}
	failing = false
	if !w.Check(ctx) || w.Current().Pools["a100"].Stage != vocab.StageObserve || len(changes) != 2 {
		t.Fatalf("after a failed OnChange the same file was not retried: stage %s, %d changes",
			w.Current().Pools["a100"].Stage, len(changes))
	}
	if _, err := NewWatcher(filepath.Join(t.TempDir(), "absent.yaml")); err == nil {
		t.Error("a watcher started on a missing file")
	}
}

// TestQueueAging checks the per-queue aging fields: loaded, part of the
// hash, and carried into the scheduling policy's Aging.Queues (only for
// queues that set one), which serve and simulate both plan with.
func TestQueueAging(t *testing.T) {
	const base = "version: gpugov.policy/v1\nqueues:\n  - {name: prod, tier: production}\n"
	p, err := Parse("p.yaml", []byte(base+"  - {name: std, tier: standard, aging_ceiling_tier: key-project, aging_cap_points: 15000}\n"+
		"  - {name: capped, tier: experiment, aging_cap_points: 0}\n  - {name: plain, tier: standard}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if q := p.Queues[1]; q.AgingCeilingTier != "key-project" || q.AgingCapPoints == nil || *q.AgingCapPoints != 15000 {
		t.Fatalf("queue %+v", q)
	}
	want := map[string]scheduling.QueueAging{
		"std":    {HasCap: true, CapPoints: 15000, HasCeiling: true, CeilingTier: vocab.TierKeyProject},
		"capped": {HasCap: true, CapPoints: 0},
	}
	if got := p.Scheduling().Aging.Queues; !reflect.DeepEqual(got, want) {
		t.Fatalf("Aging.Queues %+v, want %+v", got, want)
	}
	// serve runs the stored version: the fields survive its canonical body.
	back, err := FromCanonical(p.Canonical())
	if err != nil || !reflect.DeepEqual(back.Scheduling().Aging.Queues, want) || back.Hash() != p.Hash() {
		t.Fatalf("from the canonical body: %v, %+v", err, back)
	}
	plain, err := Parse("p.yaml", []byte(base+"  - {name: std, tier: standard}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if plain.Scheduling().Aging.Queues != nil || plain.Hash() == p.Hash() {
		t.Fatalf("a policy without queue aging: %+v, hash %s (the other %s)", plain.Scheduling().Aging.Queues, plain.Hash(), p.Hash())
	}
}

// TestEvidenceRuleFields checks the evidence rule's policy fields: their
// defaults, a file's values reaching the scheduling policy, and the
// canonical JSON, which leaves out a value equal to its default — a policy
// stored before the fields existed keeps its hash and decodes with the
// defaults — and keeps any other, 0 included.
func TestEvidenceRuleFields(t *testing.T) {
	const v = "version: gpugov.policy/v1\n"
	d, err := Parse("p.yaml", []byte(v))
	if err != nil {
		t.Fatal(err)
	}
	if pp := d.Preemption; pp.MinVerifiedResumes != 1 || pp.MaxResumeFailureRate != 0.2 || pp.EvidenceWindowSeconds != 30*86400 ||
		pp.EvidenceWindow() != 30*24*time.Hour {
		t.Fatalf("defaults %+v", pp)
	}
	if strings.Contains(string(d.Canonical()), "min_verified_resumes") {
		t.Fatalf("canonical JSON of the defaults names the evidence rule: %s", d.Canonical())
	}
	explicit, err := Parse("p.yaml", []byte(v+"preemption:\n  min_verified_resumes: 1\n  max_resume_failure_rate: 0.2\n  evidence_window_s: 2592000\n"))
	if err != nil || explicit.Hash() != d.Hash() {
		t.Fatalf("the defaults spelt out hash %s, want %s (%v)", explicit.Hash(), d.Hash(), err)
	}
	p, err := Parse("p.yaml", []byte(v+"preemption:\n  min_verified_resumes: 3\n  max_resume_failure_rate: 0\n  evidence_window_s: 604800\n"))
	if err != nil {
		t.Fatal(err)
	}
	sp := p.Scheduling().Preemption
	if sp.MinVerifiedResumes != 3 || sp.MaxResumeFailureRate != 0 || sp.EvidenceWindowSeconds != 604800 || p.Hash() == d.Hash() {
		t.Fatalf("scheduling preemption %+v", sp)
	}
	back, err := FromCanonical(p.Canonical())
	if err != nil || back.Preemption != p.Preemption || back.Hash() != p.Hash() {
		t.Fatalf("decoded %+v (%v), want %+v", back.Preemption, err, p.Preemption)
	}
	// A body without the fields (stored before them) decodes with the defaults.
	old := strings.Replace(string(p.Canonical()), `,"min_verified_resumes":3,"max_resume_failure_rate":0,"evidence_window_s":604800`, "", 1)
	if old == string(p.Canonical()) {
		t.Fatalf("canonical JSON %s lacks the fields", p.Canonical())
	}
	if q, err := FromCanonical([]byte(old)); err != nil || q.Preemption.MinVerifiedResumes != 1 || q.Preemption.MaxResumeFailureRate != 0.2 ||
		q.Preemption.EvidenceWindowSeconds != 30*86400 {
		t.Fatalf("an older body decodes to %+v (%v)", q.Preemption, err)
	}
	if _, err := FromCanonical([]byte(strings.Replace(string(d.Canonical()), `"grace_s"`, `"grace"`, 1))); err == nil {
		t.Fatal("an unknown preemption field was accepted")
	}
}
