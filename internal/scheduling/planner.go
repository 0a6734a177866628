package scheduling

import (
	"slices"
	"sync"
	"time"
)

// Planner runs Plan cycle after cycle and reuses, across cycles, the part of
// the capacity index that only the inventory decides (capacityStatic: pools,
// nodes and GPUs sorted, NVLink domains, GPU classes, node label sets, and
// the free-capacity index's static counts and empty-pool views per class
// set), instead of rebuilding it from Snapshot.Pools every cycle
// (docs/design.md §2, "Reusing the static capacity index"). Its results are
// Plan's, decision for decision.
//
// Reuse is keyed on Snapshot.InventoryVersion, which the caller must change
// whenever Pools change (the store's inventory_version; the simulator's
// constant inventory), together with the snapshot's selector keys (the label
// keys its pending jobs' node selectors name, which decide the GPU classes)
// and, as a guard against a caller that forgets to move the version, the
// number of pools, nodes and GPUs. A snapshot with InventoryVersion 0 is
// always indexed afresh. A Planner keeps the plannerKeep most recently used
// indexes (selector keys can alternate as jobs with selectors come and go).
//
// The zero value is ready to use. A Planner is safe for concurrent use: the
// cached indexes are read-only but for caches built under a lock, and each
// cycle's mutable state is its own.
type Planner struct {
	mu      sync.Mutex
	entries []plannerEntry // most recently used first
}

// plannerEntry is one cached static index and the inventory version it was
// built at.
type plannerEntry struct {
	version int64
	static  *capacityStatic
}

// plannerKeep is how many static indexes a Planner keeps.
const plannerKeep = 4

// Plan is Plan(s, p, now), reusing this Planner's static capacity index when
// s's inventory is the one it was built for (see Planner). A nil Planner
// builds afresh, as Plan does.
func (pl *Planner) Plan(s *Snapshot, p *Policy, now time.Time) *Result {
	return plan(s, p, now, false, pl)
}

// static returns the static capacity index for s: a cached one when s has a
// nonzero InventoryVersion equal to its version, the same selector keys and
// the same inventory counts; else a new one, cached when the version is
// nonzero. keys is selectorKeys(s).
func (pl *Planner) static(s *Snapshot, keys []string) *capacityStatic {
	if pl == nil || s.InventoryVersion == 0 {
		return buildStatic(s, keys)
	}
	counts := countInventory(s)
	pl.mu.Lock()
	for i, e := range pl.entries {
		if e.version == s.InventoryVersion && e.static.counts == counts && slices.Equal(e.static.keys, keys) {
			copy(pl.entries[1:i+1], pl.entries[:i]) // most recently used first
			pl.entries[0] = e
			pl.mu.Unlock()
			return e.static
		}
	}
	pl.mu.Unlock()
	// Built outside the lock: a concurrent cycle on the same inventory may
	// build it too; either copy is correct.
	cs := buildStatic(s, keys)
	pl.mu.Lock()
	defer pl.mu.Unlock()
	// An entry of another version is of an inventory that has changed: only
	// the current version's entries (other selector keys) are kept.
	kept := pl.entries[:0]
	for _, e := range pl.entries {
		if e.version == s.InventoryVersion && len(kept) < plannerKeep-1 {
			kept = append(kept, e)
		}
	}
	pl.entries = append([]plannerEntry{{s.InventoryVersion, cs}}, kept...)
	return cs
}
