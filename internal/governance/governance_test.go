package governance

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpugov/gpugov/internal/vocab"
)

const validYAML = `pools:
  a100-east: {stage: trial}
low_risk_queues: [exp]
protection_windows:
  - {name: launch, start: 2026-12-01T00:00:00Z, end: 2026-12-02T00:00:00Z, queues: [delivery]}
reclaim:
  enabled: true
  notify_window_seconds: 600
  rules:
    - {queue: exp, class: idle, mode: auto}
    - {pool: a100-east, mode: notify}
`

func TestParseAppliesDefaultsAndRules(t *testing.T) {
	c, err := Parse("g.yaml", []byte(validYAML))
	if err != nil {
		t.Fatal(err)
	}
	if c.Pools["a100-east"].Stage != vocab.StageTrial || c.Reclaim.NotifyWindowSeconds != 600 ||
		c.Reclaim.ObservationWindowSeconds != DefaultObservationWindowSeconds || c.Reclaim.DefaultMode != vocab.ModeReport {
		t.Fatalf("config %+v", c)
	}
	for _, tc := range []struct {
		pool, queue string
		class       vocab.ReclaimClass
		want        vocab.ReclaimMode
	}{{"a100-east", "exp", vocab.ClassIdle, vocab.ModeAuto}, {"a100-east", "exp", vocab.ClassFailed, vocab.ModeNotify}, {"other", "exp", vocab.ClassFailed, vocab.ModeReport}} {
		if got := c.ConfiguredMode(tc.pool, tc.queue, tc.class); got != tc.want {
			t.Errorf("mode(%s,%s,%s) = %s, want %s", tc.pool, tc.queue, tc.class, got, tc.want)
		}
	}
	in := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	if c.InProtectionWindow("delivery", in) != "launch" || c.InProtectionWindow("exp", in) != "" || c.InProtectionWindow("delivery", in.Add(24*time.Hour)) != "" {
		t.Fatal("protection window not applied as [start, end) to its queues")
	}
}

func TestParseNamesLineAndFieldOfEveryProblem(t *testing.T) {
	bad := "pools:\n  p1:\n    stage: fast\nreclaim:\n  idle_gpu_percent: 120\n  rules:\n    - {mode: nag}\n"
	_, err := Parse("g.yaml", []byte(bad))
	var ve *ValidationError
	if !errors.As(err, &ve) || len(ve.Problems) != 3 {
		t.Fatalf("error %v, want three problems", err)
	}
	want := []Problem{{Line: 3, Field: "pools.p1.stage"}, {Line: 5, Field: "reclaim.idle_gpu_percent"}, {Line: 7, Field: "reclaim.rules[0].mode"}}
	for i, w := range want {
		if ve.Problems[i].Line != w.Line || ve.Problems[i].Field != w.Field {
			t.Errorf("problem %d = %+v, want line %d field %s", i, ve.Problems[i], w.Line, w.Field)
		}
	}
	if !strings.Contains(err.Error(), "g.yaml:3: pools.p1.stage: \"fast\" is not observe, trial or automate") {
		t.Fatalf("message %q", err)
	}
	if _, err := Parse("g.yaml", []byte("reclaim:\n  enabld: true\n")); err == nil || !strings.Contains(err.Error(), "line 2") {
		t.Fatalf("unknown field: %v, want a line-numbered error", err)
	}
}

func TestWatcherKeepsOldConfigOnBadFileAndReportsChanges(t *testing.T) {
	path := filepath.Join(t.TempDir(), "g.yaml")
	write := func(s string, at time.Time) {
		if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(path, at, at); err != nil {
			t.Fatal(err)
		}
	}
	t0 := time.Now().Add(-time.Hour)
	write(validYAML, t0)
	w, err := NewWatcher(path)
	if err != nil {
		t.Fatal(err)
	}
	var changes []Change
	var errs []error
	w.OnChange = func(_ context.Context, c Change) error { changes = append(changes, c); return nil }
	w.OnError = func(err error) { errs = append(errs, err) }
	if w.Check(context.Background()) {
		t.Fatal("unchanged file reported as a change")
	}
	write("pools:\n  a100-east: {stage: sideways}\n", t0.Add(time.Minute))
	if w.Check(context.Background()) || len(errs) != 1 || w.Current().Pools["a100-east"].Stage != vocab.StageTrial {
		t.Fatalf("bad file: errors %v, stage %s; want the old config kept", errs, w.Current().Pools["a100-east"].Stage)
	}
	write("pools:\n  a100-east: {stage: automate}\n", t0.Add(2*time.Minute))
	if !w.Check(context.Background()) || len(changes) != 1 || changes[0].Old.Pools["a100-east"].Stage != vocab.StageTrial ||
		w.Current().Pools["a100-east"].Stage != vocab.StageAutomate {
		t.Fatalf("good file: changes %+v", changes)
	}
}

func TestClassify(t *testing.T) {
	c := Default()
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
	c := Default()
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
	c := Default()
	c.LowRiskQueues = []string{"exp"}
	c.Reclaim.Rules = []ModeRule{{Mode: vocab.ModeAuto}}
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
		if d := c.DecideMode(tc.stage, "p", tc.queue, vocab.ClassFailed, tc.protected); d.Mode != tc.want || d.Why == "" {
			t.Errorf("%s/%s/protected=%v: %+v, want %s", tc.stage, tc.queue, tc.protected, d, tc.want)
		}
	}
}
