package scheduling

import (
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gpugov/gpugov/internal/plural"
	"github.com/gpugov/gpugov/internal/vocab"
)

// victimState is one running job as a possible preemption victim.
type victimState struct {
	run      *RunningJob
	allocID  string
	pool     *poolState
	gpus     []int32 // indices into pool.gpus
	milli    []int32 // milli-GPU held on each of gpus
	node     int32   // host node (CPU and memory are charged there); -1 unknown
	cpu, mem int64
	loss     float64 // estimated effective run loss in GPU-seconds
	tier     vocab.Tier
	borrowed bool
	gate     string // why the victim is never eligible; "" when it may be
	// standing is the part of gate that also holds for a reclaim of lent
	// quota: recovery evidence and protection, not the run-time and
	// anti-thrash gates (docs/design.md §5, borrowing that gives back).
	standing string
	// reclaimable marks an allocation holding lent quota: borrowed, of a
	// project borrowing at the cycle's start (markReclaimable).
	reclaimable bool
	lowRisk     bool
	used        bool // already proposed in this cycle
}

// victimIndex holds the running jobs of the snapshot (in input order; every
// order that matters is sorted with job IDs breaking ties) by pool and node.
type victimIndex struct {
	all    []victimState
	byNode map[*poolState][][]int32 // per pool, per node: victims holding GPUs there
	byPool map[*poolState][]int32
	byJob  map[string]int32 // built on first need (jobIndex)
}

// victimsIndex returns the running jobs indexed as possible victims, built on
// first need: a cycle without preemption work never pays for it.
func (c *cycle) victimsIndex() *victimIndex {
	if c.victims == nil {
		c.victims = c.buildVictims()
	}
	return c.victims
}

// compareID orders two victims by job ID.
func (vx *victimIndex) compareID(a, b int32) int {
	return strings.Compare(vx.all[a].run.ID, vx.all[b].run.ID)
}

// jobIndex returns the victim index of a running job by ID.
func (vx *victimIndex) jobIndex(id string) (int32, bool) {
	if vx.byJob == nil {
		vx.byJob = make(map[string]int32, len(vx.all))
		for i := range vx.all {
			vx.byJob[vx.all[i].run.ID] = int32(i)
		}
	}
	i, ok := vx.byJob[id]
	return i, ok
}

// buildVictims indexes every running job with its own Allocation, its
// estimated loss and the tier-independent eligibility gate. The per-victim
// GPU lists share one backing array.
func (c *cycle) buildVictims() *victimIndex {
	s := c.s
	shares := 0
	for i := range s.Running {
		shares += len(s.Running[i].Allocation.GPUs)
	}
	vx := &victimIndex{byNode: make(map[*poolState][][]int32), byPool: make(map[*poolState][]int32),
		all: make([]victimState, 0, len(s.Running))}
	backing := make([]int32, 0, 2*shares)
	for i := range s.Running {
		r := &s.Running[i]
		v, ok := c.newVictim(r, &backing)
		if !ok {
			continue
		}
		idx := int32(len(vx.all))
		vx.all = append(vx.all, v)
		if vx.byPool[v.pool] == nil {
			vx.byPool[v.pool] = make([]int32, 0, len(s.Running))
		}
		vx.byPool[v.pool] = append(vx.byPool[v.pool], idx)
	}
	for _, ps := range c.cap.sorted {
		if list, ok := vx.byPool[ps]; ok {
			vx.byNode[ps] = victimsByNode(ps, vx.all, list)
		}
	}
	c.markReclaimable(vx)
	return vx
}

// victimsByNode groups a pool's victims by the nodes of their GPUs, each list
// in victim order, all lists sharing one backing array.
func victimsByNode(ps *poolState, all []victimState, list []int32) [][]int32 {
	counts := make([]int32, len(ps.nodes)+1)
	for _, vi := range list {
		last := int32(-1)
		for _, gi := range all[vi].gpus {
			if n := ps.gpus[gi].node; n != last {
				counts[n+1]++
				last = n
			}
		}
	}
	for i := 1; i < len(counts); i++ {
		counts[i] += counts[i-1]
	}
	flat := make([]int32, counts[len(ps.nodes)])
	fill := slices.Clone(counts[:len(ps.nodes)])
	for _, vi := range list {
		last := int32(-1)
		for _, gi := range all[vi].gpus {
			if n := ps.gpus[gi].node; n != last && (fill[n] == counts[n] || flat[fill[n]-1] != vi) {
				flat[fill[n]] = vi
				fill[n]++
				last = n
			}
		}
	}
	out := make([][]int32, len(ps.nodes))
	for n := range out {
		out[n] = flat[counts[n]:fill[n]:fill[n]]
	}
	return out
}

// newVictim describes one running job; false when none of its GPUs is known.
// Its GPU indices and shares are appended to backing.
func (c *cycle) newVictim(r *RunningJob, backing *[]int32) (victimState, bool) {
	a := &r.Allocation
	v := victimState{run: r, allocID: a.ID, node: -1, cpu: a.CPUMilli, mem: a.MemoryMiB, borrowed: a.Borrowed, tier: r.Tier}
	start := len(*backing)
	milli := c.scratch[:0]
	var gpuEquiv float64
	for _, sh := range a.GPUs {
		ref, ok := c.cap.locate(a.Pool, a.Node, sh.UUID)
		if !ok || (v.pool != nil && ref.pool != v.pool) {
			continue
		}
		v.pool = ref.pool
		*backing = append(*backing, ref.idx)
		milli = append(milli, int32(sh.Milli))
		gpuEquiv += float64(sh.Milli) / MilliPerGPU
	}
	n := len(milli)
	*backing = append(*backing, milli...)
	c.scratch = milli
	if v.pool == nil {
		return v, false
	}
	v.gpus = (*backing)[start : start+n : start+n]
	v.milli = (*backing)[start+n : start+2*n : start+2*n]
	v.node = v.pool.nodeIndex(a.Node)
	v.loss = gpuEquiv * (c.sinceCheckpoint(r) + c.p.Preemption.SaveRestoreSeconds)
	v.standing = c.standingGate(r)
	v.gate = v.standing
	if v.gate == "" {
		v.gate = c.churnGate(r)
	}
	if q := c.queues[r.Queue]; q != nil {
		v.lowRisk = q.LowRisk
	}
	return v, true
}

// sinceCheckpoint is the seconds of work a victim would lose now: since the
// later of its run start and its last valid checkpoint.
func (c *cycle) sinceCheckpoint(r *RunningJob) float64 {
	from := r.StartedAt
	if cp := r.Recovery.LastCheckpoint; cp != nil && cp.At.After(from) {
		from = cp.At
	}
	return max(0, c.now.Sub(from).Seconds())
}

// victimGate returns why a running job may never be a victim now, or "" when
// only the tier (or borrowing) rule remains to be checked: its standing gate,
// else its churn gate.
func (c *cycle) victimGate(r *RunningJob) string {
	if g := c.standingGate(r); g != "" {
		return g
	}
	return c.churnGate(r)
}

// standingGate returns why a running job may not be a victim of any
// preemption, a reclaim of lent quota included, or "". Only jobs with
// recovery evidence are preempted (docs/design.md invariant 5), and not while
// that evidence is downgraded by a wrong-step resume; protected jobs and
// queues and protection windows are spared.
func (c *cycle) standingGate(r *RunningJob) string {
	pp := &c.p.Preemption
	switch {
	case !r.Recovery.Checkpointable:
		return "not checkpointable"
	case r.Recovery.ResumeDowngraded:
		return "recovery evidence downgraded by a wrong-step resume; not preempted until a verified resume"
	case pp.RequireVerifiedResume:
		if g := c.evidenceGate(&r.Recovery); g != "" {
			return g
		}
	}
	switch {
	case r.Protected:
		return "protected job"
	case c.queues[r.Queue] != nil && c.queues[r.Queue].Protected:
		return "protected queue"
	case c.inProtectionWindow(r.Queue):
		return "inside a protection window"
	}
	return ""
}

// evidenceKey is one profile's record, the key of cycle.evidenceGates.
type evidenceKey struct {
	profile          string
	verified, failed int
}

// evidenceGate is evidenceRule for the cycle's policy, each record's text
// built once per cycle (buildVictims asks for every running job). Only the
// victim index's builder calls it.
func (c *cycle) evidenceGate(rec *RecoveryEvidence) string {
	k := evidenceKey{rec.Profile, rec.ProfileVerifiedResumes, rec.ProfileFailedResumes}
	if g, ok := c.evidenceGates[k]; ok {
		return g
	}
	g := evidenceRule(&c.p.Preemption, rec)
	if c.evidenceGates == nil {
		c.evidenceGates = map[evidenceKey]string{}
	}
	c.evidenceGates[k] = g
	return g
}

// evidenceRule applies the evidence rule (docs/design.md §5): the job's
// recovery profile needs at least MinVerifiedResumes (at least 1) verified
// resumes and a failure rate of at most MaxResumeFailureRate within the
// policy's window. It returns why the rule is not met, or "".
func evidenceRule(pp *PreemptionPolicy, rec *RecoveryEvidence) string {
	need := max(pp.MinVerifiedResumes, 1)
	profile := rec.Profile
	if profile == "" {
		profile = "(none)"
	}
	window := windowText(pp.EvidenceWindowSeconds)
	if rec.ProfileVerifiedResumes < need {
		return "recovery profile " + profile + " has " + plural.Count(rec.ProfileVerifiedResumes, "verified resume", "verified resumes") +
			window + ", " + strconv.Itoa(need) + " required"
	}
	if rate, ok := rec.ProfileFailureRate(); ok && rate > pp.MaxResumeFailureRate {
		return "recovery profile " + profile + " failed " + strconv.Itoa(rec.ProfileFailedResumes) + " of " +
			strconv.Itoa(rec.ProfileFailedResumes+rec.ProfileVerifiedResumes) + " resumes" + window + " (" +
			strconv.FormatFloat(100*rate, 'f', 0, 64) + "%, more than the " +
			strconv.FormatFloat(100*pp.MaxResumeFailureRate, 'f', 0, 64) + "% allowed)"
	}
	return ""
}

// windowText is " in the last N days" (or hours, or seconds) for a window of
// seconds; "" when there is none.
func windowText(seconds float64) string {
	switch {
	case seconds <= 0:
		return ""
	case seconds >= 86400 && int64(seconds)%86400 == 0:
		return " in the last " + strconv.FormatInt(int64(seconds)/86400, 10) + " days"
	case seconds >= 3600 && int64(seconds)%3600 == 0:
		return " in the last " + strconv.FormatInt(int64(seconds)/3600, 10) + " hours"
	}
	return " in the last " + strconv.FormatFloat(seconds, 'f', -1, 64) + " s"
}

// churnGate returns why a running job that passed its standing gate may not
// be a victim of a preemption by tier, or "": young runs and jobs preempted
// too often within the window are spared. A reclaim of lent quota does not
// ask it: a borrowed grant is on loan from its start, and a job at the
// anti-thrash limit may not borrow again (docs/design.md §5).
func (c *cycle) churnGate(r *RunningJob) string {
	pp := &c.p.Preemption
	switch {
	case c.now.Sub(r.StartedAt).Seconds() < pp.MinRuntimeSeconds:
		return "running less than the minimum run time"
	case pp.MaxPreemptions > 0 && recentPreemptions(r.RecentPreemptions, c.now, pp.WindowSeconds) >= pp.MaxPreemptions:
		return "preempted too often within the window"
	}
	return ""
}

// inProtectionWindow reports whether a window covering queue (all queues when
// the window names none) contains now: Start ≤ now < End.
func (c *cycle) inProtectionWindow(queue string) bool {
	for _, w := range c.s.ProtectionWindows {
		if c.now.Before(w.Start) || !c.now.Before(w.End) {
			continue
		}
		if len(w.Queues) == 0 || slices.Contains(w.Queues, queue) {
			return true
		}
	}
	return false
}

// recentPreemptions counts preemptions within the last windowS seconds
// (all of them when windowS ≤ 0).
func recentPreemptions(times []time.Time, now time.Time, windowS float64) int {
	n := 0
	for _, t := range times {
		if t.After(now) {
			continue
		}
		if windowS <= 0 || now.Sub(t).Seconds() < windowS {
			n++
		}
	}
	return n
}

// stageActs decides Act: automate acts, trial acts only when every victim's
// queue is low-risk, observe (or an unknown stage) only records.
func stageActs(stage vocab.AutomationStage, victims []*victimState) bool {
	switch stage {
	case vocab.StageAutomate:
		return true
	case vocab.StageTrial:
		for _, v := range victims {
			if !v.lowRisk {
				return false
			}
		}
		return true
	}
	return false
}

// tryPreemption proposes a preemption for a capacity_busy job when the policy
// allows it and returns the proposal and a phrase for the job's detail.
func (c *cycle) tryPreemption(je *jobEntry, ps *poolState, sh *shapeInfo, lender bool) (*PreemptionProposal, string) {
	if !c.p.Preemption.Enabled || sh.count == 0 {
		return nil, ""
	}
	bit := uint16(1) << (uint(je.tier&7)*2 + boolBit(lender))
	if sh.noPreempt&bit != 0 {
		return nil, ""
	}
	s := &preemptSearch{c: c, vx: c.victimsIndex(), ps: ps, sh: sh, tier: je.tier, lender: lender, freed: c.freedScratch(ps)}
	t := s.propose()
	if t == nil {
		sh.noPreempt |= bit
		return nil, ""
	}
	return c.commitProposal(je, s, t)
}

// boolBit is 1 for true.
func boolBit(b bool) uint {
	if b {
		return 1
	}
	return 0
}

// freedScratch returns a zeroed per-GPU scratch slice for the pool.
func (c *cycle) freedScratch(ps *poolState) []int32 {
	if cap(c.freed) < len(ps.gpus) {
		c.freed = make([]int32, len(ps.gpus))
	}
	return c.freed[:len(ps.gpus)]
}

// commitProposal records the chosen victims, builds the proposal, and when it
// will act, reserves the target's free GPUs and the GPUs being freed for the
// job so that lower-ranked jobs cannot take them meanwhile.
func (c *cycle) commitProposal(je *jobEntry, s *preemptSearch, t *preemptTarget) (*PreemptionProposal, string) {
	ps := s.ps
	vs := make([]*victimState, len(t.victims))
	p := &PreemptionProposal{ForJobID: je.id, Pool: ps.name, EstimatedLossGPUSeconds: t.cost.total}
	p.Candidates = s.candidateList(t)
	for i, vi := range t.victims {
		v := &c.victimsIndex().all[vi]
		v.used = true
		vs[i] = v
	}
	slices.SortStableFunc(vs, func(a, b *victimState) int {
		switch {
		case a.lowRisk != b.lowRisk && a.lowRisk:
			return -1
		case a.lowRisk != b.lowRisk:
			return 1
		}
		if c := compareFloat(a.loss, b.loss); c != 0 {
			return c
		}
		return strings.Compare(a.run.ID, b.run.ID)
	})
	for _, v := range vs {
		p.Victims = append(p.Victims, Victim{JobID: v.run.ID, AllocationID: v.allocID, GPUs: len(v.gpus), EstimatedLossGPUSeconds: v.loss})
	}
	gained := s.gainedGPUs(t)
	if !t.poolWide {
		p.Node = ps.nodes[t.node].name
	} else if len(gained) > 0 {
		p.Node = ps.nodes[ps.gpus[gained[0]].node].name
	}
	p.Act = stageActs(ps.stage, vs)
	where := "pool " + ps.name
	if p.Node != "" {
		where = "node " + p.Node
	}
	p.Reason = je.id + " (" + je.tier.String() + ") " + s.sh.desc + "; stopping " + strconv.Itoa(len(vs)) +
		" eligible job(s) on " + where + " frees " + strconv.Itoa(len(gained)) + " GPU(s) next to " +
		strconv.Itoa(t.freeBefore) + " free; estimated loss " + strconv.FormatFloat(t.cost.total, 'f', 0, 64) + " GPU-seconds"
	if p.Act {
		c.reserveForPreemption(je, ps, s.sh, t, gained)
		return p, "; preemption of " + strconv.Itoa(len(vs)) + " job(s) on " + where + " proposed"
	}
	return p, "; would preempt " + strconv.Itoa(len(vs)) + " job(s) on " + where + " (pool stage " + string(ps.stage) + ")"
}

// reserveForPreemption marks the GPUs a proposal frees plus the target's free
// ones, up to the count, for the job.
func (c *cycle) reserveForPreemption(je *jobEntry, ps *poolState, sh *shapeInfo, t *preemptTarget, gained []int32) {
	id := int32(len(ps.reservations) + 1)
	want := sh.count
	for _, gi := range gained {
		if want == 0 {
			break
		}
		ps.setGPU(gi, ps.gpus[gi].used, id)
		want--
	}
	for gi := t.first; gi < t.end && want > 0; gi++ {
		if g := &ps.gpus[gi]; sh.candidate(g, searchFree) {
			ps.setGPU(gi, g.used, id)
			want--
		}
	}
	ps.reservations = append(ps.reservations, reservation{jobID: je.id, entry: int(je.pos), forPreemption: true})
}

// reserveInProgress keeps, for a job whose preemption is running, the GPUs
// its victims hold in its pool and free matching GPUs on their nodes, up to
// the count, so lower-ranked jobs do not take them before the job is placed.
func (c *cycle) reserveInProgress(je *jobEntry, ps *poolState, sh *shapeInfo) {
	if sh == nil || sh.count == 0 {
		return
	}
	id := int32(len(ps.reservations) + 1)
	want := sh.count
	var nodes []int32
	for _, jobID := range je.job.PreemptionInProgress {
		vi, ok := c.victimsIndex().jobIndex(jobID)
		if !ok || c.victimsIndex().all[vi].pool != ps {
			continue
		}
		for _, gi := range c.victimsIndex().all[vi].gpus {
			if g := &ps.gpus[gi]; want > 0 && sh.reservable(g) {
				ps.setGPU(gi, g.used, id)
				want--
				if !slices.Contains(nodes, g.node) {
					nodes = append(nodes, g.node)
				}
			}
		}
	}
	for _, ni := range nodes {
		n := &ps.nodes[ni]
		for gi := n.first; gi < n.end && want > 0; gi++ {
			if g := &ps.gpus[gi]; sh.candidate(g, searchFree) {
				ps.setGPU(gi, g.used, id)
				want--
			}
		}
	}
	if want < sh.count {
		ps.reservations = append(ps.reservations, reservation{jobID: je.id, entry: int(je.pos), forPreemption: true})
	}
}
