package scheduling

import "github.com/gpugov/gpugov/internal/vocab"

// Policy is one version of the scheduling rules (docs/design.md §1 "policy version").
// All weights are dimensionless priority points; durations are in seconds.
type Policy struct {
	Version string // content hash or name of the policy version

	// TierBase is the priority points each tier starts from. Tiers must be spaced
	// further apart than Aging.CapPoints + FairShare.Weight where one tier must
	// never be overtaken by the one below it.
	TierBase map[vocab.Tier]float64

	Aging       AgingPolicy
	FairShare   FairSharePolicy
	Reservation ReservationPolicy
	Preemption  PreemptionPolicy
	// Placement is the rule choosing among fitting placements (packing.go);
	// "" is PlacementBestFit. Under a scored rule the target workload is the
	// cycle's pending requests of each pool.
	Placement PlacementRule
}

// AgingPolicy is the bounded aging rule: a waiting job gains StepPoints for each
// full IntervalSeconds of eligible wait, up to CapPoints (or its queue's cap).
// Aging never lifts a job's score to or above the production tier's base
// (docs/design.md invariant 5), nor, for a queue with an aging ceiling tier,
// to or above the base of the tier above that ceiling.
type AgingPolicy struct {
	Enabled         bool
	StepPoints      float64
	IntervalSeconds float64
	CapPoints       float64
	// Queues holds per-queue bounds by queue name; a queue not listed has
	// CapPoints and the production ceiling alone.
	Queues map[string]QueueAging
}

// QueueAging is one queue's aging bound (docs/design.md §4): a cap that
// may exceed the gap to the next tier, and the highest tier whose band
// aging may lift the queue's jobs into.
type QueueAging struct {
	// HasCap selects CapPoints over AgingPolicy.CapPoints.
	HasCap    bool
	CapPoints float64
	// HasCeiling selects CeilingTier (never production, never below the
	// queue's tier): a job's score stays at least one point below the base
	// of the tier directly above it. Without it the production ceiling alone
	// bounds the score.
	HasCeiling  bool
	CeilingTier vocab.Tier
}

// FairSharePolicy is Slurm's classic multifactor fair-share term:
// factor = 2^(-usage/share), usage being the project's decayed share of all
// decayed usage (half-life HalfLifeSeconds) and share its normalised share
// (Slurm priority/multifactor, PriorityDecayHalfLife). Points = Weight × factor.
type FairSharePolicy struct {
	Enabled         bool
	Weight          float64
	HalfLifeSeconds float64
}

// ReservationPolicy keeps a blocked high-ranked job from being overtaken forever
// by smaller later jobs (Slurm backfill, Kueue "BestEffortFIFO" with reservations).
type ReservationPolicy struct {
	Enabled bool
	Depth   int // how many blocked jobs per pool hold reservations, highest rank first
}

// PreemptionPolicy decides which running jobs may be victims.
type PreemptionPolicy struct {
	Enabled            bool
	MinRuntimeSeconds  float64 // a run younger than this is never a victim
	MaxPreemptions     int     // anti-thrash: at most this many preemptions ...
	WindowSeconds      float64 // ... within this window
	SaveRestoreSeconds float64 // estimate of checkpoint save + restore time, charged per victim GPU
	GraceSeconds       float64 // how long a victim has to checkpoint after notice
	// RequireVerifiedResume makes the evidence rule a gate: a victim's
	// recovery profile needs at least MinVerifiedResumes verified resumes and
	// a failure rate of at most MaxResumeFailureRate over the last
	// EvidenceWindowSeconds (docs/design.md §5 "The evidence rule"; the
	// record is RecoveryEvidence.ProfileVerifiedResumes and
	// ProfileFailedResumes, which the snapshot counts over that window).
	RequireVerifiedResume    bool
	ReleaseWithoutCheckpoint bool    // when the grace expires without a checkpoint: release anyway (true) or abort
	MinVerifiedResumes       int     // N of the evidence rule; ≥ 1
	MaxResumeFailureRate     float64 // x of the evidence rule: failed / (verified + failed), 0..1
	EvidenceWindowSeconds    float64 // the window the record is counted over, seconds; > 0
}

// Defaults of the evidence rule (docs/design.md §5 "The evidence rule"):
// one verified resume of the job's recovery profile, at most one resume in
// five failed, over the last 30 days.
const (
	DefaultMinVerifiedResumes    = 1
	DefaultMaxResumeFailureRate  = 0.2
	DefaultEvidenceWindowSeconds = 30 * 24 * 3600
)

// DefaultPolicy returns the policy gpugov uses when none is configured: tiers
// 10,000 points apart, aging of 100 points per 10 minutes capped at 3,000
// points, fair share worth up to 1,000 points with a 7-day half-life (Slurm's
// default PriorityDecayHalfLife), reservations for the top 4 blocked jobs per pool,
// and preemption of checkpointable jobs whose recovery profile has a verified
// resume and at most 20 % failed resumes in the last 30 days, after 10
// minutes of run time, at most 3 times per 24 h.
func DefaultPolicy() Policy {
	return Policy{
		Version: "default",
		TierBase: map[vocab.Tier]float64{
			vocab.TierExperiment: 0,
			vocab.TierStandard:   10000,
			vocab.TierKeyProject: 20000,
			vocab.TierProduction: 30000,
		},
		Aging:       AgingPolicy{Enabled: true, StepPoints: 100, IntervalSeconds: 600, CapPoints: 3000},
		FairShare:   FairSharePolicy{Enabled: true, Weight: 1000, HalfLifeSeconds: 7 * 24 * 3600},
		Reservation: ReservationPolicy{Enabled: true, Depth: 4},
		Preemption: PreemptionPolicy{
			Enabled:               true,
			MinRuntimeSeconds:     600,
			MaxPreemptions:        3,
			WindowSeconds:         24 * 3600,
			SaveRestoreSeconds:    60,
			GraceSeconds:          120,
			RequireVerifiedResume: true,
			MinVerifiedResumes:    DefaultMinVerifiedResumes,
			MaxResumeFailureRate:  DefaultMaxResumeFailureRate,
			EvidenceWindowSeconds: DefaultEvidenceWindowSeconds,
		},
	}
}
