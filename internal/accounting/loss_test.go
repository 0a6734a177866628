package accounting

import (
	"testing"
	"time"

	"github.com/gpugov/gpugov/internal/scheduling"
)

func TestEffectiveRunLoss(t *testing.T) {
	n := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	start := n.Add(-time.Hour)
	// No checkpoint since the notice: 300 s lost on 2 GPUs, 40 s recompute.
	l := EffectiveRunLoss(LossInput{GPUs: 2, NotifiedAt: n, RunStartedAt: start,
		Resumable: &scheduling.Checkpoint{At: n.Add(-300 * time.Second)}, ResumedAt: n.Add(time.Minute), PassedAt: n.Add(100 * time.Second)})
	if l.LostSeconds != 300 || l.SaveRestoreSeconds != 0 || l.RecomputeSeconds != 40 || l.GPUSeconds != 680 {
		t.Fatalf("%+v, want lost 300, recompute 40, 680 GPU-s", l)
	}
	// Saved 12 s after the notice: nothing lost, the save counted.
	l = EffectiveRunLoss(LossInput{GPUs: 0.5, NotifiedAt: n, RunStartedAt: start, Resumable: &scheduling.Checkpoint{At: n.Add(12 * time.Second)}})
	if l.LostSeconds != 0 || l.SaveRestoreSeconds != 12 || l.RecomputeMeasured || l.GPUSeconds != 6 {
		t.Fatalf("%+v, want save 12 s, 6 GPU-s, recompute unmeasured", l)
	}
	// No checkpoint at all: the run's whole time is lost.
	if l = EffectiveRunLoss(LossInput{GPUs: 1, NotifiedAt: n, RunStartedAt: start}); l.LostSeconds != 3600 {
		t.Fatalf("%+v, want 3600 s lost", l)
	}
}
