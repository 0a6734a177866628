package scheduling

import (
	"cmp"
	"slices"
	"strconv"

	"github.com/gpugov/gpugov/internal/vocab"
)

// quotaRow is one project's quota in a pool with its current usage in milli-GPU.
type quotaRow struct {
	q    Quota
	used int64
	// releases caches quotaReleases by shortfall in milli-GPU (which
	// follows used as the cycle charges it); ends are the indices in the
	// pool's ends of the project's running jobs there, listed on first
	// need (endsDone).
	releases map[int64][]ExpectedRelease
	ends     []int32
	endsDone bool
}

// poolQuota is the Kueue-style quota accounting of one pool. The cohort is
// the set of projects with a row in the pool; nominal and used are its sums.
type poolQuota struct {
	rows          map[string]*quotaRow // by project
	nominal, used int64
	reclaim       *poolReclaim // borrowing that gives back (reclaim.go); set by newCycle
}

// quotaState holds every pool's quota accounting for one cycle. A project's
// usage in a pool is the milli-GPU of its allocations there. A project with no
// quota row in a pool is unlimited there (it neither lends nor borrows).
type quotaState struct {
	pools map[string]*poolQuota
}

// newQuotaState indexes the quotas (the first row of a duplicate project/pool
// pair wins) and charges each allocation to the project of its running job.
// Allocations whose job is not in Running have no known project and count
// only against capacity.
func newQuotaState(s *Snapshot, ci *capacityIndex, projectOf map[string]string) *quotaState {
	qs := &quotaState{pools: make(map[string]*poolQuota)}
	for _, q := range s.Quotas {
		pq := qs.pools[q.Pool]
		if pq == nil {
			pq = &poolQuota{rows: make(map[string]*quotaRow)}
			qs.pools[q.Pool] = pq
		}
		if _, dup := pq.rows[q.Project]; dup {
			continue
		}
		pq.rows[q.Project] = &quotaRow{q: q}
		pq.nominal += q.NominalMilli
	}
	if len(qs.pools) == 0 {
		return qs
	}
	for i := range s.Allocations {
		a := &s.Allocations[i]
		project, ok := projectOf[a.JobID]
		if !ok {
			continue
		}
		if pq := qs.pools[allocationPool(a, ci)]; pq != nil {
			pq.charge(pq.rows[project], allocationMilli(a))
		}
	}
	return qs
}

// runningProjects maps each running job to its project, the owner quotas
// charge its allocation to; nil when the snapshot has no quota (only quotas
// need it).
func runningProjects(s *Snapshot) map[string]string {
	if len(s.Quotas) == 0 {
		return nil
	}
	projectOf := make(map[string]string, len(s.Running))
	for i := range s.Running {
		projectOf[s.Running[i].ID] = s.Running[i].Project
	}
	return projectOf
}

// allocationPool is the allocation's pool, or that of its first known GPU.
func allocationPool(a *Allocation, ci *capacityIndex) string {
	if a.Pool != "" {
		return a.Pool
	}
	for _, sh := range a.GPUs {
		if ps := ci.poolOfGPU(sh.UUID); ps != nil {
			return ps.name
		}
	}
	return ""
}

// allocationMilli is the allocation's total milli-GPU.
func allocationMilli(a *Allocation) int64 {
	var m int64
	for _, sh := range a.GPUs {
		m += int64(sh.Milli)
	}
	return m
}

// charge adds milli-GPU to a project's usage (row nil: unlimited, nothing to
// account).
func (pq *poolQuota) charge(row *quotaRow, milli int64) {
	if row == nil {
		return
	}
	row.used += milli
	pq.used += milli
}

// quotaVerdict is the quota decision for one request.
type quotaVerdict struct {
	ok       bool
	borrowed bool      // admitted beyond nominal quota
	lender   bool      // has a row and stays within nominal: may reclaim borrowed GPUs
	row      *quotaRow // nil when the project is unlimited in the pool
	need     int64     // the request in milli-GPU
	why      string    // for a refusal: what blocked it, with numbers
}

// canBorrow reports whether a tier may borrow beyond nominal quota: only
// standard and experiment work does (Kueue borrowing for best-effort lanes).
func canBorrow(t vocab.Tier) bool { return t == vocab.TierStandard || t == vocab.TierExperiment }

// check decides whether the project of quota row r (nil: no row, unlimited)
// may take need more milli-GPU in the pool:
// within nominal; or borrowing (standard/experiment only) up to nominal +
// borrowing limit when the cohort's unused nominal quota covers it, i.e.
// cohort usage + need ≤ cohort nominal (Kueue admits borrowing only from
// unused cohort quota).
func (pq *poolQuota) check(r *quotaRow, tier vocab.Tier, need int64) quotaVerdict {
	if r == nil || need == 0 {
		return quotaVerdict{ok: true, need: need}
	}
	v := quotaVerdict{row: r, need: need}
	after := r.used + need
	if after <= r.q.NominalMilli {
		v.ok, v.lender = true, true
		return v
	}
	switch {
	case !canBorrow(tier):
		v.why = "tier " + tier.String() + " may not borrow"
	case after > r.q.NominalMilli+r.q.BorrowingLimitMilli:
		v.why = "borrowing limit " + strconv.FormatInt(r.q.BorrowingLimitMilli, 10) + " milli-GPU would be exceeded"
	case pq.used+need > pq.nominal:
		// Equivalent to: the part beyond own nominal exceeds the other projects'
		// unused nominal quota net of what they already borrow.
		othersUnused := (pq.nominal - r.q.NominalMilli) - (pq.used - r.used)
		v.why = "unused nominal quota of other projects is " + strconv.FormatInt(max(0, othersUnused), 10) +
			" milli-GPU, less than the " + strconv.FormatInt(after-r.q.NominalMilli, 10) + " to borrow"
	default:
		v.ok, v.borrowed = true, true
	}
	return v
}

// borrowing is one project's use beyond its nominal quota in a pool, in milli-GPU.
type borrowing struct {
	project string
	milli   int64
}

// borrowers lists the projects of the pool using more than their nominal quota, by project name.
func (pq *poolQuota) borrowers() []borrowing {
	var out []borrowing
	for project, r := range pq.rows {
		if r.used > r.q.NominalMilli {
			out = append(out, borrowing{project: project, milli: r.used - r.q.NominalMilli})
		}
	}
	slices.SortFunc(out, func(a, b borrowing) int { return cmp.Compare(a.project, b.project) })
	return out
}

// QuotaBorrower is one project of a cohort using more than its nominal
// quota, and by how much, in milli-GPU.
type QuotaBorrower struct {
	Project       string
	BorrowedMilli int64
}

// QuotaUsage is one project's quota in one pool with what the scheduler's
// accounting charges against it, in milli-GPU (docs/design.md §5, quota
// accounting): the quota itself; Used, the milli-GPU of the project's
// running jobs' allocations in the pool; Borrowed, the part of Used beyond
// Nominal; LentOut, the part of the project's unused nominal quota that
// the cohort's borrowers use (the cohort's borrowed total split over its
// lenders in proportion to their unused nominal quota); and LentTo, the
// cohort's borrowers with what each borrows in all (nil when LentOut is 0).
type QuotaUsage struct {
	Pool                string
	Project             string
	NominalMilli        int64
	BorrowingLimitMilli int64
	UsedMilli           int64
	BorrowedMilli       int64
	LentOutMilli        int64
	LentTo              []QuotaBorrower
}

// QuotaLedger returns the quota accounting of a snapshot, one row per quota
// (the first of a duplicate project/pool pair), ordered by pool then
// project. It is the accounting Plan admits jobs with (newQuotaState's
// charges), so what it reports is what the next cycle decides on.
//
// Lending (docs/design.md §5): quota is pooled in the pool's cohort (Kueue),
// so no GPU is lent by one lender to one borrower; a lender's LentOut is
// its share of B = Σ Borrowed, split over the lenders in proportion to
// their unused nominal quota U_i = Nominal_i − Used_i (U = Σ U_i): LentOut_i
// = min(B, U) × U_i / U, rounded down, with the milli-GPU the rounding
// leaves handed one each to the lenders with the largest remainders (then
// the largest U_i, then by project name), so that Σ LentOut = min(B, U).
// B exceeds U only after a quota was lowered below what is already used;
// the excess is then lent by nobody.
func QuotaLedger(s *Snapshot) []QuotaUsage {
	qs := newQuotaState(s, buildCapacity(s), runningProjects(s))
	names := make([]string, 0, len(qs.pools))
	for name := range qs.pools {
		names = append(names, name)
	}
	slices.Sort(names)
	var out []QuotaUsage
	for _, name := range names {
		out = append(out, qs.pools[name].ledger(name)...)
	}
	return out
}

// ledger is one pool's rows of QuotaLedger, by project.
func (pq *poolQuota) ledger(pool string) []QuotaUsage {
	borrowers := pq.borrowers()
	var borrowed, unused int64
	lentTo := make([]QuotaBorrower, len(borrowers))
	for i, b := range borrowers {
		borrowed += b.milli
		lentTo[i] = QuotaBorrower{Project: b.project, BorrowedMilli: b.milli}
	}
	out := make([]QuotaUsage, 0, len(pq.rows))
	for project, r := range pq.rows {
		u := QuotaUsage{Pool: pool, Project: project, NominalMilli: r.q.NominalMilli,
			BorrowingLimitMilli: r.q.BorrowingLimitMilli, UsedMilli: r.used}
		if r.used > r.q.NominalMilli {
			u.BorrowedMilli = r.used - r.q.NominalMilli
		} else {
			unused += r.q.NominalMilli - r.used
		}
		out = append(out, u)
	}
	slices.SortFunc(out, func(a, b QuotaUsage) int { return cmp.Compare(a.Project, b.Project) })
	lend := min(borrowed, unused)
	if lend == 0 {
		return out
	}
	// Largest-remainder split of lend over the lenders by unused quota.
	type share struct {
		i              int
		unused, remain int64
	}
	var shares []share
	var given int64
	for i := range out {
		ui := out[i].NominalMilli - out[i].UsedMilli
		if ui <= 0 {
			continue
		}
		// lend ≤ unused and ui ≤ unused, both in milli-GPU of one pool:
		// the product fits int64 for any pool below 3 million GPUs.
		out[i].LentOutMilli = lend * ui / unused
		given += out[i].LentOutMilli
		shares = append(shares, share{i: i, unused: ui, remain: lend * ui % unused})
	}
	slices.SortStableFunc(shares, func(a, b share) int {
		if c := cmp.Compare(b.remain, a.remain); c != 0 {
			return c
		}
		return cmp.Compare(b.unused, a.unused) // then by project: out is sorted and the sort is stable
	})
	for k := 0; given < lend; k++ {
		out[shares[k].i].LentOutMilli++
		given++
	}
	for i := range out {
		if out[i].LentOutMilli > 0 {
			out[i].LentTo = slices.Clone(lentTo)
		}
	}
	return out
}
