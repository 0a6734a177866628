package scheduling

import (
	"math"
	"slices"
	"strings"
	"time"

	"github.com/gpugov/gpugov/internal/vocab"
)

// DecayUsage returns gpuSeconds recorded at from, decayed to to with the given
// half-life in seconds: gpuSeconds × 2^(-(to-from)/halfLife). This is Slurm's
// PriorityDecayHalfLife rule (priority/multifactor); callers that accumulate a
// project's usage decay the running sum to each new instant before adding to it.
// A non-positive half-life means no decay, and a to before from decays nothing
// (usage never grows by being moved back in time).
func DecayUsage(gpuSeconds float64, from, to time.Time, halfLifeSeconds float64) float64 {
	if halfLifeSeconds <= 0 {
		return gpuSeconds
	}
	elapsed := to.Sub(from).Seconds()
	if elapsed <= 0 {
		return gpuSeconds
	}
	return gpuSeconds * math.Exp2(-elapsed/halfLifeSeconds)
}

// AccrueUsage returns the decayed GPU-seconds that gpus GPUs held for
// seconds contribute at the end of that interval, with the given half-life in
// seconds: ∫₀ᵈ g·2^(−(d−t)/h) dt = g·h/ln2·(1 − 2^(−d/h)), the continuous form
// of Slurm's PriorityDecayHalfLife decay (DecayUsage), so a long run's early
// hours count less than its last ones. A non-positive half-life means no
// decay (g·d); a non-positive gpus or seconds contributes 0. A project's
// usage over an interval of constant load is DecayUsage of its usage at the
// start plus AccrueUsage of the load; the store and the simulator both charge
// usage that way.
func AccrueUsage(gpus, seconds, halfLifeSeconds float64) float64 {
	if gpus <= 0 || seconds <= 0 {
		return 0
	}
	if halfLifeSeconds <= 0 {
		return gpus * seconds
	}
	return gpus * halfLifeSeconds / math.Ln2 * -math.Expm1(-seconds/halfLifeSeconds*math.Ln2)
}

// FairShareFactor is Slurm's classic fair-share factor 2^(-U/S): usage is the
// project's share of all decayed usage (0..1) and share its normalised share
// (0..1]. A non-positive share gives 0 (the project is entitled to nothing).
func FairShareFactor(usage, share float64) float64 {
	if share <= 0 {
		return 0
	}
	return math.Exp2(-usage / share)
}

// fairShareFactors returns each project's fair-share factor for one cycle.
// Every ProjectUsage row is decayed to now (rows of one project are added up,
// the largest Share kept); a project's U is its decayed usage over the total,
// and S its Share, or 1/N (N = projects in Usage) when Share is 0. Projects
// without a row have used nothing and get the factor 1. Sums run in project
// order so that no factor depends on the input order through rounding.
func fairShareFactors(usage []ProjectUsage, p *FairSharePolicy, now time.Time) map[string]float64 {
	factors := make(map[string]float64, len(usage))
	if !p.Enabled || len(usage) == 0 {
		return factors
	}
	order := make([]int, len(usage))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return strings.Compare(usage[a].Project, usage[b].Project) })
	type project struct {
		name         string
		decayed, max float64
	}
	var projects []project
	var total float64
	for _, i := range order {
		u := &usage[i]
		d := DecayUsage(u.DecayedGPUSeconds, u.AsOf, now, p.HalfLifeSeconds)
		total += d
		if n := len(projects); n > 0 && projects[n-1].name == u.Project {
			projects[n-1].decayed += d
			projects[n-1].max = max(projects[n-1].max, u.Share)
			continue
		}
		projects = append(projects, project{u.Project, d, u.Share})
	}
	equal := 1 / float64(len(projects))
	for _, pr := range projects {
		share := pr.max
		if share <= 0 {
			share = equal
		}
		var used float64
		if total > 0 {
			used = pr.decayed / total
		}
		factors[pr.name] = FairShareFactor(used, share)
	}
	return factors
}

// agingRule is one job's aging state: how its credit grows with eligible wait.
type agingRule struct {
	waitS    float64 // eligible wait seconds at now
	interval float64 // Policy.Aging.IntervalSeconds
	step     float64 // Policy.Aging.StepPoints
	capEff   float64 // the bound: CapPoints, lowered by the production ceiling
}

// credit is the aging credit after waitS seconds of eligible wait.
func (a agingRule) credit(waitS float64) float64 {
	if a.interval <= 0 || a.step <= 0 || a.capEff <= 0 {
		return 0
	}
	return math.Min(a.capEff, math.Floor(waitS/a.interval)*a.step)
}

// rawCredit is the credit before any bound, used to report AgingCapped.
func (a agingRule) rawCredit(waitS float64) float64 {
	if a.interval <= 0 || a.step <= 0 {
		return 0
	}
	return math.Floor(waitS/a.interval) * a.step
}

// eligibleWaitSeconds is AccruedAgingS plus the current eligible stretch
// (now − AgingSince, or now − WaitingSince when AgingSince is zero); a paused
// job (AgingPaused) or a zero start counts no current stretch. Which time
// earns is the caller's business: the store and the simulator stop the
// stretch while the job's reason earns no aging (accounting.AgingClock).
func eligibleWaitSeconds(j *PendingJob, now time.Time) float64 {
	w := j.AccruedAgingS
	if j.AgingPaused {
		return w
	}
	since := j.AgingSince
	if since.IsZero() {
		since = j.WaitingSince
	}
	if !since.IsZero() && now.After(since) {
		w += now.Sub(since).Seconds()
	}
	return w
}

// priorityRules is the policy's priority rule prepared for one cycle.
type priorityRules struct {
	p        *Policy
	now      time.Time
	tierBase [vocab.TierProduction + 1]float64
	prodBase float64
	hasProd  bool // TierBase names production: the aging ceiling applies
	fair     map[string]float64
}

// newPriorityRules prepares the rule: tier bases by index, the production
// ceiling and the cycle's fair-share factors.
func newPriorityRules(p *Policy, usage []ProjectUsage, now time.Time) *priorityRules {
	r := &priorityRules{p: p, now: now, fair: fairShareFactors(usage, &p.FairShare, now)}
	for _, t := range vocab.Tiers {
		r.tierBase[t] = p.TierBase[t]
	}
	r.prodBase, r.hasProd = p.TierBase[vocab.TierProduction]
	return r
}

// base returns TierBase[t] (0 for a tier the policy does not name).
func (r *priorityRules) base(t vocab.Tier) float64 {
	if t >= 0 && int(t) < len(r.tierBase) {
		return r.tierBase[t]
	}
	return r.p.TierBase[t]
}

// fairOf is a project's fair-share factor: 1 for a project without usage.
func (r *priorityRules) fairOf(project string) float64 {
	if f, ok := r.fair[project]; ok {
		return f
	}
	return 1
}

// priority computes a pending job's effective priority with every part:
// TierBase[tier] + aging credit + fair-share points (Weight × fairFactor).
// Aging gives StepPoints per full IntervalSeconds of eligible wait, bounded
// by CapPoints — the job's queue's (AgingPolicy.Queues) when it sets one —
// (a cap ≤ 0 gives no credit) and, for non-production jobs, bounded so the
// score stays at least one point below TierBase[production] (docs/design.md
// invariant 5) and, when the queue sets an aging ceiling tier, below the
// base of the tier above it. A tier missing from TierBase starts from 0 points.
func (r *priorityRules) priority(j *PendingJob, fairFactor float64) (Priority, agingRule) {
	p := r.p
	pr := Priority{TierBase: r.base(j.Tier), SubmitTime: j.SubmitTime}
	if p.FairShare.Enabled {
		pr.FairFactor = fairFactor
		pr.FairShare = p.FairShare.Weight * fairFactor
	}
	rule := agingRule{waitS: eligibleWaitSeconds(j, r.now)}
	if p.Aging.Enabled {
		rule.interval, rule.step, rule.capEff = p.Aging.IntervalSeconds, p.Aging.StepPoints, p.Aging.CapPoints
		qa, hasQueue := QueueAging{}, false
		if len(p.Aging.Queues) > 0 {
			qa, hasQueue = p.Aging.Queues[j.Queue]
		}
		if hasQueue && qa.HasCap {
			rule.capEff = qa.CapPoints
		}
		if r.hasProd && j.Tier != vocab.TierProduction {
			ceiling := math.Max(0, r.prodBase-pr.TierBase-pr.FairShare-1)
			rule.capEff = math.Min(rule.capEff, ceiling)
		}
		if hasQueue && qa.HasCeiling && qa.CeilingTier < vocab.TierProduction && j.Tier <= qa.CeilingTier {
			// The score stays below the base of the tier above the ceiling.
			if above, ok := p.TierBase[qa.CeilingTier+1]; ok {
				rule.capEff = math.Min(rule.capEff, math.Max(0, above-pr.TierBase-pr.FairShare-1))
			}
		}
		rule.capEff = math.Max(0, rule.capEff)
		pr.AgingCredit = rule.credit(rule.waitS)
		pr.AgingCapped = rule.rawCredit(rule.waitS) > pr.AgingCredit
	}
	pr.Score = pr.TierBase + pr.AgingCredit + pr.FairShare
	return pr, rule
}
