package governance

import (
	"cmp"
	"fmt"
	"slices"
	"time"

	"github.com/gpugov/gpugov/internal/plural"
	"github.com/gpugov/gpugov/internal/policy"
	"github.com/gpugov/gpugov/internal/scheduling"
	"github.com/gpugov/gpugov/internal/vocab"
)

// EvidenceRule is what the preemption gate asks of a recovery profile's
// record (docs/design.md §5 "The evidence rule"): at least MinVerified
// verified resumes and a failure rate of at most MaxFailureRate over the
// evidence window.
type EvidenceRule struct {
	MinVerified    int
	MaxFailureRate float64
}

// ProfileStanding is a recovery profile's record over the evidence window
// (store.ProfileRecord's counts).
type ProfileStanding struct {
	Profile  string `json:"profile"`
	Verified int    `json:"verified"`
	Failed   int    `json:"failed"` // failed and wrong-step resumes
}

// FailureRate is Failed / (Verified + Failed); ok is false when the
// profile has no observed resume.
func (p ProfileStanding) FailureRate() (rate float64, ok bool) {
	n := p.Verified + p.Failed
	if n == 0 {
		return 0, false
	}
	return float64(p.Failed) / float64(n), true
}

// Proven reports whether p meets the rule, and when it does not, why (a
// sentence with the numbers).
func (r EvidenceRule) Proven(p ProfileStanding) (bool, string) {
	if p.Verified < r.MinVerified {
		return false, fmt.Sprintf("profile %s has %s, needs %d", p.Profile, plural.Count(p.Verified, "verified resume", "verified resumes"), r.MinVerified)
	}
	if rate, ok := p.FailureRate(); ok && rate > r.MaxFailureRate {
		return false, fmt.Sprintf("profile %s fails %.0f%% of its resumes (%d of %d), at most %.0f%% allowed",
			p.Profile, rate*100, p.Failed, p.Verified+p.Failed, r.MaxFailureRate*100)
	}
	return true, ""
}

// DrillCandidate is one job holding GPUs that the governance loop may
// drill (store.DrillCandidates).
type DrillCandidate struct {
	JobID        string
	AllocationID string
	RunID        string // "" while placed and not running
	Pool         string
	Queue        string
	Profile      string
	Request      scheduling.ResourceRequest
	RunStartedAt time.Time
	// Checkpointable is the job's recovery.checkpointable.
	Checkpointable bool
	// Protected is true when the job or its queue is protected.
	Protected bool
	// LowRisk is the queue's low_risk flag: the trial stage acts only on
	// low-risk queues.
	LowRisk bool
	// InPreemption is true when its allocation has a preemption or drill open.
	InPreemption bool
}

// FreeGPU is one schedulable, healthy GPU and the milli-GPU free on it.
type FreeGPU struct {
	Pool      string
	UUID      string
	Model     string
	MemoryMiB int64
	FreeMilli int
}

// DrillInput is what ChooseDrills decides on. Stages are the pools' stored
// automation stages; Profiles the evidence record of each profile (a
// profile not listed has none); DrillsToday the drills started per profile
// in the last 24 hours; BusyPools the pools with a preemption or drill in
// progress.
type DrillInput struct {
	Now         time.Time
	Policy      *policy.Policy
	Evidence    EvidenceRule
	Stages      map[string]vocab.AutomationStage
	Candidates  []DrillCandidate
	Free        []FreeGPU
	Profiles    map[string]ProfileStanding
	DrillsToday map[string]int
	BusyPools   map[string]bool
}

// DrillChoice is a job to drill now and why.
type DrillChoice struct {
	JobID        string
	AllocationID string
	RunID        string
	Pool         string
	Profile      string
	Reason       string
}

// ChooseDrills picks the automatic resume drills to start now
// (docs/design.md §5 "Resume drills"), none unless the policy's
// drills.auto_in_trial is set. A candidate is drilled when its pool is in
// the trial stage and has no preemption or drill in progress; the job is
// running, checkpointable, not protected (job or queue), in a low-risk
// queue (what the trial stage may act on), outside every protection
// window and not in a preemption; its recovery profile does not meet the
// evidence rule; fewer than drills.per_profile_per_day drills of the
// profile started in the last 24 hours (those chosen now included); and at
// least as many matching GPUs as it holds are free in its pool besides its
// own (model among its gpu_models, memory at least its gpu_memory_mib, the
// milli-GPU it needs per GPU free), so that after the release the job's
// own GPUs wait for nobody and its resume is immediate. At most one drill
// per pool per call. Candidates are taken by pool name, then the oldest
// run first, then job ID, so the choice is deterministic.
func ChooseDrills(in DrillInput) []DrillChoice {
	if in.Policy == nil || !in.Policy.DrillRule().AutoInTrial {
		return nil
	}
	perDay := in.Policy.DrillRule().PerProfilePerDay
	cands := slices.Clone(in.Candidates)
	slices.SortFunc(cands, func(a, b DrillCandidate) int {
		return cmp.Or(cmp.Compare(a.Pool, b.Pool), a.RunStartedAt.Compare(b.RunStartedAt), cmp.Compare(a.JobID, b.JobID))
	})
	chosenPool := map[string]bool{}
	chosen := map[string]int{}
	var out []DrillChoice
	for _, c := range cands {
		if chosenPool[c.Pool] || in.BusyPools[c.Pool] || in.Stages[c.Pool] != vocab.StageTrial || !drillable(c) ||
			in.Policy.InProtectionWindow(c.Queue, in.Now) != "" {
			continue
		}
		standing := in.Profiles[c.Profile]
		standing.Profile = c.Profile
		proven, why := in.Evidence.Proven(standing)
		if proven || in.DrillsToday[c.Profile]+chosen[c.Profile] >= perDay {
			continue
		}
		free := FreeMatching(in.Free, c.Pool, c.Request)
		if free < max(c.Request.GPUs, 1) {
			continue
		}
		chosenPool[c.Pool] = true
		chosen[c.Profile]++
		out = append(out, DrillChoice{JobID: c.JobID, AllocationID: c.AllocationID, RunID: c.RunID, Pool: c.Pool,
			Profile: c.Profile, Reason: fmt.Sprintf("automatic drill in trial pool %s: %s; %d matching GPUs free for an immediate resume",
				c.Pool, why, free)})
	}
	return out
}

// drillable reports whether the job itself may be drilled automatically.
func drillable(c DrillCandidate) bool {
	return c.RunID != "" && c.Checkpointable && !c.Protected && c.LowRisk && !c.InPreemption
}

// FreeMatching counts the GPUs of free in pool that could hold one GPU of
// req: model among req.GPUModels (any when empty), memory at least
// req.GPUMemoryMiB, and the milli-GPU req needs per GPU free (req.GPUMilli
// for a share of one GPU, else the whole GPU). Topology is not counted.
func FreeMatching(free []FreeGPU, pool string, req scheduling.ResourceRequest) int {
	need := req.MilliPerDevice()
	n := 0
	for _, g := range free {
		if g.Pool != pool || g.FreeMilli < need || g.MemoryMiB < req.GPUMemoryMiB {
			continue
		}
		if len(req.GPUModels) > 0 && !slices.Contains(req.GPUModels, g.Model) {
			continue
		}
		n++
	}
	return n
}
