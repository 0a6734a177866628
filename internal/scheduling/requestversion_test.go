package scheduling

import (
	"testing"

	"github.com/gpugov/gpugov/internal/vocab"
)

// TestPlacementCarriesRequestVersion: a placement names the version of the
// request it was planned on, so that the store can refuse it when the job was
// amended after the snapshot.
func TestPlacementCarriesRequestVersion(t *testing.T) {
	j := mkJob("j1", vocab.TierStandard, 1, "p", 0)
	j.RequestVersion = 42
	s := &Snapshot{Pools: []Pool{mkPool("p", mkNode("n1", 2, "A100", 81920, 0))}, Pending: []PendingJob{j}}
	res := Plan(s, testPolicy(), t0)
	p := placementOf(res, "j1")
	if p == nil || p.RequestVersion != 42 {
		t.Fatalf("placement %+v, want request version 42", p)
	}
}
