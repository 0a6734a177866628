package activities

import (
	"context"

	"github.com/gpugov/gpugov/internal/governance"
	"github.com/gpugov/gpugov/internal/scheduling"
)

// downgradeReader is the part of *store.Store that says which jobs had their
// recovery evidence downgraded by a wrong-step resume; a Store without it (a
// test double) marks none.
type downgradeReader interface {
	ResumeDowngradedJobs(ctx context.Context, jobIDs []string) (map[string]bool, error)
}

// addGovernance completes a loaded snapshot with what the store's snapshot
// does not carry: the protection windows of the governance configuration in
// force (so Plan never proposes a victim inside one) and the downgrade of
// running jobs' recovery evidence (so Plan never proposes a job that resumed
// from the wrong step, until a verified resume).
func (a *Scheduler) addGovernance(ctx context.Context, snap *scheduling.Snapshot) error {
	if cfg := a.governance(); cfg != nil {
		snap.ProtectionWindows = append(snap.ProtectionWindows, cfg.Windows()...)
	}
	dr, ok := a.Store.(downgradeReader)
	if !ok || len(snap.Running) == 0 {
		return nil
	}
	ids := make([]string, len(snap.Running))
	for i := range snap.Running {
		ids[i] = snap.Running[i].ID
	}
	down, err := dr.ResumeDowngradedJobs(ctx, ids)
	if err != nil {
		return err
	}
	for i := range snap.Running {
		if down[snap.Running[i].ID] {
			snap.Running[i].Recovery.ResumeDowngraded = true
		}
	}
	return nil
}

// governance returns the governance configuration in force, or nil when the
// Scheduler has no source (no protection windows apply).
func (a *Scheduler) governance() *governance.Config {
	if a.Governance == nil {
		return nil
	}
	return a.Governance()
}
