package service

import (
	"context"
	"fmt"
	"time"

	"github.com/gpugov/gpugov/internal/policy"
	"github.com/gpugov/gpugov/store"
)

// Defaults of the gpu_samples retention (Config.GPUSampleRetention and
// Config.RetentionInterval).
const (
	// DefaultGPUSampleRetention is how long node agents' utilisation samples
	// are kept: 7 days, well beyond the reclaim scan's observation window
	// (policy.DefaultObservationWindowSeconds, 30 min), the only reader.
	DefaultGPUSampleRetention = 7 * 24 * time.Hour
	// DefaultRetentionInterval is how often samples and decisions older than
	// their retention are deleted.
	DefaultRetentionInterval = time.Hour
	// DefaultDecisionRetention is how long scheduling decisions are kept
	// (Config.DecisionRetention): store.DefaultDecisionRetention, 7 days.
	DefaultDecisionRetention = store.DefaultDecisionRetention
)

// observationWindow is the reclaim scan's observation window in force: the
// span of samples before now that the scan classifies idleness by
// (activities.ScanReclaims reads store.ReclaimEvidence since now − window).
func (s *Service) observationWindow() time.Duration {
	return policy.Seconds(s.currentPolicy().Reclaim.ObservationWindowSeconds)
}

// checkRetention refuses a sample retention shorter than the reclaim
// observation window of the policy loaded at start (CheckSampleRetention).
func (s *Service) checkRetention() error {
	return CheckSampleRetention(s.cfg.GPUSampleRetention, s.currentPolicy())
}

// CheckSampleRetention refuses a GPU sample retention shorter than p's
// reclaim observation window (policy reclaim.observation_window_s): the
// reclaim scan would then classify allocations by samples already deleted.
// serve checks it with the flags, so that the refusal is a usage error (exit
// 2), and again at start. It returns an error naming --gpu-sample-retention.
func CheckSampleRetention(retention time.Duration, p *policy.Policy) error {
	if w := policy.Seconds(p.Reclaim.ObservationWindowSeconds); retention < w {
		return fmt.Errorf("service: GPU sample retention %s (--gpu-sample-retention) is shorter than the reclaim "+
			"observation window %s (policy reclaim.observation_window_s): the reclaim scan reads that "+
			"much sample history; raise the retention to at least %s", retention, w, w)
	}
	return nil
}

// retentionLoop deletes the gpu_samples older than the retention, and the
// decisions older than theirs (Config.DecisionRetention), every
// RetentionInterval, first at once, until ctx ends. The cutoff is
// now − max(retention, observation window): a policy file reloaded with
// a longer window than the retention keeps the samples the scan reads (and
// says so in the log). Each pass logs how many rows it deleted; failures are
// logged and retried at the next pass. A pass runs under the store's
// retention lock (store.LockRetention): with several replicas one prunes
// while the others skip their pass, rather than deleting the same batches
// at once (docs/design.md §10 "Several replicas").
func (s *Service) retentionLoop(ctx context.Context) {
	defer s.loops.Done()
	t := time.NewTicker(s.cfg.RetentionInterval)
	defer t.Stop()
	for {
		_, err := s.store.TryWithLock(ctx, store.LockRetention, func(ctx context.Context) error {
			s.pruneGPUSamples(ctx, time.Now())
			s.pruneDecisions(ctx, time.Now())
			return nil
		})
		if err != nil && ctx.Err() == nil {
			s.cfg.Logger.Warn("retention pass not run", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// pruneGPUSamples runs one retention pass at now.
func (s *Service) pruneGPUSamples(ctx context.Context, now time.Time) {
	keep := s.cfg.GPUSampleRetention
	if w := s.observationWindow(); w > keep {
		s.cfg.Logger.Warn("GPU sample retention shorter than the reclaim observation window; keeping the window",
			"retention", keep, "observation_window", w)
		keep = w
	}
	cutoff := now.Add(-keep)
	deleted, err := s.store.PruneGPUSamples(ctx, cutoff, 0)
	if err != nil {
		if ctx.Err() == nil {
			s.cfg.Logger.Warn("GPU samples not pruned", "before", cutoff, "deleted", deleted, "err", err)
		}
		return
	}
	s.cfg.Logger.Info("GPU samples pruned", "before", cutoff, "deleted", deleted)
}

// pruneDecisions runs one decisions retention pass at now
// (store.PruneDecisions keeps every unfinished job's latest wait decision).
func (s *Service) pruneDecisions(ctx context.Context, now time.Time) {
	cutoff := now.Add(-s.cfg.DecisionRetention)
	deleted, err := s.store.PruneDecisions(ctx, cutoff, 0)
	if err != nil {
		if ctx.Err() == nil {
			s.cfg.Logger.Warn("decisions not pruned", "before", cutoff, "deleted", deleted, "err", err)
		}
		return
	}
	s.cfg.Logger.Info("decisions pruned", "before", cutoff, "deleted", deleted)
}
