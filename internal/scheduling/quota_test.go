package scheduling

import (
	"strings"
	"testing"
	"time"

	"github.com/gpugov/gpugov/internal/vocab"
)

// TestQuota checks Kueue-style admission: within nominal, borrowing (standard
// and experiment only, up to the borrowing limit, from the cohort's unused
// nominal quota), and unlimited projects without a row.
func TestQuota(t *testing.T) {
	tests := []struct {
		name     string
		tier     vocab.Tier
		gpus     int
		quotas   []Quota
		used     int // GPUs "team" already holds
		placed   bool
		borrowed bool
		why      string
	}{
		{"within nominal", vocab.TierStandard, 2, []Quota{{Project: "team", Pool: "p", NominalMilli: 4000}}, 2, true, false, ""},
		{"borrows idle quota", vocab.TierStandard, 2, []Quota{
			{Project: "team", Pool: "p", NominalMilli: 2000, BorrowingLimitMilli: 4000},
			{Project: "other", Pool: "p", NominalMilli: 6000}}, 2, true, true, ""},
		{"experiment borrows too", vocab.TierExperiment, 2, []Quota{
			{Project: "team", Pool: "p", NominalMilli: 2000, BorrowingLimitMilli: 4000},
			{Project: "other", Pool: "p", NominalMilli: 6000}}, 2, true, true, ""},
		{"key-project may not borrow", vocab.TierKeyProject, 2, []Quota{
			{Project: "team", Pool: "p", NominalMilli: 2000, BorrowingLimitMilli: 4000},
			{Project: "other", Pool: "p", NominalMilli: 6000}}, 2, false, false, "may not borrow"},
		{"beyond the borrowing limit", vocab.TierStandard, 4, []Quota{
			{Project: "team", Pool: "p", NominalMilli: 2000, BorrowingLimitMilli: 2000},
			{Project: "other", Pool: "p", NominalMilli: 6000}}, 2, false, false, "borrowing limit 2000"},
		{"cohort has nothing to lend", vocab.TierStandard, 2, []Quota{
			{Project: "team", Pool: "p", NominalMilli: 2000, BorrowingLimitMilli: 4000},
			{Project: "other", Pool: "p", NominalMilli: 1000}}, 2, false, false, "unused nominal quota of other projects is 1000 milli-GPU, less than the 2000 to borrow"},
		{"no row is unlimited", vocab.TierKeyProject, 4, []Quota{{Project: "other", Pool: "p", NominalMilli: 1000}}, 2, true, false, ""},
		{"row in another pool only", vocab.TierKeyProject, 4, []Quota{{Project: "team", Pool: "q", NominalMilli: 0}}, 2, true, false, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			n := mkNode("n1", 8, "A100", 81920, 0)
			j := mkJob("j", tc.tier, tc.gpus, "p", 0)
			j.Project = "team"
			s := &Snapshot{Pools: []Pool{mkPool("p", n)}, Pending: []PendingJob{j}, Quotas: tc.quotas}
			for i := 0; i < tc.used; i++ {
				r := mkRunning("held"+string(rune('0'+i)), vocab.TierStandard, "p", "n1", time.Hour, n.GPUs[i].UUID)
				r.Project = "team"
				withRunning(s, r)
			}
			res := Plan(s, testPolicy(), t0)
			pl := placementOf(res, "j")
			if (pl != nil) != tc.placed {
				t.Fatalf("placed %v, want %v: %+v", pl != nil, tc.placed, res.Waiting)
			}
			if pl != nil && pl.Borrowed != tc.borrowed {
				t.Fatalf("borrowed %v, want %v", pl.Borrowed, tc.borrowed)
			}
			if pl == nil {
				w := waitOf(res, "j")
				if w.Reason != vocab.ReasonQuotaExhausted || !strings.Contains(w.Detail, tc.why) {
					t.Fatalf("wait %+v, want quota_exhausted with %q", w, tc.why)
				}
			}
		})
	}
}

// TestQuotaChargedWithinCycle checks that placements of this cycle count
// against the quota of later jobs of the same project.
func TestQuotaChargedWithinCycle(t *testing.T) {
	n := mkNode("n1", 8, "A100", 81920, 0)
	a := mkJob("a", vocab.TierKeyProject, 2, "p", time.Minute)
	b := mkJob("b", vocab.TierKeyProject, 2, "p", 0)
	a.Project, b.Project = "team", "team"
	s := &Snapshot{Pools: []Pool{mkPool("p", n)}, Pending: []PendingJob{a, b},
		Quotas: []Quota{{Project: "team", Pool: "p", NominalMilli: 3000}}}
	res := Plan(s, testPolicy(), t0)
	if placementOf(res, "a") == nil || waitOf(res, "b") == nil || waitOf(res, "b").Reason != vocab.ReasonQuotaExhausted {
		t.Fatalf("placements %+v waiting %+v", res.Placements, res.Waiting)
	}
}
