package scheduling

import (
	"time"

	"github.com/gpugov/gpugov/internal/vocab"
)

// Priority is a job's effective priority with every part reported. Score is the
// sum TierBase + AgingCredit + FairShare; ties are broken by SubmitTime, then ID.
type Priority struct {
	Score       float64
	TierBase    float64
	AgingCredit float64 // bounded: ≤ Policy.Aging.CapPoints and never reaching the production base
	AgingCapped bool    // true when the cap or the production ceiling bound the credit
	FairShare   float64 // points from the fair-share factor
	FairFactor  float64 // the factor itself, in [0,1]
	SubmitTime  time.Time
	// MinShareBoost is set when the job's queue was below its MinShare in
	// the job's pool when Plan came to the job, so the job was served before
	// every non-production job of a queue at or above its minimum whatever
	// the scores (production keeps its place first). It says so with the
	// numbers, e.g. "queue experiment below its min_share 0.25 of pool a100:
	// 4 of 16 guaranteed GPUs in use"; "" when the job was served by score.
	MinShareBoost string
}

// Placement is one pending job granted GPUs in this cycle.
type Placement struct {
	JobID    string
	Pool     string
	Node     string // node of the first GPU
	GPUs     []GPUShare
	Borrowed bool // some of the grant is beyond the project's nominal quota
	Rank     int  // the job's place among its pool's jobs in the order this cycle served them (1 = first): by score, with queues below their min_share moved ahead (docs/design.md §4)
	Priority Priority
	// RequestVersion is the job's PendingJob.RequestVersion: the version of
	// the request this placement was planned on (0: unknown).
	RequestVersion int64
}

// WaitStatus is the current wait of one pending job that was not placed.
type WaitStatus struct {
	JobID  string
	Reason vocab.WaitReason
	// Detail carries the quantities, e.g. "needs 4 × ≥81920 MiB H100|H200 on one
	// node; 24 match in pool, 6 free, largest free group on one node 3".
	Detail string
	// ReEvaluate says what would change the reason, e.g. "when 4 matching GPUs on
	// one node are free, or at 14:20 when aging lifts rank above job X".
	ReEvaluate string
	// BlockingJobID names the higher-ranked job holding a reservation, for
	// reserved_for_higher_priority; the job a preemption is running for, etc.
	BlockingJobID string
	// Rank is as Placement.Rank: the job's place among its pool's jobs in
	// the order this cycle served them (1 = first).
	Rank     int
	Priority Priority
	// Suggestions are the nearest requests that would fit, for
	// no_matching_capacity and fragmented: one field of the request changed
	// at a time, at most MaxSuggestions, in the order of docs/design.md §1
	// "What would change it"; nil when no single change fits.
	Suggestions []Suggestion
	Releases    []ExpectedRelease // earliest first, at most 5; nil when none is known
	// Overtake compares the job with the job directly ahead of it in its
	// pool among those left waiting for GPUs — not one placed this cycle,
	// held, or waiting on spec, quota or environment — (or the job whose
	// reservation blocks it) under aging; nil when
	// no job is ahead, aging is off, or the reason is not a capacity reason
	// (reserved_for_higher_priority, fragmented, capacity_busy).
	Overtake *Overtake
	// Next is when a cycle is next expected to evaluate the job with a
	// chance of a different outcome (docs/design.md §1, "next re-evaluation").
	Next NextEvaluation
}

// ExpectedRelease is a running job whose end would free milli-GPU a waiting
// job could use (matching GPUs for capacity_busy/fragmented, the project's
// quota for quota_exhausted), with the end its declared run time implies.
type ExpectedRelease struct {
	JobID       string
	Milli       int64     // milli-GPU its end frees that the waiting job could use
	ExpectedEnd time.Time // StartedAt + declared run seconds: an estimate, never a promise
}

// Overtake is what aging does to a blocked job's place behind the job ahead
// of it: both jobs keep aging (each up to its own bound), their tier and
// fair-share points stay as they are. Points are priority points.
type Overtake struct {
	AheadJobID string
	// GapPoints is the job ahead's score minus this job's, now (≥ 0).
	GapPoints float64
	// HeadroomPoints is the aging credit this job can still gain before its
	// bound (BoundPoints); AheadHeadroomPoints is the same for the job ahead.
	HeadroomPoints      float64
	AheadHeadroomPoints float64
	// BoundPoints is this job's aging bound: the cap (its queue's, else the
	// policy's), lowered so that its score stays below the base of the tier
	// above its aging ceiling tier (production by default).
	BoundPoints float64
	// At is the first instant aging ranks this job above the job ahead;
	// zero when Never.
	At time.Time
	// Never is true when aging can never rank it above: the gap is larger
	// than what this job can still gain beyond what the job ahead gains.
	Never bool
}

// NextEvaluation is when a cycle is next expected to evaluate a waiting job
// with a chance of a different outcome: the earliest of its aging overtake
// and the earliest expected release (a future one), else the scheduler's
// next timer cycle. At is zero when none is known (no timer period given).
type NextEvaluation struct {
	At   time.Time
	Kind vocab.NextEvalKind
	// Estimate is true when At rests on running jobs' declared run times
	// (vocab.NextEvalReleaseEstimate): an estimate, never a promise.
	Estimate bool
}

// Suggestion is one changed request that would fit the job's pool: the
// request with Field changed to Value and everything else as asked.
type Suggestion struct {
	// Field is the request field changed, as the job spec names it:
	// "gpu_models", "gpu_memory_mib", "gpus", "topology" or "node_selector".
	Field string
	// Value is the changed field as the spec would write it: the widened
	// model list ("A100-80GB,H100"), the memory in MiB ("40960"), the count
	// ("4"), the topology ("any") or the remaining selector
	// ("network=infiniband"; "" when the selector is dropped).
	Value string
	// Now is true when the changed request fits the GPUs free outside
	// reservations in this cycle; false when it fits the pool only as if
	// nothing were allocated (its matching GPUs are busy now).
	Now bool
	// MatchingGPUs counts the usable GPUs the changed request matches in the
	// pool; FreeGPUs those of them that could take one device now.
	MatchingGPUs, FreeGPUs int
	// Nodes counts the schedulable nodes the changed request's node selector
	// matches (all schedulable nodes without one).
	Nodes int
	// Text is the suggestion in words: "fits now if gpu_models also allows
	// A100-80GB: 24 matching GPUs, 6 free".
	Text string
}

// Victim is one running job a preemption proposal would stop.
type Victim struct {
	JobID        string
	AllocationID string
	GPUs         int
	// EstimatedLossGPUSeconds is GPU-seconds since the last checkpoint plus the
	// save/restore estimate per GPU (docs/design.md "effective run loss").
	EstimatedLossGPUSeconds float64
}

// Candidate is one running job a preemption's victim search weighed on the
// chosen placement target (docs/design.md §5 "The preemption record").
type Candidate struct {
	JobID   string
	Queue   string
	LowRisk bool // its queue is low-risk
	GPUs    int  // GPUs it holds on the target that could become usable for the job
	// EstimatedLossGPUSeconds is its estimated loss if stopped now (Victim's).
	EstimatedLossGPUSeconds float64
	Chosen                  bool   // it is one of the proposal's victims
	Gate                    string // why it could not be a victim for this job; "" when it could
}

// MaxCandidates bounds PreemptionProposal.Candidates.
const MaxCandidates = 32

// PreemptionProposal is the least-loss victim set on one placement target that
// frees enough matching GPUs for a blocked higher-tier job. Victims are
// ordered as the search prefers them: low-risk queues first, then least
// expected loss, then job ID.
type PreemptionProposal struct {
	ForJobID string
	Pool     string
	Node     string
	Victims  []Victim
	// Candidates are the running jobs holding GPUs of the chosen target
	// that the job could use, eligible ones first in the search's order
	// (chosen or not), then the others by job ID with why each could not be
	// a victim; at most MaxCandidates.
	Candidates []Candidate
	// Act is true when the pool's automation stage lets the proposal be carried
	// out; false means it is recorded as a "would preempt".
	Act                     bool
	EstimatedLossGPUSeconds float64
	Reason                  string // why the preemption is proposed, with quantities
}

// Result is the outcome of one scheduling cycle.
type Result struct {
	PolicyVersion string
	At            time.Time
	Placements    []Placement
	Waiting       []WaitStatus
	Preemptions   []PreemptionProposal
}
