package activities

import (
	"github.com/gpugov/gpugov/internal/policy"
	"github.com/gpugov/gpugov/internal/scheduling"
)

// addGovernance completes a loaded snapshot with what the store's snapshot
// does not carry: the protection windows of the policy in force, so Plan
// never proposes a victim inside one, and the projects' fair shares from
// its project weights (policy.ApplyProjectWeights). (Downgraded recovery
// evidence comes with the snapshot's recovery columns.)
func (a *Scheduler) addGovernance(snap *scheduling.Snapshot) {
	if cfg := a.governance(); cfg != nil {
		snap.ProtectionWindows = append(snap.ProtectionWindows, cfg.Windows()...)
		policy.ApplyProjectWeights(snap.Usage, cfg.FairShare.ProjectWeights)
	}
}

// governance returns the policy in force, or nil when the Scheduler has no
// source (no protection window or project weight applies).
func (a *Scheduler) governance() *policy.Policy {
	if a.Governance == nil {
		return nil
	}
	return a.Governance()
}
