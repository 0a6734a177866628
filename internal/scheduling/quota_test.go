package scheduling

import (
	"reflect"
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

// TestQuotaLedger checks the accounting GET /v1/quotas reports: used from
// the running jobs' allocations, borrowed beyond nominal, and the cohort's
// borrowed total lent by the lenders in proportion to their unused nominal
// quota, largest remainder first, summing exactly to what is borrowed.
func TestQuotaLedger(t *testing.T) {
	n := mkNode("n1", 8, "A100", 81920, 0)
	s := &Snapshot{Pools: []Pool{mkPool("p", n), mkPool("q", mkNode("m1", 2, "A100", 81920, 0))}, Quotas: []Quota{
		{Project: "team", Pool: "p", NominalMilli: 1000, BorrowingLimitMilli: 4000},
		{Project: "a", Pool: "p", NominalMilli: 3000},
		{Project: "b", Pool: "p", NominalMilli: 2000},
		{Project: "c", Pool: "p", NominalMilli: 1500},
		{Project: "a", Pool: "p", NominalMilli: 9000}, // duplicate: the first row wins, as in Plan
		{Project: "team", Pool: "q", NominalMilli: 2000},
	}}
	// team holds 3 GPUs (2000 borrowed); b holds 1 GPU; a and c hold none.
	for i, owner := range []string{"team", "team", "team", "b"} {
		r := mkRunning("r"+string(rune('0'+i)), vocab.TierStandard, "p", "n1", time.Hour, n.GPUs[i].UUID)
		r.Project = owner
		withRunning(s, r)
	}
	got := QuotaLedger(s)
	// Unused: a 3000, b 1000, c 1500 (U = 5500); B = 2000.
	// Shares 2000·3000/5500 = 1090.9, ·1000/5500 = 363.6, ·1500/5500 = 545.5:
	// floors 1090 + 363 + 545 = 1998, the 2 left go to a (.91) then b (.64).
	team := []QuotaBorrower{{Project: "team", BorrowedMilli: 2000}}
	want := []QuotaUsage{
		{Pool: "p", Project: "a", NominalMilli: 3000, LentOutMilli: 1091, LentTo: team},
		{Pool: "p", Project: "b", NominalMilli: 2000, UsedMilli: 1000, LentOutMilli: 364, LentTo: team},
		{Pool: "p", Project: "c", NominalMilli: 1500, LentOutMilli: 545, LentTo: team},
		{Pool: "p", Project: "team", NominalMilli: 1000, BorrowingLimitMilli: 4000, UsedMilli: 3000, BorrowedMilli: 2000},
		{Pool: "q", Project: "team", NominalMilli: 2000},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("ledger\n got %+v\nwant %+v", got, want)
	}
	var lent int64
	for _, u := range got {
		lent += u.LentOutMilli
	}
	if lent != 2000 {
		t.Fatalf("lent out %d in all, want the 2000 borrowed", lent)
	}
	// A quota lowered below use: B = 2000 exceeds U = 500, only 500 is lent.
	s.Quotas = []Quota{{Project: "team", Pool: "p", NominalMilli: 1000, BorrowingLimitMilli: 4000}, {Project: "a", Pool: "p", NominalMilli: 500}}
	got = QuotaLedger(s)
	if got[0].Project != "a" || got[0].LentOutMilli != 500 || got[1].BorrowedMilli != 2000 {
		t.Fatalf("over-borrowed cohort: %+v", got)
	}
	// No quotas: nothing to account.
	if got := QuotaLedger(&Snapshot{Pools: s.Pools, Running: s.Running, Allocations: s.Allocations}); got != nil {
		t.Fatalf("no quotas: %+v", got)
	}
}
