package scheduling

import (
	"testing"
	"time"

	"github.com/gpugov/gpugov/internal/vocab"
)

// TestAgingAheadIsAWaitingCompetitor: the job the aging clause compares
// with is the nearest higher-ranked job of the pool still waiting for GPUs —
// not one placed in this cycle, nor a held one (a reviewer found the clause
// naming a job that was placed and so no longer ahead).
func TestAgingAheadIsAWaitingCompetitor(t *testing.T) {
	n := mkNode("n", 2, "H100", 81920, 0)
	busy := mkRunning("busy", vocab.TierStandard, "p", "n", time.Hour, n.GPUs[0].UUID)
	placed := mkJob("a-placed", vocab.TierStandard, 1, "p", 3*time.Hour) // fits the free GPU
	held := mkJob("b-held", vocab.TierStandard, 2, "p", 2*time.Hour)
	held.Held = true
	waiter := mkJob("c-waits", vocab.TierStandard, 2, "p", time.Hour)
	late := mkJob("d-late", vocab.TierStandard, 2, "p", 30*time.Minute)
	s := &Snapshot{Pools: []Pool{mkPool("p", n)}, Pending: []PendingJob{placed, held, waiter, late}}
	withRunning(s, busy)
	r, _ := planBoth(t, s, "c-waits")
	if placementOf(r, "a-placed") == nil {
		t.Fatalf("a-placed not placed: %+v", r)
	}
	w := waitOf(r, "c-waits")
	if w == nil {
		t.Fatal("c-waits not waiting")
	}
	if w.Overtake != nil {
		t.Fatalf("c-waits compared with %q; no job waiting for GPUs is ahead of it", w.Overtake.AheadJobID)
	}
	if d := waitOf(r, "d-late"); d == nil || d.Overtake == nil || d.Overtake.AheadJobID != "c-waits" {
		t.Fatalf("d-late's overtake %+v, want it compared with c-waits", d)
	}
}
