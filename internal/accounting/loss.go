package accounting

import (
	"time"

	"github.com/gpugov/gpugov/internal/scheduling"
)

// LossInput is what one preemption's effective run loss is computed from.
// Times are wall-clock; GPUs is the victim allocation in GPU equivalents
// (milli-GPU / 1000).
type LossInput struct {
	GPUs         float64
	NotifiedAt   time.Time
	RunStartedAt time.Time // start of the victim's run that was preempted
	// Resumable is the checkpoint the victim's next run resumes from (the
	// job's last valid checkpoint after the release); nil when it has none
	// and restarts from scratch.
	Resumable *scheduling.Checkpoint
	// ResumedAt and PassedAt are when the next run started and when it was
	// back past the step reached at the notice; zero when not observed.
	ResumedAt time.Time
	PassedAt  time.Time
}

// Loss is the effective run loss by parts, in seconds and GPU-seconds.
type Loss struct {
	LostSeconds        float64 // work since the last valid checkpoint before the notice, thrown away
	SaveRestoreSeconds float64 // from the notice until the checkpoint saved on the way out
	RecomputeSeconds   float64 // from the next run's start until it passed the step reached at notice
	RecomputeMeasured  bool    // false when the next run was not observed passing that step
	GPUSeconds         float64
}

// EffectiveRunLoss applies docs/design.md "effective run loss": GPU-seconds
// computed since the victim's last valid checkpoint (lost), plus save/restore
// time, plus recompute time until it is back at the step it had reached —
// each charged on every GPU the victim held, as scheduling's estimate
// (GPUs × (since checkpoint + save/restore)) is:
//
//	loss = GPUs × (lost + save/restore + recompute)
//	lost = notice − max(run start, checkpoint time)   when the resumable checkpoint predates the notice, else 0
//	save/restore = checkpoint time − notice            when the checkpoint was saved after the notice, else 0
//	recompute = passed − resumed                       when both were observed, else 0 (RecomputeMeasured false)
//
// The restore (loading the checkpoint) is inside recompute: the next run is
// not back at the step until it has restored.
func EffectiveRunLoss(in LossInput) Loss {
	var l Loss
	from := in.RunStartedAt
	if cp := in.Resumable; cp != nil {
		if cp.At.After(in.NotifiedAt) {
			l.SaveRestoreSeconds = cp.At.Sub(in.NotifiedAt).Seconds()
			from = in.NotifiedAt
		} else if cp.At.After(from) {
			from = cp.At
		}
	}
	l.LostSeconds = max(0, in.NotifiedAt.Sub(from).Seconds())
	if !in.ResumedAt.IsZero() && !in.PassedAt.IsZero() {
		l.RecomputeSeconds = max(0, in.PassedAt.Sub(in.ResumedAt).Seconds())
		l.RecomputeMeasured = true
	}
	l.GPUSeconds = in.GPUs * (l.LostSeconds + l.SaveRestoreSeconds + l.RecomputeSeconds)
	return l
}
