// Package policy is gpugov's one policy model: the versioned YAML file that
// governs a GPU pool — the scheduling rules (tier bases, aging, fair share
// with project weights, reservations, preemption with its verify-resume
// bounds), the queues and quotas, each pool's automation stage, protection
// windows and the reclaim scan with its modes — plus, in a section of its own,
// the assumptions only `gpugov simulate` reads (docs/design.md, "policy
// version"). `gpugov serve` and `gpugov simulate` read it through one loader
// (Load) whose errors are "file:line: field: what is wrong"; a Watcher
// re-reads the file while the service runs and keeps the last good version
// when a new file is invalid.
//
// A loaded policy is resolved: every field the file leaves out holds its
// default. Hash identifies the resolved rules (SHA-256 of their canonical
// JSON), so the same rules always give the same hash whatever the key order
// or spelling of defaults; the service stores each hash as an immutable
// policy version and every scheduling cycle records the hash it ran with.
//
// The package is pure: it imports neither Temporal nor pgx, and neither the
// simulator nor the service owns it.
package policy

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/gpugov/gpugov/internal/scheduling"
	"github.com/gpugov/gpugov/internal/trace/alibaba"
	"github.com/gpugov/gpugov/internal/vocab"
)

// FormatV1 is the policy file format this package reads, the value of the
// file's required top-level `version:` field. Other values are refused.
const FormatV1 = "gpugov.policy/v1"

// Policy is one resolved policy. Durations are in seconds; priority weights
// are dimensionless points (internal/scheduling). The JSON encoding (field
// names as in the YAML file) is the stored policy version's body; it leaves
// out Simulation, which governs no pool.
type Policy struct {
	// Version is the file format, FormatV1.
	Version string `json:"version"`
	// TierBase is the priority points each tier starts from, keyed by tier
	// name (production, key-project, standard, experiment).
	TierBase    map[string]float64 `json:"tier_base"`
	Aging       Aging              `json:"aging"`
	FairShare   FairShare          `json:"fair_share"`
	Reservation Reservation        `json:"reservation"`
	Preemption  Preemption         `json:"preemption"`
	// Placement is the scheduling core's placement rule
	// (scheduling.PlacementRule: bestfit, fgd or fragmentation; docs/design.md
	// §4 "Placement rules"). A loaded policy always has it (Default: bestfit,
	// the rule before the field existed); it is empty, meaning bestfit, only
	// in a version stored before the field existed.
	Placement scheduling.PlacementRule `json:"placement,omitempty"`
	// Queues, when not empty, are upserted by serve at start and on every
	// reload, and only they may be low-risk (a stored queue the list leaves
	// out is kept, its low-risk flag cleared); when empty serve keeps the
	// stored queues (creating one per tier when there are none) and the
	// simulator uses DefaultQueues.
	Queues []Queue `json:"queues"`
	// Quotas become serve's stored quotas, exactly, at start and on every
	// reload (a stored quota the list leaves out is removed; each change is
	// audited); a project without a quota in a pool is not limited there.
	// A quota set through the API (PUT /v1/quotas, an approved quota
	// request) is a version derived from the active one with that quota
	// changed (WithQuota); the file's next edit supersedes it
	// (docs/design.md §4).
	Quotas []Quota `json:"quotas"`
	// Pools gives named pools their automation stage. A pool not listed keeps
	// the stage stored for it (observe when created); the simulator's pool,
	// when not listed, runs in the automate stage.
	Pools map[string]Pool `json:"pools"`
	// Shards are the scheduler shards other than "default", by name, each
	// with the pools it schedules (docs/design.md §4 "Scheduler shards"):
	// each shard runs its own SchedulerWorkflow ("scheduler/<shard>") whose
	// cycles load and apply only its pools, in parallel with the other
	// shards'. A pool no shard lists belongs to "default"; absent, every pool
	// is in "default" (one scheduler, the behaviour before the field). A pool
	// may be in one shard only; shard names are ShardNamePattern.
	Shards map[string][]string `json:"shards,omitempty"`
	// ProtectionWindows are times during which jobs of the named queues (all
	// when none are named) are neither preempted nor reclaimed.
	ProtectionWindows []Window `json:"protection_windows"`
	Reclaim           Reclaim  `json:"reclaim"`
	// Notifications are the projects' webhooks and their delivery schedule.
	Notifications Notifications `json:"notifications"`
	// Drills is the resume drill rule (DrillRule reads it). nil only in a
	// version stored before the field existed, which means DefaultDrills;
	// a loaded policy always has it.
	Drills *Drills `json:"drills,omitempty"`
	// Automation holds the readiness a pool must show before its stage
	// widens (AutomationRule reads it); nil as Drills.
	Automation *Automation `json:"automation,omitempty"`
	// Simulation holds what only `gpugov simulate` reads; serve ignores it
	// and it is not part of Hash.
	Simulation Simulation `json:"-"`
}

// Aging is the bounded aging rule (scheduling.AgingPolicy).
type Aging struct {
	Enabled         bool    `json:"enabled"`
	StepPoints      float64 `json:"step_points"`
	IntervalSeconds float64 `json:"interval_s"`
	CapPoints       float64 `json:"cap_points"`
}

// FairShare is the fair-share term (scheduling.FairSharePolicy) and the
// projects' weights.
type FairShare struct {
	Enabled         bool    `json:"enabled"`
	Weight          float64 `json:"weight"`
	HalfLifeSeconds float64 `json:"half_life_s"`
	// ProjectWeights are relative fair-share weights by project name; a
	// project not listed weighs DefaultProjectWeight. Empty gives every
	// project an equal share. See ApplyProjectWeights.
	ProjectWeights map[string]float64 `json:"project_weights"`
}

// DefaultProjectWeight is the fair-share weight of a project that
// FairShare.ProjectWeights does not list.
const DefaultProjectWeight = 1

// Reservation is the reservation rule (scheduling.ReservationPolicy).
type Reservation struct {
	Enabled bool `json:"enabled"`
	Depth   int  `json:"depth"`
}

// Preemption is the preemption rule (scheduling.PreemptionPolicy) and the
// bounds of the preemption workflow's VerifyResume step.
type Preemption struct {
	Enabled                  bool    `json:"enabled"`
	MinRuntimeSeconds        float64 `json:"min_runtime_s"`
	MaxPreemptions           int     `json:"max_preemptions"`
	WindowSeconds            float64 `json:"window_s"`
	SaveRestoreSeconds       float64 `json:"save_restore_s"`
	GraceSeconds             float64 `json:"grace_s"`
	RequireVerifiedResume    bool    `json:"require_verified_resume"`
	ReleaseWithoutCheckpoint bool    `json:"release_without_checkpoint"`
	// VerifyResumeTimeoutSeconds bounds the wait for the victim's next run to start.
	VerifyResumeTimeoutSeconds float64 `json:"verify_resume_timeout_s"`
	// RecomputeTimeoutSeconds bounds the wait for that run to pass the step
	// the victim had reached at the notice.
	RecomputeTimeoutSeconds float64 `json:"recompute_timeout_s"`
	// The evidence rule (docs/design.md §5), applied when
	// RequireVerifiedResume: a victim's recovery profile needs at least
	// MinVerifiedResumes verified resumes (≥ 1) and a failure rate of at most
	// MaxResumeFailureRate (0..1) over the last EvidenceWindowSeconds (> 0).
	// Defaults: scheduling.DefaultMinVerifiedResumes, DefaultMaxResumeFailureRate,
	// DefaultEvidenceWindowSeconds. The canonical JSON leaves out a value
	// equal to its default (MarshalJSON), so policies written before these
	// fields existed keep their hash, and decoding such a body gives the
	// defaults.
	MinVerifiedResumes    int     `json:"min_verified_resumes"`
	MaxResumeFailureRate  float64 `json:"max_resume_failure_rate"`
	EvidenceWindowSeconds float64 `json:"evidence_window_s"`
}

// preemptionJSON is Preemption's canonical JSON: its fields in declaration
// order, the evidence rule's only when they differ from their defaults.
type preemptionJSON struct {
	Enabled                    bool     `json:"enabled"`
	MinRuntimeSeconds          float64  `json:"min_runtime_s"`
	MaxPreemptions             int      `json:"max_preemptions"`
	WindowSeconds              float64  `json:"window_s"`
	SaveRestoreSeconds         float64  `json:"save_restore_s"`
	GraceSeconds               float64  `json:"grace_s"`
	RequireVerifiedResume      bool     `json:"require_verified_resume"`
	ReleaseWithoutCheckpoint   bool     `json:"release_without_checkpoint"`
	VerifyResumeTimeoutSeconds float64  `json:"verify_resume_timeout_s"`
	RecomputeTimeoutSeconds    float64  `json:"recompute_timeout_s"`
	MinVerifiedResumes         *int     `json:"min_verified_resumes,omitempty"`
	MaxResumeFailureRate       *float64 `json:"max_resume_failure_rate,omitempty"`
	EvidenceWindowSeconds      *float64 `json:"evidence_window_s,omitempty"`
}

// MarshalJSON writes p with the evidence rule's fields left out where they
// equal their defaults.
func (p Preemption) MarshalJSON() ([]byte, error) {
	j := preemptionJSON{Enabled: p.Enabled, MinRuntimeSeconds: p.MinRuntimeSeconds, MaxPreemptions: p.MaxPreemptions,
		WindowSeconds: p.WindowSeconds, SaveRestoreSeconds: p.SaveRestoreSeconds, GraceSeconds: p.GraceSeconds,
		RequireVerifiedResume: p.RequireVerifiedResume, ReleaseWithoutCheckpoint: p.ReleaseWithoutCheckpoint,
		VerifyResumeTimeoutSeconds: p.VerifyResumeTimeoutSeconds, RecomputeTimeoutSeconds: p.RecomputeTimeoutSeconds}
	if p.MinVerifiedResumes != scheduling.DefaultMinVerifiedResumes {
		j.MinVerifiedResumes = &p.MinVerifiedResumes
	}
	if p.MaxResumeFailureRate != scheduling.DefaultMaxResumeFailureRate {
		j.MaxResumeFailureRate = &p.MaxResumeFailureRate
	}
	if p.EvidenceWindowSeconds != scheduling.DefaultEvidenceWindowSeconds {
		j.EvidenceWindowSeconds = &p.EvidenceWindowSeconds
	}
	return json.Marshal(j)
}

// UnmarshalJSON reads what MarshalJSON writes: an absent evidence-rule
// field takes its default. Unknown fields are refused.
func (p *Preemption) UnmarshalJSON(b []byte) error {
	var j preemptionJSON
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&j); err != nil {
		return err
	}
	*p = Preemption{Enabled: j.Enabled, MinRuntimeSeconds: j.MinRuntimeSeconds, MaxPreemptions: j.MaxPreemptions,
		WindowSeconds: j.WindowSeconds, SaveRestoreSeconds: j.SaveRestoreSeconds, GraceSeconds: j.GraceSeconds,
		RequireVerifiedResume: j.RequireVerifiedResume, ReleaseWithoutCheckpoint: j.ReleaseWithoutCheckpoint,
		VerifyResumeTimeoutSeconds: j.VerifyResumeTimeoutSeconds, RecomputeTimeoutSeconds: j.RecomputeTimeoutSeconds,
		MinVerifiedResumes: scheduling.DefaultMinVerifiedResumes, MaxResumeFailureRate: scheduling.DefaultMaxResumeFailureRate,
		EvidenceWindowSeconds: scheduling.DefaultEvidenceWindowSeconds}
	if j.MinVerifiedResumes != nil {
		p.MinVerifiedResumes = *j.MinVerifiedResumes
	}
	if j.MaxResumeFailureRate != nil {
		p.MaxResumeFailureRate = *j.MaxResumeFailureRate
	}
	if j.EvidenceWindowSeconds != nil {
		p.EvidenceWindowSeconds = *j.EvidenceWindowSeconds
	}
	return nil
}

// EvidenceWindow is EvidenceWindowSeconds as a duration.
func (p *Preemption) EvidenceWindow() time.Duration { return Seconds(p.EvidenceWindowSeconds) }

// Queue is one queue (scheduling.Queue) with its tier by name.
type Queue struct {
	Name           string  `json:"name"`
	Tier           string  `json:"tier"`
	Share          float64 `json:"share"`      // service share, relative to the other queues
	MaxWaitSeconds int64   `json:"max_wait_s"` // wait objective; 0 means none
	Protected      bool    `json:"protected"`  // never preempted or reclaimed
	LowRisk        bool    `json:"low_risk"`   // the trial stage may act on it
	// ProtectionExplicit is true when the queue's entry in the policy file
	// sets protected or low_risk (to true or false): an operator decided
	// how much automation may touch it. Set by the loader, never written in
	// a file; pool readiness's protection_explicit check reads it.
	ProtectionExplicit bool `json:"protection_explicit,omitempty"`
	// MinShare is the fraction (0..1) of each pool's usable GPUs guaranteed
	// to the queue while it has demand (scheduling.Queue.MinShare); 0 (left
	// out) means none. The queues' minimums add up to at most 1.
	MinShare float64 `json:"min_share,omitempty"`
	// MaxShare caps the queue at this fraction (min_share ≤ MaxShare ≤ 1,
	// above 0) of each pool's usable GPUs (scheduling.Queue.MaxShare); 0
	// (left out) means no cap.
	MaxShare float64 `json:"max_share,omitempty"`
	// AgingCeilingTier is the highest tier whose band aging may lift the
	// queue's jobs into: their score stays below the base of the tier above
	// it. Never production, never below Tier; "" keeps the production
	// ceiling alone (scheduling.QueueAging).
	AgingCeilingTier string `json:"aging_ceiling_tier,omitempty"`
	// AgingCapPoints is the queue's aging cap in points, in place of
	// aging.cap_points; it may exceed the gap to the next tier. nil: the
	// policy's cap.
	AgingCapPoints *float64 `json:"aging_cap_points,omitempty"`
}

// Quota is one project's quota in one pool (scheduling.Quota), in milli-GPUs.
type Quota struct {
	Project             string `json:"project"`
	Pool                string `json:"pool"`
	NominalMilli        int64  `json:"nominal_milli"`
	BorrowingLimitMilli int64  `json:"borrowing_limit_milli"`
}

// Pool is one pool's governance settings.
type Pool struct {
	Stage vocab.AutomationStage `json:"stage"`
}

// Window is a protection window: Start ≤ now < End.
type Window struct {
	Name   string    `json:"name"`
	Start  time.Time `json:"start"`
	End    time.Time `json:"end"`
	Queues []string  `json:"queues"`
}

// Reclaim is the reclaim scan and its modes.
type Reclaim struct {
	// Enabled turns the periodic scan on; false makes a scan record nothing.
	Enabled bool `json:"enabled"`
	// ScanIntervalSeconds is the time between scans.
	ScanIntervalSeconds float64 `json:"scan_interval_s"`
	// ObservationWindowSeconds is how long an allocation must show no
	// progress and no utilisation above IdleGPUPercent to be idle (and how
	// long a granted allocation may go without a run, or a run without a
	// heartbeat, before it is failed).
	ObservationWindowSeconds float64 `json:"observation_window_s"`
	// IdleGPUPercent is the utilisation (NVML utilization.gpu, percent) at or
	// below which a sample counts as idle; it also bounds the mean
	// utilisation of each GPU over the window (docs/design.md §3 "The idle
	// rule").
	IdleGPUPercent int `json:"idle_gpu_percent"`
	// IdleMaxBursts is how many bursts (maximal runs of consecutive samples
	// above IdleGPUPercent) a GPU may show in one observation window and
	// still be idle; a GPU with more is working periodically and is not
	// idle. An idle finding with any burst is handled in notify mode at most,
	// never released automatically.
	IdleMaxBursts int `json:"idle_max_bursts"`
	// IdleMemoryMiB is the GPU memory (MiB, the samples' memory_used_mib)
	// above which an otherwise idle GPU counts as holding state (a loaded
	// model, an interactive session): its idle finding is handled in notify
	// mode at most, never released automatically.
	IdleMemoryMiB int64 `json:"idle_memory_mib"`
	// DisputeWindowSeconds is how long after a reclaim's release its owner
	// may dispute it (POST /v1/reclaims/{id}/dispute): a false reclaim.
	DisputeWindowSeconds float64 `json:"dispute_window_s"`
	// NotifyWindowSeconds is how long the owner has to keep an allocation in notify mode.
	NotifyWindowSeconds float64 `json:"notify_window_s"`
	// ConfirmWindowSeconds is how long a confirm-mode finding waits for an
	// operator before it expires unreleased.
	ConfirmWindowSeconds float64 `json:"confirm_window_s"`
	// DefaultMode is the mode of findings no rule matches.
	DefaultMode vocab.ReclaimMode `json:"default_mode"`
	// Rules give modes by pool, queue and class; the first rule whose
	// non-empty fields all match wins.
	Rules []ModeRule `json:"rules"`
}

// ModeRule sets the mode of the findings it matches; an empty field matches any value.
type ModeRule struct {
	Pool  string             `json:"pool"`
	Queue string             `json:"queue"`
	Class vocab.ReclaimClass `json:"class"`
	Mode  vocab.ReclaimMode  `json:"mode"`
}

// Simulation holds the assumptions only the simulator reads
// (internal/simulation.FromPolicy): what the trace does not carry.
type Simulation struct {
	// Pool names the pool the trace's nodes form; its stage is
	// Pools[Pool].Stage, automate when not listed.
	Pool string
	// Projects is how many synthetic projects pods are hashed into (alibaba.ProjectOf).
	Projects int
	// Seed seeds the recovery-evidence draw.
	Seed uint64
	// CycleIntervalSeconds is the period of the timer-driven cycle.
	CycleIntervalSeconds int64
	// StarvationFactor: a job is starved when one continuous wait exceeds
	// this many times its queue's wait objective, or it never started.
	StarvationFactor float64
	// Recovery assigns recovery evidence, which the trace lacks.
	Recovery Recovery
	// TraceQuotas applies the quotas the trace's format defines (Philly:
	// each virtual cluster's nodes × GPUs per node, without borrowing) as
	// project quotas, besides the policy's own (a policy quota of the same
	// project and pool wins). A trace without quotas (Alibaba) is unchanged.
	TraceQuotas bool
	// BackgroundStepS, when > 0, holds the pool occupancy the trace's jobs
	// do not explain, derived by the trace's reader in steps of this many
	// seconds (Philly: from its node sequence, philly.Background), as GPUs
	// no trace job can use; 0 (the default) holds none. A trace format that
	// cannot derive it (Alibaba) is unchanged.
	BackgroundStepS int64
	// CyclePeriodSeconds, when > 0, makes the simulated scheduler run in
	// periodic passes: the cycle a change makes due runs at the next
	// multiple of this many seconds, not at once (a scheduler that is not
	// instantaneous); 0 (the default) runs it at once.
	CyclePeriodSeconds int64
	// BackgroundByQuota charges the background occupancy (BackgroundStepS)
	// to the pool's quotas in proportion to their nominal GPUs, as well as
	// to its capacity: the unexplained work belongs to the same tenants.
	BackgroundByQuota bool
	// BackgroundPlacement is how the background takes and gives back GPUs:
	// "pack" (the default: fullest nodes first, given back from the
	// emptiest) or "random" (uniformly drawn, seeded by Seed).
	BackgroundPlacement string
	// LocalityRelaxSeconds, when > 0, relaxes the locality of a job of more
	// than one GPU that has waited this long (same-node or whole-nodes to
	// any nodes), as Philly's scheduler did; 0 (the default) never does.
	LocalityRelaxSeconds int64
}

// Recovery is the simulator's recovery-evidence rule: each job of Tiers is
// checkpointable with probability Probability, checkpoints every
// CheckpointIntervalSeconds of run time and starts with VerifiedResumes
// verified resumes (internal/simulation.RecoveryRule).
type Recovery struct {
	Tiers                     []string
	Probability               float64
	CheckpointIntervalSeconds int64
	VerifiedResumes           int
}

// Defaults of the fields the scheduling policy does not cover.
const (
	DefaultVerifyResumeTimeoutSeconds = 3600 // how long VerifyResume waits for the victim's next run
	DefaultRecomputeTimeoutSeconds    = 1800 // how long it waits for that run to pass the step reached at notice
	DefaultScanIntervalSeconds        = 60
	DefaultObservationWindowSeconds   = 1800
	DefaultIdleGPUPercent             = 5
	DefaultIdleMaxBursts              = 1
	DefaultIdleMemoryMiB              = 1024
	DefaultDisputeWindowSeconds       = 72 * 3600
	DefaultNotifyWindowSeconds        = 900
	DefaultConfirmWindowSeconds       = 86400
)

// The default queues' wait objectives, in seconds.
const (
	DefaultProductionMaxWaitS = 60
	DefaultKeyProjectMaxWaitS = 10 * 60
	DefaultStandardMaxWaitS   = 60 * 60
	DefaultExperimentMaxWaitS = 6 * 60 * 60
)

// DefaultQueues are one queue per tier, named after it (trace jobs are
// routed by tier name), with service shares 4:3:2:1, wait objectives 60 s,
// 10 min, 1 h and 6 h, production protected and experiment low-risk: the
// simulator's queues when the policy names none, and those serve creates
// when neither the policy nor the store has any.
func DefaultQueues() []Queue {
	return []Queue{
		{Name: "production", Tier: "production", Share: 4, MaxWaitSeconds: DefaultProductionMaxWaitS, Protected: true},
		{Name: "key-project", Tier: "key-project", Share: 3, MaxWaitSeconds: DefaultKeyProjectMaxWaitS},
		{Name: "standard", Tier: "standard", Share: 2, MaxWaitSeconds: DefaultStandardMaxWaitS},
		{Name: "experiment", Tier: "experiment", Share: 1, MaxWaitSeconds: DefaultExperimentMaxWaitS, LowRisk: true},
	}
}

// Default returns the policy in force without a file, and the values a
// file's absent fields take: scheduling.DefaultPolicy's rules; verify-resume
// bounds of 3,600 s and 1,800 s; no queue, quota, pool stage or protection
// window; the reclaim scan off (60 s scan, 1,800 s observation window, 5 %
// idle threshold, at most 1 burst and 1,024 MiB of GPU memory per window for
// an automatic idle release, 900 s notice, 86,400 s confirmation, 72 h to
// dispute a release, every finding reported only); and the simulation assumptions pool "alibaba", 8 projects,
// seed 1, a 600 s timer cycle (the default aging interval), starvation at 4×
// the objective, and standard and experiment jobs checkpointable with
// probability 0.5, every 1,800 s, with one verified resume.
func Default() *Policy {
	sp := scheduling.DefaultPolicy()
	p := &Policy{
		Version:     FormatV1,
		TierBase:    map[string]float64{},
		Aging:       Aging{sp.Aging.Enabled, sp.Aging.StepPoints, sp.Aging.IntervalSeconds, sp.Aging.CapPoints},
		FairShare:   FairShare{Enabled: sp.FairShare.Enabled, Weight: sp.FairShare.Weight, HalfLifeSeconds: sp.FairShare.HalfLifeSeconds},
		Reservation: Reservation{sp.Reservation.Enabled, sp.Reservation.Depth},
		Preemption: Preemption{Enabled: sp.Preemption.Enabled, MinRuntimeSeconds: sp.Preemption.MinRuntimeSeconds,
			MaxPreemptions: sp.Preemption.MaxPreemptions, WindowSeconds: sp.Preemption.WindowSeconds,
			SaveRestoreSeconds: sp.Preemption.SaveRestoreSeconds, GraceSeconds: sp.Preemption.GraceSeconds,
			RequireVerifiedResume:      sp.Preemption.RequireVerifiedResume,
			ReleaseWithoutCheckpoint:   sp.Preemption.ReleaseWithoutCheckpoint,
			VerifyResumeTimeoutSeconds: DefaultVerifyResumeTimeoutSeconds, RecomputeTimeoutSeconds: DefaultRecomputeTimeoutSeconds,
			MinVerifiedResumes: sp.Preemption.MinVerifiedResumes, MaxResumeFailureRate: sp.Preemption.MaxResumeFailureRate,
			EvidenceWindowSeconds: sp.Preemption.EvidenceWindowSeconds},
		Reclaim: Reclaim{ScanIntervalSeconds: DefaultScanIntervalSeconds, ObservationWindowSeconds: DefaultObservationWindowSeconds,
			IdleGPUPercent: DefaultIdleGPUPercent, IdleMaxBursts: DefaultIdleMaxBursts, IdleMemoryMiB: DefaultIdleMemoryMiB,
			NotifyWindowSeconds: DefaultNotifyWindowSeconds, ConfirmWindowSeconds: DefaultConfirmWindowSeconds,
			DisputeWindowSeconds: DefaultDisputeWindowSeconds, DefaultMode: vocab.ModeReport},
		Notifications: Notifications{Delivery: DefaultDelivery()},
		Placement:     scheduling.PlacementBestFit,
		Drills:        ptr(DefaultDrills()),
		Automation:    ptr(DefaultAutomation()),
		Simulation: Simulation{Pool: alibaba.DefaultPoolName, Projects: alibaba.DefaultProjects, Seed: 1,
			CycleIntervalSeconds: 600, StarvationFactor: 4, BackgroundPlacement: "pack",
			Recovery: Recovery{Tiers: []string{"standard", "experiment"}, Probability: 0.5,
				CheckpointIntervalSeconds: 1800, VerifiedResumes: 1}},
	}
	for t, v := range sp.TierBase {
		p.TierBase[t.String()] = v
	}
	return p
}

// Scheduling returns the scheduling rules in internal/scheduling's type,
// with Version set to Hash, so every cycle's result names the policy
// version it ran with, and the queues' aging bounds in Aging.Queues. Tier
// names the scheduler does not know are left out
// (Load refuses them).
func (p *Policy) Scheduling() *scheduling.Policy {
	sp := &scheduling.Policy{Version: p.Hash(), TierBase: make(map[vocab.Tier]float64, len(p.TierBase)),
		Aging:       scheduling.AgingPolicy{Enabled: p.Aging.Enabled, StepPoints: p.Aging.StepPoints, IntervalSeconds: p.Aging.IntervalSeconds, CapPoints: p.Aging.CapPoints},
		FairShare:   scheduling.FairSharePolicy{Enabled: p.FairShare.Enabled, Weight: p.FairShare.Weight, HalfLifeSeconds: p.FairShare.HalfLifeSeconds},
		Reservation: scheduling.ReservationPolicy{Enabled: p.Reservation.Enabled, Depth: p.Reservation.Depth},
		Placement:   p.Placement,
		Preemption: scheduling.PreemptionPolicy{Enabled: p.Preemption.Enabled, MinRuntimeSeconds: p.Preemption.MinRuntimeSeconds,
			MaxPreemptions: p.Preemption.MaxPreemptions, WindowSeconds: p.Preemption.WindowSeconds,
			SaveRestoreSeconds: p.Preemption.SaveRestoreSeconds, GraceSeconds: p.Preemption.GraceSeconds,
			RequireVerifiedResume: p.Preemption.RequireVerifiedResume, ReleaseWithoutCheckpoint: p.Preemption.ReleaseWithoutCheckpoint,
			MinVerifiedResumes: p.Preemption.MinVerifiedResumes, MaxResumeFailureRate: p.Preemption.MaxResumeFailureRate,
			EvidenceWindowSeconds: p.Preemption.EvidenceWindowSeconds},
	}
	for name, v := range p.TierBase {
		if t, err := vocab.ParseTier(name); err == nil {
			sp.TierBase[t] = v
		}
	}
	for _, q := range p.Queues {
		var qa scheduling.QueueAging
		if q.AgingCapPoints != nil {
			qa.HasCap, qa.CapPoints = true, *q.AgingCapPoints
		}
		if t, err := vocab.ParseTier(q.AgingCeilingTier); err == nil {
			qa.HasCeiling, qa.CeilingTier = true, t
		}
		if qa.HasCap || qa.HasCeiling {
			if sp.Aging.Queues == nil {
				sp.Aging.Queues = make(map[string]scheduling.QueueAging)
			}
			sp.Aging.Queues[q.Name] = qa
		}
	}
	return sp
}

// SchedulingQueues returns queues in internal/scheduling's type. It returns
// an error naming the queue whose tier is unknown (Load refuses those).
func SchedulingQueues(queues []Queue) ([]scheduling.Queue, error) {
	out := make([]scheduling.Queue, 0, len(queues))
	for i, q := range queues {
		t, err := vocab.ParseTier(q.Tier)
		if err != nil {
			return nil, fmt.Errorf("queues[%d].tier: %w", i, err)
		}
		out = append(out, scheduling.Queue{Name: q.Name, Tier: t, ServiceShare: q.Share,
			MaxWait: time.Duration(q.MaxWaitSeconds) * time.Second, LowRisk: q.LowRisk, Protected: q.Protected,
			MinShare: q.MinShare, MaxShare: q.MaxShare})
	}
	return out, nil
}

// SchedulingQuotas returns the quotas in internal/scheduling's type.
func (p *Policy) SchedulingQuotas() []scheduling.Quota {
	out := make([]scheduling.Quota, len(p.Quotas))
	for i, q := range p.Quotas {
		out[i] = scheduling.Quota{Project: q.Project, Pool: q.Pool, NominalMilli: q.NominalMilli, BorrowingLimitMilli: q.BorrowingLimitMilli}
	}
	return out
}

// Stages returns the configured stage of each listed pool.
func (p *Policy) Stages() map[string]vocab.AutomationStage {
	out := make(map[string]vocab.AutomationStage, len(p.Pools))
	for name, pl := range p.Pools {
		out[name] = pl.Stage
	}
	return out
}

// LowRiskQueues returns the names of the queues marked low-risk, in file order.
func (p *Policy) LowRiskQueues() []string {
	out := []string{}
	for _, q := range p.Queues {
		if q.LowRisk {
			out = append(out, q.Name)
		}
	}
	return out
}

// Windows returns the protection windows in the scheduler's type.
func (p *Policy) Windows() []scheduling.ProtectionWindow {
	out := make([]scheduling.ProtectionWindow, len(p.ProtectionWindows))
	for i, w := range p.ProtectionWindows {
		out[i] = scheduling.ProtectionWindow{Name: w.Name, Start: w.Start, End: w.End, Queues: w.Queues}
	}
	return out
}

// InProtectionWindow returns the name of a window covering queue at now
// (Start ≤ now < End), or "" when none does.
func (p *Policy) InProtectionWindow(queue string, now time.Time) string {
	for _, w := range p.ProtectionWindows {
		if now.Before(w.Start) || !now.Before(w.End) {
			continue
		}
		if len(w.Queues) == 0 || slices.Contains(w.Queues, queue) {
			return w.Name
		}
	}
	return ""
}

// ConfiguredMode returns the mode the first matching reclaim rule gives a
// finding of class in (pool, queue), or the default mode.
func (p *Policy) ConfiguredMode(pool, queue string, class vocab.ReclaimClass) vocab.ReclaimMode {
	for _, r := range p.Reclaim.Rules {
		if (r.Pool == "" || r.Pool == pool) && (r.Queue == "" || r.Queue == queue) && (r.Class == "" || r.Class == class) {
			return r.Mode
		}
	}
	return p.Reclaim.DefaultMode
}

// ApplyProjectWeights sets each usage row's Share to its project's
// normalised fair-share weight: w / Σw over the distinct projects in usage,
// w being weights[project] or DefaultProjectWeight. Plan's fair-share factor
// reads Share (scheduling.FairSharePolicy); with no weights it leaves the
// rows as they are (Share 0: equal shares). The scheduling cycle and the
// simulator both call it, so both weigh projects alike.
func ApplyProjectWeights(usage []scheduling.ProjectUsage, weights map[string]float64) {
	if len(weights) == 0 || len(usage) == 0 {
		return
	}
	weight := func(project string) float64 {
		if w, ok := weights[project]; ok {
			return w
		}
		return DefaultProjectWeight
	}
	seen := make(map[string]bool, len(usage))
	var total float64
	for _, u := range usage {
		if !seen[u.Project] {
			seen[u.Project] = true
			total += weight(u.Project)
		}
	}
	if total <= 0 {
		return
	}
	for i := range usage {
		usage[i].Share = weight(usage[i].Project) / total
	}
}

// Seconds converts a seconds field to a duration.
func Seconds(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

// ptr returns a pointer to a copy of v.
func ptr[T any](v T) *T { return &v }

// LowRisk reports whether the policy lists queue as low-risk.
func (p *Policy) LowRisk(queue string) bool { return slices.Contains(p.LowRiskQueues(), queue) }

// DefaultShard is the scheduler shard of every pool Policy.Shards leaves
// out (temporalx.DefaultShard).
const DefaultShard = "default"

// ShardNamePattern is what a shard name must match: it becomes part of a
// workflow ID ("scheduler/<shard>") and of each cycle's ID.
const ShardNamePattern = `^[a-z0-9][a-z0-9_-]{0,62}$`

// PoolShards returns the shard of each pool Shards lists, by pool; a pool
// it leaves out is in DefaultShard. nil when Shards is empty.
func (p *Policy) PoolShards() map[string]string {
	if len(p.Shards) == 0 {
		return nil
	}
	out := map[string]string{}
	for shard, pools := range p.Shards {
		for _, pool := range pools {
			out[pool] = shard
		}
	}
	return out
}

// ShardNames returns the scheduler shards the policy runs, sorted:
// DefaultShard and every shard Shards names.
func (p *Policy) ShardNames() []string {
	out := []string{DefaultShard}
	for shard := range p.Shards {
		if shard != DefaultShard {
			out = append(out, shard)
		}
	}
	slices.Sort(out)
	return out
}
