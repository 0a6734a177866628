package policy

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpugov/gpugov/internal/vocab"
)

// FuzzPolicy fuzzes the policy file loader (Parse). Properties: no panic; a
// rejection is an *Error whose every problem names its line (≥ 1) and a
// field, unless it is a YAML syntax error or the document as a whole is not
// a mapping; an accepted policy round-trips through its canonical body
// (Canonical, FromCanonical: the same hash) and is inside vocab's bounds.
func FuzzPolicy(f *testing.F) {
	for _, glob := range []string{"testdata/*.yaml", "../../deploy/gpugov/policy.yaml", "../../deploy/whatif/*.yaml"} {
		paths, _ := filepath.Glob(glob)
		for _, p := range paths {
			if b, err := os.ReadFile(p); err == nil {
				f.Add(b)
			}
		}
	}
	for _, s := range []string{
		"version: gpugov.policy/v1\n",
		"version: gpugov.policy/v1\naging: {enabled: true, interval_s: 0}\n",
		"version: gpugov.policy/v1\naging: {step_points: 1e308, cap_points: .inf}\n",
		"version: gpugov.policy/v1\nfair_share: {half_life_s: 1e300, project_weights: {a: 1e-300}}\n",
		"version: gpugov.policy/v1\nprotection_windows: [{name: w, start: '0000-01-01T00:00:00+01:00', end: '0000-01-02T00:00:00Z'}]\n",
		"version: gpugov.policy/v1\nprotection_windows: [{name: w, start: '9999-12-31T00:00:00Z', end: '9999-12-31T23:00:00-02:00'}]\n",
		"version: gpugov.policy/v1\nreservation: {depth: 9223372036854775807}\n",
		"version: gpugov.policy/v1\nqueues: [{name: a, tier: standard, min_share: 0.6}, {name: b, tier: standard, min_share: 0.6}]\n",
		"version: gpugov.policy/v1\ntier_base: {production: -1e18, nope: 1}\n",
		"version: gpugov.policy/v1\nsimulation: {cycle_interval_s: 9223372036854775807}\n",
		"version: gpugov.policy/v2\n", "[]\n", "", "version: [\n", "a: &a [*a, *a]\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := Parse("fuzz.yaml", data)
		if err != nil {
			var pe *Error
			if !errors.As(err, &pe) || len(pe.Problems) == 0 {
				t.Fatalf("rejection is not a policy *Error with problems: %v", err)
			}
			for _, pr := range pe.Problems {
				if pr.Line < 1 {
					t.Fatalf("problem without a line: %+v", pr)
				}
				if pr.Field == "" && !strings.HasPrefix(pr.Message, "yaml: ") && !strings.HasPrefix(pr.Message, "want a mapping of policy sections") {
					t.Fatalf("problem names no field: %+v", pr)
				}
			}
			if !strings.HasPrefix(err.Error(), "fuzz.yaml:") {
				t.Fatalf("error does not start with the file's name: %v", err)
			}
			return
		}
		checkPolicyBounds(t, p)
		body := p.Canonical()
		again, err := FromCanonical(body)
		if err != nil {
			t.Fatalf("an accepted policy's canonical body does not decode: %v\n%s", err, body)
		}
		if again.Hash() != p.Hash() {
			t.Fatalf("round trip changed the policy:\n%s\n%s", body, again.Canonical())
		}
	})
}

// checkPolicyBounds fails t when an accepted policy holds a value outside
// vocab's bounds (docs/design.md "Bounds of outside input").
func checkPolicyBounds(t *testing.T, p *Policy) {
	t.Helper()
	in := func(name string, v, lo, hi float64) {
		t.Helper()
		if !(v >= lo && v <= hi) {
			t.Fatalf("accepted %s %v is outside %v..%v", name, v, lo, hi)
		}
	}
	for k, v := range p.TierBase {
		in("tier_base."+k, v, -vocab.MaxPriorityPoints, vocab.MaxPriorityPoints)
	}
	in("aging.step_points", p.Aging.StepPoints, 0, vocab.MaxPriorityPoints)
	in("aging.cap_points", p.Aging.CapPoints, 0, vocab.MaxPriorityPoints)
	in("aging.interval_s", p.Aging.IntervalSeconds, 0, vocab.MaxDurationSeconds)
	in("fair_share.weight", p.FairShare.Weight, 0, vocab.MaxPriorityPoints)
	in("fair_share.half_life_s", p.FairShare.HalfLifeSeconds, 0, vocab.MaxDurationSeconds)
	for k, v := range p.FairShare.ProjectWeights {
		in("fair_share.project_weights."+k, v, 0, vocab.MaxProjectWeight)
	}
	in("reservation.depth", float64(p.Reservation.Depth), 0, vocab.MaxPolicyCount)
	pr := p.Preemption
	for name, v := range map[string]float64{"min_runtime_s": pr.MinRuntimeSeconds, "window_s": pr.WindowSeconds,
		"save_restore_s": pr.SaveRestoreSeconds, "grace_s": pr.GraceSeconds, "verify_resume_timeout_s": pr.VerifyResumeTimeoutSeconds,
		"recompute_timeout_s": pr.RecomputeTimeoutSeconds, "evidence_window_s": pr.EvidenceWindowSeconds} {
		in("preemption."+name, v, 0, vocab.MaxDurationSeconds)
	}
	in("preemption.max_preemptions", float64(pr.MaxPreemptions), 0, vocab.MaxPolicyCount)
	in("preemption.min_verified_resumes", float64(pr.MinVerifiedResumes), 0, vocab.MaxPolicyCount)
	for _, q := range p.Queues {
		in("queues[].max_wait_s", float64(q.MaxWaitSeconds), 0, vocab.MaxDurationSeconds)
		in("queues[].share", q.Share, 0, vocab.MaxProjectWeight)
	}
	r := p.Reclaim
	for name, v := range map[string]float64{"scan_interval_s": r.ScanIntervalSeconds, "observation_window_s": r.ObservationWindowSeconds,
		"dispute_window_s": r.DisputeWindowSeconds, "notify_window_s": r.NotifyWindowSeconds, "confirm_window_s": r.ConfirmWindowSeconds} {
		in("reclaim."+name, v, 0, vocab.MaxDurationSeconds)
	}
	in("reclaim.idle_memory_mib", float64(r.IdleMemoryMiB), 0, vocab.MaxGPUMemoryMiB)
	in("reclaim.idle_max_bursts", float64(r.IdleMaxBursts), 0, vocab.MaxPolicyCount)
	for _, w := range p.ProtectionWindows {
		for _, at := range []time.Time{w.Start, w.End} {
			if y := at.UTC().Year(); y < 0 || y > 9999 {
				t.Fatalf("accepted protection window time %s is outside years 0..9999", at)
			}
		}
	}
	rd := p.AutomationRule().Readiness
	in("automation.readiness.window_s", rd.WindowSeconds, 0, vocab.MaxReadinessWindowSeconds)
	in("automation.readiness.freshness_s", rd.FreshnessSeconds, 0, vocab.MaxDurationSeconds)
	in("automation.readiness.longest_wait_floor_s", rd.LongestWaitFloorSeconds, 0, vocab.MaxDurationSeconds)
	in("automation.readiness.max_longest_wait_growth", rd.MaxLongestWaitGrowth, 0, vocab.MaxGrowthFactor)
	in("automation.readiness.max_starving_jobs", float64(rd.MaxStarvingJobs), 0, vocab.MaxPolicyCount)
	in("drills.per_profile_per_day", float64(p.DrillRule().PerProfilePerDay), 0, vocab.MaxPolicyCount)
	s := p.Simulation
	in("simulation.projects", float64(s.Projects), 0, vocab.MaxPolicyCount)
	in("simulation.cycle_interval_s", float64(s.CycleIntervalSeconds), 1, vocab.MaxDurationSeconds)
	in("simulation.background_step_s", float64(s.BackgroundStepS), 0, vocab.MaxDurationSeconds)
	in("simulation.cycle_period_s", float64(s.CyclePeriodSeconds), 0, vocab.MaxDurationSeconds)
	in("simulation.locality_relax_s", float64(s.LocalityRelaxSeconds), 0, vocab.MaxDurationSeconds)
	in("simulation.starvation_factor", s.StarvationFactor, 0, vocab.MaxGrowthFactor)
	in("simulation.recovery.checkpoint_interval_s", float64(s.Recovery.CheckpointIntervalSeconds), 1, vocab.MaxDurationSeconds)
	in("simulation.recovery.verified_resumes", float64(s.Recovery.VerifiedResumes), 0, vocab.MaxPolicyCount)
}
