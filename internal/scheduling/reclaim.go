package scheduling

import (
	"slices"
	"strconv"
	"strings"
	"time"
)

// Borrowing that gives back (docs/design.md §5). A lender is a project
// whose waiting job fits within its nominal quota in the pool; when that job
// is blocked while other projects borrow, its quota is lent out:
//
//   - its preemption search may stop allocations holding lent quota
//     (reclaimable victims) of any tier, Kueue's reclaimWithinCohort, asking
//     only their standing gate (recovery evidence, protection): not the
//     minimum run time nor the anti-thrash limit;
//   - while it waits (its job blocked with borrowers in the pool, a
//     preemption in progress for it, or its victims released and it not yet
//     placed) it holds a claim on the pool: no project may borrow there, so
//     the released borrowers cannot take the GPUs back;
//   - a job preempted max_preemptions times within the window may run within
//     its project's nominal quota but may not borrow, so reclaims cannot
//     thrash it;
//   - its wait detail says to whom its quota is lent and when it comes back.

// poolReclaim is one pool's state of borrowing that gives back for a cycle.
type poolReclaim struct {
	// borrowed is each project's use beyond its nominal quota at the cycle's
	// start, in milli-GPU; projects borrowing nothing are absent.
	borrowed map[string]int64
	// claims are the lenders waiting for their lent quota, one per project,
	// in the order found.
	claims []lenderClaim
	// ends caches returnAsTheyEnd's text for the cycle (endsDone: computed).
	ends     string
	endsDone bool
	// lentTo caches lentOutPhrase's list of borrowers, valid while the
	// pool's usage is lentToUsed (usage only grows within a cycle, so an
	// unchanged total means no charge since); lentToSet: computed once.
	lentTo     string
	lentToUsed int64
	lentToSet  bool
	// waitTail caches the default ending of lentOutPhrase (no reclaim
	// proposed), which depends only on the cycle's gates and borrowers' runs.
	waitTail string
	// refusal caches borrowRefusal's claim texts for refusalClaims claims.
	refusalWhy, refusalReEval string
	refusalClaims             int
}

// lenderClaim is a lender project's claim on its lent quota: the first of
// its jobs found waiting for it.
type lenderClaim struct {
	project, jobID string
}

// startReclaim records the borrowers of every pool with capacity at the
// cycle's start, before any placement is charged.
func (c *cycle) startReclaim() {
	for _, ps := range c.cap.sorted {
		pq := ps.quota
		if pq == nil {
			continue
		}
		rc := &poolReclaim{}
		for _, b := range pq.borrowers() {
			if rc.borrowed == nil {
				rc.borrowed = make(map[string]int64)
			}
			rc.borrowed[b.project] = b.milli
		}
		pq.reclaim = rc
	}
}

// addClaim records project's claim on its lent quota (the first job wins).
func (rc *poolReclaim) addClaim(project, jobID string) {
	for _, cl := range rc.claims {
		if cl.project == project {
			return
		}
	}
	rc.claims = append(rc.claims, lenderClaim{project: project, jobID: jobID})
}

// othersBorrowedAtStart reports whether a project other than project
// borrowed in the pool at the cycle's start.
func (rc *poolReclaim) othersBorrowedAtStart(project string) bool {
	for p := range rc.borrowed {
		if p != project {
			return true
		}
	}
	return false
}

// withinNominal reports whether the job is a lender: its project has a quota
// row in the pool and the job fits within its unused nominal quota now.
func withinNominal(je *jobEntry) bool {
	return je.qrow != nil && je.qrow.used+je.need <= je.qrow.q.NominalMilli
}

// findClaims records, before the cycle places anything, the lenders of each
// pool that wait for their lent quota: a job within its project's nominal
// quota that could run in the empty pool, is neither held nor waiting for a
// prerequisite, and has a preemption in progress, or had victims released
// for it during this wait, or does not fit the pool's free GPUs while other
// projects borrow. Found before ranking matters, a claim refuses borrowing
// to jobs ranked above the lender as well.
func (c *cycle) findClaims() {
	var fits map[*shapeInfo]bool // shapes that fit the free GPUs at the start
	for i := range c.jobs {
		je := &c.jobs[i]
		if je.sh == nil || !je.sh.emptyFit || je.flags&(flagHeld|flagNotReady) != 0 || !withinNominal(je) {
			continue
		}
		rc := je.ps.quota.reclaim
		switch {
		case je.flags&flagPreempting != 0, !je.job.VictimsReleasedAt.IsZero():
		case rc.othersBorrowedAtStart(je.project) && !fits[je.sh]:
			if c.fitsFreeNow(je.ps, je.sh) {
				if fits == nil {
					fits = make(map[*shapeInfo]bool)
				}
				fits[je.sh] = true
				continue
			}
		default:
			continue
		}
		rc.addClaim(je.project, je.id)
	}
}

// fitsFreeNow reports whether the shape fits the pool's free GPUs; a miss is
// remembered on the shape (free capacity only shrinks within a cycle).
func (c *cycle) fitsFreeNow(ps *poolState, sh *shapeInfo) bool {
	if sh.noFitFree {
		return false
	}
	if _, ok := ps.search(sh, searchFree); ok {
		return true
	}
	sh.noFitFree = true
	return false
}

// markReclaimable marks the victims holding lent quota: borrowed allocations
// of projects borrowing at the cycle's start, each project's most recently
// started first, while those marked before leave part of its borrowing
// uncovered. As Kueue's reclaimWithinCohort preempts a ClusterQueue's
// workloads only while it borrows, a reclaim takes no more from a project
// than it borrows, give or take the last allocation.
func (c *cycle) markReclaimable(vx *victimIndex) {
	for _, ps := range c.cap.sorted {
		if ps.quota == nil || len(ps.quota.reclaim.borrowed) == 0 {
			continue
		}
		byProject := make(map[string][]int32)
		var projects []string
		for _, vi := range vx.byPool[ps] {
			v := &vx.all[vi]
			if _, ok := ps.quota.reclaim.borrowed[v.run.Project]; !ok || !v.borrowed {
				continue
			}
			if _, seen := byProject[v.run.Project]; !seen {
				projects = append(projects, v.run.Project)
			}
			byProject[v.run.Project] = append(byProject[v.run.Project], vi)
		}
		slices.Sort(projects)
		for _, project := range projects {
			list := byProject[project]
			slices.SortFunc(list, func(a, b int32) int {
				if c := vx.all[b].run.StartedAt.Compare(vx.all[a].run.StartedAt); c != 0 {
					return c
				}
				return vx.compareID(a, b)
			})
			var covered int64
			for _, vi := range list {
				if covered >= ps.quota.reclaim.borrowed[project] {
					break
				}
				v := &vx.all[vi]
				v.reclaimable = true
				for _, m := range v.milli {
					covered += int64(m)
				}
			}
		}
	}
}

// borrowRefusal returns why a job that the quota would let borrow may not,
// with the re-evaluation condition ("" when it may borrow): it reached the
// anti-thrash limit, or a lender claims its lent quota in the pool (the
// detail names the lender's job).
func (c *cycle) borrowRefusal(je *jobEntry, ps *poolState) (why, reEval string) {
	pp := &c.p.Preemption
	if pp.MaxPreemptions > 0 {
		if n, until, ok := thrashLimit(je.job.RecentPreemptions, c.now, pp.WindowSeconds, pp.MaxPreemptions); ok {
			why = "job " + je.id + " was preempted " + strconv.Itoa(n) + " times"
			if pp.WindowSeconds > 0 {
				why += " within " + strconv.FormatFloat(pp.WindowSeconds, 'f', -1, 64) + " s"
			}
			why += ", the anti-thrash limit: it may run within its project's nominal quota but not borrow"
			reEval = "when project " + je.project + "'s usage in pool " + ps.name + " leaves room for it within nominal quota"
			if !until.IsZero() {
				why += " before " + until.UTC().Format(time.RFC3339)
				reEval += ", or at " + until.UTC().Format(time.RFC3339) + " when a preemption leaves the window"
			}
			return why, reEval
		}
	}
	rc := ps.quota.reclaim
	claims := rc.claims
	if len(claims) == 0 {
		return "", ""
	}
	if rc.refusalClaims == len(claims) {
		return rc.refusalWhy, rc.refusalReEval
	}
	defer func() { rc.refusalWhy, rc.refusalReEval, rc.refusalClaims = why, reEval, len(claims) }()
	sorted := slices.Clone(claims)
	slices.SortFunc(sorted, func(a, b lenderClaim) int { return strings.Compare(a.project, b.project) })
	projects, jobs := make([]string, len(sorted)), make([]string, len(sorted))
	for i, cl := range sorted {
		projects[i], jobs[i] = cl.project, cl.jobID
	}
	if len(sorted) == 1 {
		why = "quota of project " + projects[0] + " is being returned to it (job " + jobs[0] + " waits for it); no project may borrow in pool " + ps.name + " meanwhile"
		reEval = "when job " + jobs[0] + " of project " + projects[0] + " is placed"
	} else {
		why = "quota of projects " + strings.Join(projects, ", ") + " is being returned to them (jobs " + strings.Join(jobs, ", ") +
			" wait for it); no project may borrow in pool " + ps.name + " meanwhile"
		reEval = "when jobs " + strings.Join(jobs, ", ") + " are placed"
	}
	return why, reEval
}

// thrashLimit reports whether preemption times reach the anti-thrash limit
// max within the last windowS seconds (all of them when windowS ≤ 0), with
// the count and the time the count falls below max again (zero without a
// window).
func thrashLimit(times []time.Time, now time.Time, windowS float64, limit int) (int, time.Time, bool) {
	var in []time.Time
	for _, t := range times {
		if !t.After(now) && (windowS <= 0 || now.Sub(t).Seconds() < windowS) {
			in = append(in, t)
		}
	}
	if len(in) < limit {
		return len(in), time.Time{}, false
	}
	if windowS <= 0 {
		return len(in), time.Time{}, true
	}
	slices.SortFunc(in, time.Time.Compare)
	return len(in), in[len(in)-limit].Add(time.Duration(windowS * float64(time.Second))), true
}

// lentOutPhrase is the part of a lender's wait detail that says its quota is
// lent out, to whom, and when it comes back ("" when no other project
// borrows in the pool): by the grace end of a preemption in progress or
// proposed to act, else as the borrowers' jobs end.
func (c *cycle) lentOutPhrase(je *jobEntry, ps *poolState, prop *PreemptionProposal, inProgress bool) string {
	lentTo := c.lentTo(ps)
	if lentTo == "" {
		return ""
	}
	var b strings.Builder
	b.WriteString("; quota of project " + je.project + " is lent out to " + lentTo)
	grace := c.p.Preemption.GraceSeconds
	graceText := strconv.FormatFloat(grace, 'f', -1, 64)
	switch {
	case inProgress && !je.job.PreemptionNoticeAt.IsZero():
		end := je.job.PreemptionNoticeAt.Add(time.Duration(grace * float64(time.Second)))
		b.WriteString("; it comes back by " + end.UTC().Format(time.RFC3339) + ", the preemption's grace end (notice + " + graceText + " s)")
	case inProgress:
		b.WriteString("; it comes back when the preemption in progress releases its victims")
	case prop != nil && prop.Act:
		end := c.now.Add(time.Duration(grace * float64(time.Second)))
		b.WriteString("; it comes back by " + end.UTC().Format(time.RFC3339) + ", the grace end of the preemption proposed (" + graceText + " s)")
	case prop != nil:
		b.WriteString("; the preemption is only recorded (pool stage " + string(ps.stage) + "): it comes back as the borrowers' jobs end")
		b.WriteString(c.returnAsTheyEnd(ps))
	default:
		rc := ps.quota.reclaim
		if rc.waitTail == "" {
			rc.waitTail = "; " + c.noReclaimWhy(ps) + ": it comes back as the borrowers' jobs end" + c.returnAsTheyEnd(ps)
		}
		b.WriteString(rc.waitTail)
	}
	return b.String()
}

// lentTo lists the pool's borrowers with what each borrows now ("" when
// none). A lender is within its nominal quota, so it is never among them.
func (c *cycle) lentTo(ps *poolState) string {
	pq := ps.quota
	rc := pq.reclaim
	if rc.lentToSet && rc.lentToUsed == pq.used {
		return rc.lentTo
	}
	var b strings.Builder
	for i, br := range pq.borrowers() {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(br.project + " (" + strconv.FormatInt(br.milli, 10) + " milli-GPU)")
	}
	rc.lentTo, rc.lentToUsed, rc.lentToSet = b.String(), pq.used, true
	return rc.lentTo
}

// noReclaimWhy says why no reclaim was proposed for a lender: preemption is
// off, a borrower's standing gate (the first by job ID), or the borrowers'
// GPUs would not free what the job needs.
func (c *cycle) noReclaimWhy(ps *poolState) string {
	if !c.p.Preemption.Enabled {
		return "preemption is off"
	}
	vx := c.victimsIndex()
	gate, gateJob := "", ""
	for _, vi := range vx.byPool[ps] {
		v := &vx.all[vi]
		if v.reclaimable && v.standing != "" && (gateJob == "" || v.run.ID < gateJob) {
			gate, gateJob = v.standing, v.run.ID
		}
	}
	if gateJob != "" {
		return "no borrower may be preempted for it (job " + gateJob + ": " + gate + ")"
	}
	return "stopping the borrowers would not free the GPUs it needs"
}

// maxEndsShown bounds the borrowers' jobs returnAsTheyEnd lists.
const maxEndsShown = 3

// returnAsTheyEnd lists the pool's jobs holding lent quota by expected end
// (StartedAt + declared run time, an estimate; unknown ones last), at most
// maxEndsShown, computed once per cycle and pool.
func (c *cycle) returnAsTheyEnd(ps *poolState) string {
	rc := ps.quota.reclaim
	if rc.endsDone {
		return rc.ends
	}
	rc.endsDone = true
	type end struct {
		job string
		at  time.Time // zero: unknown
	}
	var ends []end
	vx := c.victimsIndex()
	for _, vi := range vx.byPool[ps] {
		v := &vx.all[vi]
		if !v.reclaimable {
			continue
		}
		e := end{job: v.run.ID}
		if v.run.RunSeconds > 0 {
			e.at = v.run.StartedAt.Add(time.Duration(v.run.RunSeconds) * time.Second)
		}
		ends = append(ends, e)
	}
	slices.SortFunc(ends, func(a, b end) int {
		switch {
		case a.at.IsZero() != b.at.IsZero():
			if a.at.IsZero() {
				return 1
			}
			return -1
		case !a.at.Equal(b.at):
			return a.at.Compare(b.at)
		}
		return strings.Compare(a.job, b.job)
	})
	var b strings.Builder
	known := false
	for i, e := range ends {
		known = known || !e.at.IsZero()
		if i == maxEndsShown {
			b.WriteString(", and " + strconv.Itoa(len(ends)-i) + " more")
			break
		}
		if i == 0 {
			b.WriteString(": ")
		} else {
			b.WriteString(", ")
		}
		if e.at.IsZero() {
			b.WriteString("job " + e.job + " at an unknown time (no declared run time)")
		} else {
			b.WriteString("job " + e.job + " expected at " + e.at.UTC().Format(time.RFC3339))
		}
	}
	if known {
		b.WriteString(" (estimates from declared run times)")
	}
	rc.ends = b.String()
	return rc.ends
}
