package activities

import (
	"github.com/gpugov/gpugov/internal/governance"
	"github.com/gpugov/gpugov/internal/scheduling"
)

// addGovernance completes a loaded snapshot with what the store's snapshot
// does not carry: the protection windows of the governance configuration in
// force, so Plan never proposes a victim inside one. (Downgraded recovery
// evidence comes with the snapshot's recovery columns.)
func (a *Scheduler) addGovernance(snap *scheduling.Snapshot) {
	if cfg := a.governance(); cfg != nil {
		snap.ProtectionWindows = append(snap.ProtectionWindows, cfg.Windows()...)
	}
}

// governance returns the governance configuration in force, or nil when the
// Scheduler has no source (no protection windows apply).
func (a *Scheduler) governance() *governance.Config {
	if a.Governance == nil {
		return nil
	}
	return a.Governance()
}
