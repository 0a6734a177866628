package governance

import (
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
