package governance

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpugov/gpugov/internal/policy"
	"github.com/gpugov/gpugov/internal/vocab"
)

func TestClassify(t *testing.T) {
	c := policy.Default()
	c.Reclaim.ObservationWindowSeconds, c.Reclaim.IdleGPUPercent = 600, 5
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	ended := now.Add(-time.Minute)
	base := func() *Evidence {
		return &Evidence{AllocationID: "a", RunID: "r", JobState: "running", GrantedAt: now.Add(-time.Hour), RunStartedAt: now.Add(-time.Hour),
			GPUUUIDs: []string{"G1"}, GPUs: 1, Queue: "exp"}
	}
	samples := func(pct int) []Sample {
		var s []Sample
		for at := now.Add(-590 * time.Second); !at.After(now); at = at.Add(30 * time.Second) {
			s = append(s, Sample{GPUUUID: "G1", At: at, GPUPercent: pct})
		}
		return s
	}
	cases := []struct {
		name string
		ev   func(*Evidence)
		want vocab.ReclaimClass // "" = not reclaimable
	}{
		{"succeeded run still holding", func(e *Evidence) { e.RunOutcome, e.RunEndedAt = "succeeded", &ended }, vocab.ClassCompleted},
		{"failed run still holding", func(e *Evidence) { e.RunOutcome, e.RunEndedAt = "failed", &ended }, vocab.ClassFailed},
		{"no run within the window", func(e *Evidence) { e.RunID, e.JobState = "", "placed" }, vocab.ClassFailed},
		{"idle on every sample", func(e *Evidence) { e.Samples = samples(2) }, vocab.ClassIdle},
		{"missing samples are no evidence", func(e *Evidence) {}, ""},
		{"busy GPU", func(e *Evidence) { e.Samples = samples(40) }, ""},
		{"samples not spanning the window", func(e *Evidence) { e.Samples = samples(2)[15:] }, ""},
		{"checkpoint in the window is progress", func(e *Evidence) { cp := now.Add(-time.Minute); e.Samples, e.LastCheckpointAt = samples(0), &cp }, ""},
		{"protected job", func(e *Evidence) { e.Samples, e.Protected = samples(0), true }, ""},
		{"heartbeat older than the window", func(e *Evidence) { hb := now.Add(-11 * time.Minute); e.Samples, e.LastHeartbeatAt = samples(40), &hb }, vocab.ClassFailed},
		{"heartbeat lost on protected work", func(e *Evidence) { hb := now.Add(-time.Hour); e.Protected, e.LastHeartbeatAt = true, &hb }, vocab.ClassFailed},
		{"recent heartbeat", func(e *Evidence) { hb := now.Add(-9 * time.Minute); e.Samples, e.LastHeartbeatAt = samples(40), &hb }, ""},
		{"heartbeat age of an ended run", func(e *Evidence) {
			hb := now.Add(-time.Hour)
			e.RunOutcome, e.RunEndedAt, e.LastHeartbeatAt = "cancelled", &ended, &hb
		}, vocab.ClassFailed},
	}
	for _, tc := range cases {
		ev := base()
		tc.ev(ev)
		f, ok := Classify(ev, c, now)
		if (tc.want == "") == ok || f.Class != tc.want {
			t.Errorf("%s: %+v (%v), want %q", tc.name, f, ok, tc.want)
		}
	}
}

// TestClassifyHeartbeatBasis checks that a run whose executor went silent
// is failed with the heartbeat's age and time in its basis.
func TestClassifyHeartbeatBasis(t *testing.T) {
	c := policy.Default()
	c.Reclaim.ObservationWindowSeconds = 600
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	hb := now.Add(-25 * time.Minute)
	ev := &Evidence{AllocationID: "a", RunID: "r-1", JobState: "running", GrantedAt: now.Add(-time.Hour),
		RunStartedAt: now.Add(-time.Hour), GPUs: 2, LastHeartbeatAt: &hb}
	f, ok := Classify(ev, c, now)
	if !ok || f.Class != vocab.ClassFailed {
		t.Fatalf("finding %+v (%v), want failed", f, ok)
	}
	for _, want := range []string{"run r-1 has not heartbeated for 25m0s", "2026-01-01T11:35:00Z", "10m0s observation window", "2 GPU(s)"} {
		if !strings.Contains(f.Basis, want) {
			t.Errorf("basis %q lacks %q", f.Basis, want)
		}
	}
	if age, ok := ev.HeartbeatAge(now); !ok || age != 25*time.Minute {
		t.Fatalf("HeartbeatAge = %v, %v", age, ok)
	}
	if _, ok := (&Evidence{}).HeartbeatAge(now); ok {
		t.Fatal("HeartbeatAge without a heartbeat is known")
	}
}

func TestDecideModeByStageAndProtection(t *testing.T) {
	c := policy.Default()
	c.Queues = []policy.Queue{{Name: "exp", Tier: "experiment", LowRisk: true}, {Name: "train", Tier: "standard"}}
	c.Reclaim.Rules = []policy.ModeRule{{Mode: vocab.ModeAuto}}
	for _, tc := range []struct {
		stage     vocab.AutomationStage
		queue     string
		protected bool
		want      vocab.ReclaimMode
	}{
		{vocab.StageObserve, "exp", false, vocab.ModeReport},
		{vocab.StageTrial, "train", false, vocab.ModeReport},
		{vocab.StageTrial, "exp", false, vocab.ModeAuto},
		{vocab.StageAutomate, "train", false, vocab.ModeAuto},
		{vocab.StageAutomate, "train", true, vocab.ModeConfirm},
	} {
		if d := DecideMode(c, tc.stage, "p", tc.queue, vocab.ClassFailed, tc.protected); d.Mode != tc.want || d.Why == "" {
			t.Errorf("%s/%s/protected=%v: %+v, want %s", tc.stage, tc.queue, tc.protected, d, tc.want)
		}
	}
}

// idleRuleCase is one allocation of TestIdleRuleBurstsAndMemory: one GPU
// sampled every 30 s over the 30-minute window at base percent, with the
// samples at the given indexes raised to burst percent and memory MiB in use.
type idleRuleCase struct {
	name     string
	base     int
	burst    int
	at       []int // sample indexes raised to burst
	memory   int64
	progress bool // the run's step advanced 5 minutes ago
	want     vocab.ReclaimClass
	mode     vocab.ReclaimMode // with the rule {class: idle, mode: auto} in an automate pool
	basis    []string
}

// TestIdleRuleBurstsAndMemory pins the idle rule (docs/design.md §3 "The
// idle rule") on its defaults: idle threshold 5 %, at most 1 burst per
// window, 1,024 MiB. A job at 1 % with one 90 % burst per window is idle but
// only notified (neither kept forever, as "every sample below the threshold"
// would keep it, nor released blindly); a second burst in the window, or a
// mean above the threshold, keeps it; memory held makes an otherwise strict
// idle GPU notify-at-most; a reported progress step is output.
func TestIdleRuleBurstsAndMemory(t *testing.T) {
	c := policy.Default()
	c.Reclaim.Rules = []policy.ModeRule{{Class: vocab.ClassIdle, Mode: vocab.ModeAuto}}
	window := policy.Seconds(c.Reclaim.ObservationWindowSeconds)
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	for _, tc := range []idleRuleCase{
		{name: "flat 1%", base: 1, want: vocab.ClassIdle, mode: vocab.ModeAuto, basis: []string{"averaged at most 1.0%", "at most 0 burst(s)"}},
		{name: "1% with one 90% burst", base: 1, burst: 90, at: []int{30}, want: vocab.ClassIdle, mode: vocab.ModeNotify,
			basis: []string{"averaged at most 2.5%", "1 burst(s) above 5% in the window (peak 90%)", "not released without notice"}},
		{name: "one burst of two samples", base: 1, burst: 90, at: []int{30, 31}, want: vocab.ClassIdle, mode: vocab.ModeNotify},
		{name: "two bursts", base: 1, burst: 90, at: []int{10, 40}},
		{name: "a burst long enough to lift the mean", base: 1, burst: 90, at: []int{20, 21, 22, 23}},
		{name: "steady 4%", base: 4, want: vocab.ClassIdle, mode: vocab.ModeAuto},
		{name: "steady 6%", base: 6},
		{name: "idle holding 20 GiB", base: 0, memory: 20480, want: vocab.ClassIdle, mode: vocab.ModeNotify,
			basis: []string{"20480 MiB of GPU memory held, above 1024 MiB"}},
		{name: "idle holding a CUDA context", base: 0, memory: 500, want: vocab.ClassIdle, mode: vocab.ModeAuto},
		{name: "progress in the window", base: 0, progress: true},
	} {
		var samples []Sample
		i := 0
		for at := now.Add(-window + 10*time.Second); !at.After(now); at = at.Add(30 * time.Second) {
			pct := tc.base
			if slices.Contains(tc.at, i) {
				pct = tc.burst
			}
			samples = append(samples, Sample{GPUUUID: "G1", At: at, GPUPercent: pct, MemoryUsedMiB: tc.memory})
			i++
		}
		ev := &Evidence{AllocationID: "a", RunID: "r", JobState: "running", GrantedAt: now.Add(-2 * time.Hour),
			RunStartedAt: now.Add(-2 * time.Hour), GPUUUIDs: []string{"G1"}, GPUs: 1, Queue: "exp", Pool: "p",
			Stage: vocab.StageAutomate, Samples: samples}
		if tc.progress {
			p := now.Add(-5 * time.Minute)
			ev.LastProgressAt = &p
		}
		f, ok := Classify(ev, c, now)
		if (tc.want == "") == ok || f.Class != tc.want {
			t.Errorf("%s: %+v (%v), want %q", tc.name, f, ok, tc.want)
			continue
		}
		if !ok {
			continue
		}
		if d := DecideFindingMode(c, ev, f); d.Mode != tc.mode {
			t.Errorf("%s: mode %s (%s), want %s", tc.name, d.Mode, d.Why, tc.mode)
		}
		if (tc.mode == vocab.ModeNotify) != (f.NotifyAtMost != "") {
			t.Errorf("%s: NotifyAtMost %q with mode %s", tc.name, f.NotifyAtMost, tc.mode)
		}
		for _, want := range tc.basis {
			if !strings.Contains(f.Basis, want) {
				t.Errorf("%s: basis %q lacks %q", tc.name, f.Basis, want)
			}
		}
		if len(f.GPUs) != 1 || f.GPUs[0].Samples != 60 {
			t.Errorf("%s: measures %+v, want one GPU with 60 samples", tc.name, f.GPUs)
		}
	}
}

// TestIdleMaxBurstsZeroIsTheStrictRule checks that idle_max_bursts 0 is
// Run:ai's rule (idle only while every sample stays at or below the
// threshold): the one-burst job is kept.
func TestIdleMaxBurstsZeroIsTheStrictRule(t *testing.T) {
	c := policy.Default()
	c.Reclaim.IdleMaxBursts = 0
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	var samples []Sample
	for i := range 60 {
		pct := 1
		if i == 30 {
			pct = 90
		}
		samples = append(samples, Sample{GPUUUID: "G1", At: now.Add(-time.Duration(59-i) * 30 * time.Second), GPUPercent: pct})
	}
	ev := &Evidence{RunID: "r", JobState: "running", RunStartedAt: now.Add(-2 * time.Hour), GrantedAt: now.Add(-2 * time.Hour),
		GPUUUIDs: []string{"G1"}, Samples: samples}
	if f, ok := Classify(ev, c, now); ok {
		t.Fatalf("one burst with idle_max_bursts 0: %+v, want not reclaimable", f)
	}
	samples[30].GPUPercent = 5
	if f, ok := Classify(ev, c, now); !ok || f.NotifyAtMost != "" {
		t.Fatalf("no burst: %+v (%v), want a strict idle finding", f, ok)
	}
}

// TestMeasureWindow checks the per-GPU measure: samples out of order,
// before the window and of other GPUs, bursts as runs of consecutive samples.
func TestMeasureWindow(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	samples := []Sample{
		{GPUUUID: "G1", At: at(40), GPUPercent: 50, MemoryUsedMiB: 10},
		{GPUUUID: "G1", At: at(0), GPUPercent: 0},
		{GPUUUID: "G1", At: at(-10), GPUPercent: 100, MemoryUsedMiB: 99999}, // before the window
		{GPUUUID: "G2", At: at(10), GPUPercent: 100},
		{GPUUUID: "G1", At: at(10), GPUPercent: 80, MemoryUsedMiB: 700},
		{GPUUUID: "G1", At: at(20), GPUPercent: 90},
		{GPUUUID: "G1", At: at(30), GPUPercent: 2},
	}
	w := MeasureWindow(samples, "G1", t0, 5)
	want := GPUWindow{GPUUUID: "G1", Samples: 5, MeanPercent: 44.4, PeakPercent: 90, Bursts: 2, MaxMemoryMiB: 700, First: at(0), Last: at(40)}
	if w != want {
		t.Fatalf("measure %+v, want %+v", w, want)
	}
	if w := MeasureWindow(samples, "G3", t0, 5); w.Samples != 0 || w.Bursts != 0 {
		t.Fatalf("no samples: %+v", w)
	}
}

// TestOwnerCompletionIsCompleted checks that the owner's business-complete
// declaration classifies a running allocation completed, whatever its
// utilisation, with the declaration in the basis.
func TestOwnerCompletionIsCompleted(t *testing.T) {
	c := policy.Default()
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	ev := &Evidence{RunID: "r-1", JobState: "running", RunStartedAt: now.Add(-time.Minute), GrantedAt: now.Add(-time.Minute),
		GPUs: 2, Completion: &Completion{By: "vision", At: now.Add(-30 * time.Second), Reason: "model exported"}}
	f, ok := Classify(ev, c, now)
	if !ok || f.Class != vocab.ClassCompleted || f.NotifyAtMost != "" {
		t.Fatalf("finding %+v (%v), want completed", f, ok)
	}
	for _, want := range []string{"the owner (vision) declared the work done at 2026-01-01T11:59:30Z (model exported)", "2 GPU(s)", "run r-1"} {
		if !strings.Contains(f.Basis, want) {
			t.Errorf("basis %q lacks %q", f.Basis, want)
		}
	}
}
