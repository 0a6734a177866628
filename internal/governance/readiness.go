package governance

import (
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/gpugov/gpugov/internal/experiment"
	"github.com/gpugov/gpugov/internal/plural"
	"github.com/gpugov/gpugov/internal/policy"
	"github.com/gpugov/gpugov/internal/queuereport"
	"github.com/gpugov/gpugov/internal/vocab"
)

// Pool readiness (docs/design.md §4 "Pool readiness"): before a pool's
// automation stage widens (observe → trial → automate), the pool must show,
// with numbers, four preconditions — its wait reasons are stably recorded,
// running and idle allocations can be told apart, every queue's protection
// is explicit, save and restore are proven for its checkpointable
// profiles — and answer four questions about the last window against the
// one before: is the longest wait down, are low-priority jobs still
// served, are key jobs still guaranteed, are recompute and recovery loss
// within the budget. EvaluateReadiness computes them from a
// ReadinessInput the store gathers (store.PoolReadiness); it is pure.

// WaitTime is a pool's waiting in a window, in job-seconds: Reason in wait
// events of a scheduler's reason and Latency in closed not_yet_evaluated
// events (the service's own latency before a job's first evaluation; both
// the queue report's wait_reason_seconds), and Unevaluated the waiting of
// jobs still not evaluated at the window's end: pending in their current
// wait with no wait event open, which no event records yet
// (PoolUnevaluatedSeconds).
type WaitTime struct {
	ReasonSeconds      float64 `json:"reason_s"`
	LatencySeconds     float64 `json:"latency_s"`
	UnevaluatedSeconds float64 `json:"unevaluated_s"`
}

// TotalSeconds is all the waiting: Reason + Latency + Unevaluated.
func (w WaitTime) TotalSeconds() float64 {
	return w.ReasonSeconds + w.LatencySeconds + w.UnevaluatedSeconds
}

// PoolUnevaluatedSeconds returns the job-seconds within [w.From, end) that
// the jobs of pool in in spent in a wait no scheduling cycle had evaluated
// by end: a job pending at end — not ended, no run going — with no wait
// event open, from the start of its current wait (the later of its submit
// time, its last run's end and its last wait event's end) to end. end is
// the report's end (min(w.To, now)).
func PoolUnevaluatedSeconds(in queuereport.Input, pool string, w queuereport.Window, end time.Time) float64 {
	if end.After(w.To) {
		end = w.To
	}
	type state struct {
		since   time.Time
		running bool
		open    bool
	}
	jobs := map[string]*state{}
	for _, j := range in.Jobs {
		if j.Pool == pool && (j.End == nil || j.End.After(end)) {
			jobs[j.ID] = &state{since: j.SubmitTime}
		}
	}
	for _, r := range in.Runs {
		st := jobs[r.JobID]
		switch {
		case st == nil || r.Start.After(end):
		case r.End == nil || r.End.After(end):
			st.running = true
		case r.End.After(st.since):
			st.since = *r.End
		}
	}
	for _, e := range in.WaitEvents {
		st := jobs[e.JobID]
		switch {
		case st == nil || e.Start.After(end):
		case e.End == nil || e.End.After(end):
			st.open = true
		case e.End.After(st.since):
			st.since = *e.End
		}
	}
	var total time.Duration
	for _, st := range jobs {
		if st.running || st.open {
			continue
		}
		from := st.since
		if from.Before(w.From) {
			from = w.From
		}
		if end.After(from) {
			total += end.Sub(from)
		}
	}
	return total.Seconds()
}

// RunningObservation counts a pool's running allocations now and those
// observable: with a utilisation sample (Sampled) or progress — a
// checkpoint or a progress report — (Progressing) no older than the
// freshness bound; Observed counts those with either.
type RunningObservation struct {
	Allocations int `json:"allocations"`
	Sampled     int `json:"sampled"`
	Progressing int `json:"progressing"`
	Observed    int `json:"observed"`
}

// QueueProtection is one queue of the pool as the policy sets it.
type QueueProtection struct {
	Queue    string `json:"queue"`
	Tier     string `json:"tier"`
	Explicit bool   `json:"explicit"` // the policy's entry sets protected or low_risk
	// InPolicy is false for a queue the pool's jobs used in the window that
	// the policy does not list.
	InPolicy  bool `json:"in_policy"`
	Protected bool `json:"protected"`
	LowRisk   bool `json:"low_risk"`
}

// Loss is what the pool's preemptions and drills finished in a window
// cost: their effective run loss and its recompute part, GPU-seconds.
type Loss struct {
	Records             int     `json:"records"`
	Drills              int     `json:"drills"`
	GPUSeconds          float64 `json:"gpu_s"`
	RecomputeGPUSeconds float64 `json:"recompute_gpu_s"`
}

// ProfileRecord is one checkpointable recovery profile of the pool: how
// many of the pool's jobs in the window have it, and its evidence record.
type ProfileRecord struct {
	ProfileStanding
	Jobs int `json:"jobs"`
}

// ReadinessInput is what EvaluateReadiness reads, gathered by the store
// for one pool at Now: the policy whose thresholds apply (Automation,
// EvidenceRule and the protection windows), the pool's stage, the last
// window and the one before measured on the queue report's definitions
// (experiment.Measure over the pool), the waiting of the last window, the
// running allocations now, the pool's queues, its checkpointable profiles'
// records and the recovery loss of both windows.
type ReadinessInput struct {
	Pool       string
	Stage      vocab.AutomationStage
	Now        time.Time
	Policy     *policy.Policy
	Evidence   EvidenceRule
	Last       experiment.Measurement
	Before     experiment.Measurement
	Waits      WaitTime
	Running    RunningObservation
	Queues     []QueueProtection
	Profiles   []ProfileRecord
	LossLast   Loss
	LossBefore Loss
}

// Measure is one number a check read: its value now or over the last
// window, the window before's where the check compares (Previous), and
// the bound it was held to (Limit, a minimum or maximum as Bound says,
// with the policy field it comes from).
type Measure struct {
	Name     string   `json:"name"`
	Unit     string   `json:"unit"`
	Value    *float64 `json:"value"`
	Previous *float64 `json:"previous,omitempty"`
	Limit    *float64 `json:"limit,omitempty"`
	Bound    string   `json:"bound,omitempty"` // "min" or "max"
	Source   string   `json:"source,omitempty"`
}

// CheckResult is one readiness check: whether it passed, a sentence with
// its numbers, the numbers, and what it lists (queues without explicit
// protection, profiles without evidence, queues below their minimum).
type CheckResult struct {
	Check        vocab.ReadinessCheck `json:"check"`
	Precondition bool                 `json:"precondition"`
	Passed       bool                 `json:"passed"`
	Detail       string               `json:"detail"`
	Measures     []Measure            `json:"measures"`
	Items        []string             `json:"items,omitempty"`
}

// ProtectionWindowInfo is one of the policy's protection windows.
type ProtectionWindowInfo struct {
	Name   string    `json:"name"`
	Start  time.Time `json:"start"`
	End    time.Time `json:"end"`
	Queues []string  `json:"queues"` // empty: every queue
	Active bool      `json:"active"`
}

// Readiness is a pool's readiness at At: Ready when every check passed,
// Failed naming those that did not, in vocab.ReadinessChecks order.
type Readiness struct {
	Pool              string                 `json:"pool"`
	Stage             vocab.AutomationStage  `json:"stage"`
	At                time.Time              `json:"at"`
	Window            queuereport.Window     `json:"window"`
	Previous          queuereport.Window     `json:"previous_window"`
	Ready             bool                   `json:"ready"`
	Failed            []vocab.ReadinessCheck `json:"failed"`
	Checks            []CheckResult          `json:"checks"`
	ProtectionWindows []ProtectionWindowInfo `json:"protection_windows"`
	Profiles          []ProfileRecord        `json:"profiles"`
}

// Summary is one line naming the pool's readiness and its failed checks.
func (r *Readiness) Summary() string {
	if r.Ready {
		return fmt.Sprintf("pool %s is ready: all %d checks passed", r.Pool, len(r.Checks))
	}
	names := make([]string, len(r.Failed))
	for i, f := range r.Failed {
		names[i] = string(f)
	}
	return fmt.Sprintf("pool %s is not ready: %s failed", r.Pool, strings.Join(names, ", "))
}

// EvaluateReadiness evaluates every readiness check of in.Pool (see the
// package comment and each check's doc in vocab) with the thresholds of
// in.Policy's automation rule.
func EvaluateReadiness(in *ReadinessInput) *Readiness {
	rule := in.Policy.AutomationRule()
	r := &Readiness{Pool: in.Pool, Stage: in.Stage, At: in.Now, Window: in.Last.Window, Previous: in.Before.Window,
		Failed: []vocab.ReadinessCheck{}, ProtectionWindows: []ProtectionWindowInfo{}, Profiles: in.Profiles}
	if r.Profiles == nil {
		r.Profiles = []ProfileRecord{}
	}
	for _, w := range in.Policy.ProtectionWindows {
		qs := w.Queues
		if qs == nil {
			qs = []string{}
		}
		r.ProtectionWindows = append(r.ProtectionWindows, ProtectionWindowInfo{Name: w.Name, Start: w.Start.UTC(), End: w.End.UTC(),
			Queues: qs, Active: !in.Now.Before(w.Start) && in.Now.Before(w.End)})
	}
	r.Checks = []CheckResult{
		checkWaitReasons(in, rule.Readiness),
		checkRunningIdle(in, rule.Readiness),
		checkProtection(in),
		checkSaveRestore(in),
		checkLongestWait(in, rule.Readiness),
		checkLowPriority(in, rule.Readiness),
		checkKeyJobs(in, rule.Readiness),
		checkLossBudget(in, rule),
	}
	for _, c := range r.Checks {
		if !c.Passed {
			r.Failed = append(r.Failed, c.Check)
		}
	}
	r.Ready = len(r.Failed) == 0
	return r
}

func f64(v float64) *float64 { return &v }

// share is part/whole, nil when whole is 0; capped at 1.
func share(part, whole float64) *float64 {
	if whole <= 0 {
		return nil
	}
	return f64(math.Min(part/whole, 1))
}

func pct(v *float64) string {
	if v == nil {
		return "–"
	}
	return fmt.Sprintf("%.1f%%", *v*100)
}

const src = "automation.readiness."

func checkWaitReasons(in *ReadinessInput, t policy.Readiness) CheckResult {
	w := in.Waits
	total := w.TotalSeconds()
	owed := w.ReasonSeconds + w.UnevaluatedSeconds // the waiting after the service's first look, or still without one
	reason, still := share(w.ReasonSeconds, owed), share(w.UnevaluatedSeconds, total)
	c := CheckResult{Check: vocab.ReadinessWaitReasons, Precondition: true, Measures: []Measure{
		{Name: "waiting_job_s", Unit: queuereport.UnitSeconds, Value: f64(total)},
		{Name: "reason_share", Unit: queuereport.UnitRatio, Value: reason, Limit: f64(t.MinReasonShare), Bound: "min", Source: src + "min_reason_share"},
		{Name: "not_yet_evaluated_share", Unit: queuereport.UnitRatio, Value: still, Limit: f64(t.MaxNotYetEvaluatedShare), Bound: "max",
			Source: src + "max_not_yet_evaluated_share"},
		{Name: "service_latency_share", Unit: queuereport.UnitRatio, Value: share(w.LatencySeconds, total)},
	}}
	if owed <= 0 {
		c.Passed = true
		c.Detail = fmt.Sprintf("no waiting after a first evaluation in the window (%.0f waiting job-seconds, all service latency): no reason owed", total)
		return c
	}
	c.Passed = *reason >= t.MinReasonShare && (still == nil || *still <= t.MaxNotYetEvaluatedShare)
	c.Detail = fmt.Sprintf("%s of %.0f job-seconds waited after a first evaluation carry a wait reason (min %s); %s of all %.0f waiting job-seconds still not_yet_evaluated (max %s); service latency %s",
		pct(reason), owed, pct(&t.MinReasonShare), pct(still), total, pct(&t.MaxNotYetEvaluatedShare), pct(share(w.LatencySeconds, total)))
	return c
}

func checkRunningIdle(in *ReadinessInput, t policy.Readiness) CheckResult {
	o := in.Running
	sh := share(float64(o.Observed), float64(o.Allocations))
	c := CheckResult{Check: vocab.ReadinessRunningIdle, Precondition: true, Measures: []Measure{
		{Name: "running_allocations", Unit: queuereport.UnitCount, Value: f64(float64(o.Allocations))},
		{Name: "with_fresh_samples", Unit: queuereport.UnitCount, Value: f64(float64(o.Sampled))},
		{Name: "with_fresh_progress", Unit: queuereport.UnitCount, Value: f64(float64(o.Progressing))},
		{Name: "observed_share", Unit: queuereport.UnitRatio, Value: sh, Limit: f64(t.MinObservedShare), Bound: "min", Source: src + "min_observed_share"},
		{Name: "freshness_s", Unit: queuereport.UnitSeconds, Value: f64(t.FreshnessSeconds), Source: src + "freshness_s"},
	}}
	if o.Allocations == 0 {
		c.Passed, c.Detail = true, "no allocation of the pool is running: nothing to tell apart"
		return c
	}
	c.Passed = *sh >= t.MinObservedShare
	c.Detail = fmt.Sprintf("%d of %d running allocations (%s, min %s) have a utilisation sample (%d) or progress (%d) from the last %.0f s",
		o.Observed, o.Allocations, pct(sh), pct(&t.MinObservedShare), o.Sampled, o.Progressing, t.FreshnessSeconds)
	return c
}

func checkProtection(in *ReadinessInput) CheckResult {
	c := CheckResult{Check: vocab.ReadinessProtection, Precondition: true}
	explicit := 0
	for _, q := range in.Queues {
		switch {
		case !q.InPolicy:
			c.Items = append(c.Items, q.Queue+" (used by the pool's jobs, not in the policy)")
		case !q.Explicit:
			c.Items = append(c.Items, q.Queue+" (sets neither protected nor low_risk)")
		default:
			explicit++
		}
	}
	c.Measures = []Measure{{Name: "queues", Unit: queuereport.UnitCount, Value: f64(float64(len(in.Queues)))},
		{Name: "queues_explicit", Unit: queuereport.UnitCount, Value: f64(float64(explicit))}}
	active := 0
	for _, w := range in.Policy.ProtectionWindows {
		if !in.Now.Before(w.Start) && in.Now.Before(w.End) {
			active++
		}
	}
	windows := fmt.Sprintf("%d protection windows (%d active now)", len(in.Policy.ProtectionWindows), active)
	switch {
	case len(in.Queues) == 0:
		c.Detail = "the policy lists no queue: protection is the stored queues' and not explicit; " + windows
	case len(c.Items) > 0:
		c.Detail = fmt.Sprintf("%d of %d queues set protected or low_risk explicitly; not: %s; %s",
			explicit, len(in.Queues), strings.Join(c.Items, ", "), windows)
	default:
		c.Passed = true
		c.Detail = fmt.Sprintf("all %d queues set protected or low_risk explicitly; %s", len(in.Queues), windows)
	}
	return c
}

func checkSaveRestore(in *ReadinessInput) CheckResult {
	c := CheckResult{Check: vocab.ReadinessSaveRestore, Precondition: true}
	proven, verified, failed := 0, 0, 0
	for _, p := range in.Profiles {
		verified += p.Verified
		failed += p.Failed
		if ok, why := in.Evidence.Proven(p.ProfileStanding); ok {
			proven++
		} else {
			c.Items = append(c.Items, why)
		}
	}
	rate := share(float64(failed), float64(verified+failed))
	c.Measures = []Measure{
		{Name: "checkpointable_profiles", Unit: queuereport.UnitCount, Value: f64(float64(len(in.Profiles)))},
		{Name: "profiles_proven", Unit: queuereport.UnitCount, Value: f64(float64(proven))},
		{Name: "verified_resumes", Unit: queuereport.UnitCount, Value: f64(float64(verified)),
			Limit: f64(float64(in.Evidence.MinVerified)), Bound: "min", Source: "preemption.min_verified_resumes (per profile)"},
		{Name: "resume_failure_rate", Unit: queuereport.UnitRatio, Value: rate, Limit: f64(in.Evidence.MaxFailureRate), Bound: "max",
			Source: "preemption.max_resume_failure_rate (per profile)"},
	}
	switch {
	case len(in.Profiles) == 0:
		c.Passed, c.Detail = true, "no checkpointable job in the pool in the window: nothing to preempt, nothing to prove"
	case len(c.Items) > 0:
		c.Detail = fmt.Sprintf("%d of %d checkpointable profiles have %d+ verified resumes and a failure rate ≤ %s; %s",
			proven, len(in.Profiles), in.Evidence.MinVerified, pct(&in.Evidence.MaxFailureRate), strings.Join(c.Items, "; "))
	default:
		c.Passed = true
		c.Detail = fmt.Sprintf("all %d checkpointable profiles have %d+ verified resumes and a failure rate ≤ %s (%d verified, %d failed in all)",
			len(in.Profiles), in.Evidence.MinVerified, pct(&in.Evidence.MaxFailureRate), verified, failed)
	}
	return c
}

func orZero(v *float64) float64 {
	if v == nil {
		return 0
	}
	return *v
}

func checkLongestWait(in *ReadinessInput, t policy.Readiness) CheckResult {
	last, before := in.Last.Total.LongestWaitS, in.Before.Total.LongestWaitS
	c := CheckResult{Check: vocab.ReadinessLongestWait, Measures: []Measure{
		{Name: "longest_wait_s", Unit: queuereport.UnitSeconds, Value: f64(orZero(last)), Previous: before},
		{Name: "longest_wait_floor_s", Unit: queuereport.UnitSeconds, Value: f64(t.LongestWaitFloorSeconds), Source: src + "longest_wait_floor_s"},
		{Name: "max_longest_wait_growth", Unit: queuereport.UnitRatio, Value: f64(t.MaxLongestWaitGrowth), Source: src + "max_longest_wait_growth"},
	}}
	l := orZero(last)
	switch {
	case l <= t.LongestWaitFloorSeconds:
		c.Passed = true
		c.Detail = fmt.Sprintf("longest wait %.0f s is within the %.0f s floor (window before: %s)", l, t.LongestWaitFloorSeconds, seconds(before))
	case before == nil:
		c.Detail = fmt.Sprintf("longest wait %.0f s exceeds the %.0f s floor and the window before has no wait to compare with", l, t.LongestWaitFloorSeconds)
	default:
		limit := *before * (1 + t.MaxLongestWaitGrowth)
		c.Passed = l <= limit
		verb := "is not above"
		if !c.Passed {
			verb = "is above"
		}
		c.Detail = fmt.Sprintf("longest wait %.0f s %s %.0f s (the window before's %.0f s + %.0f%%)", l, verb, limit, *before, t.MaxLongestWaitGrowth*100)
	}
	return c
}

func seconds(v *float64) string {
	if v == nil {
		return "none"
	}
	return fmt.Sprintf("%.0f s", *v)
}

// groupFor returns the group of ms whose key k is v, or nil.
func groupFor(gs []queuereport.Group, k, v string) *queuereport.Group {
	for i := range gs {
		if gs[i].Key[k] == v {
			return &gs[i]
		}
	}
	return nil
}

func checkLowPriority(in *ReadinessInput, t policy.Readiness) CheckResult {
	c := CheckResult{Check: vocab.ReadinessLowPriority}
	withMin, met := 0, 0
	for _, g := range in.Last.ByQueue {
		if g.MinShare == nil || *g.MinShare <= 0 {
			continue
		}
		withMin++
		q := g.Key[queuereport.KeyQueue]
		switch {
		case g.PoolShare != nil && *g.PoolShare >= *g.MinShare:
			met++
		case orZero(g.LongestWaitS) <= t.LongestWaitFloorSeconds:
			met++ // its demand was served: none of its jobs waited past the floor
		default:
			c.Items = append(c.Items, fmt.Sprintf("%s below its min_share %.2f (pool share %s, longest wait %.0f s)",
				q, *g.MinShare, pct(g.PoolShare), orZero(g.LongestWaitS)))
		}
	}
	starving := float64(in.Last.Total.StarvingJobs)
	c.Measures = []Measure{
		{Name: "queues_with_min_share", Unit: queuereport.UnitCount, Value: f64(float64(withMin))},
		{Name: "queues_min_share_met", Unit: queuereport.UnitCount, Value: f64(float64(met))},
		{Name: "starving_jobs", Unit: queuereport.UnitJobs, Value: f64(starving), Previous: f64(float64(in.Before.Total.StarvingJobs)),
			Limit: f64(float64(t.MaxStarvingJobs)), Bound: "max", Source: src + "max_starving_jobs"},
	}
	c.Passed = len(c.Items) == 0 && in.Last.Total.StarvingJobs <= t.MaxStarvingJobs
	c.Detail = fmt.Sprintf("%d of %d queues with a min_share served; %d starving jobs (max %d; window before: %d)",
		met, withMin, in.Last.Total.StarvingJobs, t.MaxStarvingJobs, in.Before.Total.StarvingJobs)
	if len(c.Items) > 0 {
		c.Detail += "; " + strings.Join(c.Items, "; ")
	}
	return c
}

func checkKeyJobs(in *ReadinessInput, t policy.Readiness) CheckResult {
	c := CheckResult{Check: vocab.ReadinessKeyJobs}
	over, overBefore, started := 0, 0, 0
	for _, tier := range []vocab.Tier{vocab.TierProduction, vocab.TierKeyProject} {
		name := tier.String()
		if g := groupFor(in.Last.ByTier, queuereport.KeyTier, name); g != nil {
			over += g.JobsOverObjective
			started += g.Started
			c.Measures = append(c.Measures, Measure{Name: name + "_wait_p95_s", Unit: queuereport.UnitSeconds, Value: g.WaitP95S,
				Previous: p95(groupFor(in.Before.ByTier, queuereport.KeyTier, name))})
			if g.JobsOverObjective > 0 {
				c.Items = append(c.Items, fmt.Sprintf("%d %s jobs waited past their objective", g.JobsOverObjective, name))
			}
		}
		if g := groupFor(in.Before.ByTier, queuereport.KeyTier, name); g != nil {
			overBefore += g.JobsOverObjective
		}
	}
	c.Measures = append(c.Measures, Measure{Name: "key_jobs_over_objective", Unit: queuereport.UnitJobs, Value: f64(float64(over)),
		Previous: f64(float64(overBefore)), Limit: f64(float64(t.MaxKeyJobsOverObjective)), Bound: "max", Source: src + "max_key_jobs_over_objective"})
	c.Passed = over <= t.MaxKeyJobsOverObjective
	c.Detail = fmt.Sprintf("%d production and key-project jobs waited past their queue's objective (max %d; window before: %d); %d of them started in the window",
		over, t.MaxKeyJobsOverObjective, overBefore, started)
	return c
}

func p95(g *queuereport.Group) *float64 {
	if g == nil {
		return nil
	}
	return g.WaitP95S
}

// perDay scales GPU-seconds over window w to a day.
func perDay(gpuS float64, w queuereport.Window) float64 {
	d := w.To.Sub(w.From).Seconds()
	if d <= 0 {
		return 0
	}
	return gpuS * 86400 / d
}

func checkLossBudget(in *ReadinessInput, rule policy.Automation) CheckResult {
	last, before := perDay(in.LossLast.GPUSeconds, in.Last.Window), perDay(in.LossBefore.GPUSeconds, in.Before.Window)
	budget := rule.RecoveryLossBudgetGPUSecondsPerDay
	c := CheckResult{Check: vocab.ReadinessLossBudget, Measures: []Measure{
		{Name: "recovery_loss_gpu_s", Unit: queuereport.UnitGPUSeconds, Value: f64(in.LossLast.GPUSeconds), Previous: f64(in.LossBefore.GPUSeconds)},
		{Name: "recompute_gpu_s", Unit: queuereport.UnitGPUSeconds, Value: f64(in.LossLast.RecomputeGPUSeconds),
			Previous: f64(in.LossBefore.RecomputeGPUSeconds)},
		{Name: "recovery_loss_gpu_s_per_day", Unit: queuereport.UnitGPUSeconds, Value: f64(last), Previous: f64(before),
			Limit: f64(budget), Bound: "max", Source: "automation.recovery_loss_budget_gpu_s_per_day"},
	}}
	c.Passed = last <= budget
	c.Detail = fmt.Sprintf("%s (%s) cost %.0f GPU-s (recompute %.0f), %.0f GPU-s a day against a budget of %.0f (window before: %.0f a day)",
		plural.Count(in.LossLast.Records, "preemption or drill", "preemptions and drills"), plural.Count(in.LossLast.Drills, "drill", "drills"),
		in.LossLast.GPUSeconds, in.LossLast.RecomputeGPUSeconds, last, budget, before)
	return c
}
