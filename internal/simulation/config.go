package simulation

import (
	"fmt"
	"slices"

	"github.com/gpugov/gpugov/internal/policy"
	"github.com/gpugov/gpugov/internal/scheduling"
	"github.com/gpugov/gpugov/internal/vocab"
)

// Config is everything a simulation run is governed by: the scheduling policy
// and the settings the trace does not carry (queues, quotas, automation stage,
// projects, recovery evidence), plus the simulator's own knobs. Build it from
// a policy file with FromPolicy (policy.Load reads the file).
type Config struct {
	Policy scheduling.Policy  // Version is the policy's hash (policy.Policy.Hash)
	Queues []scheduling.Queue // one per tier, named after it (trace jobs are routed by tier name)
	Quotas []scheduling.Quota // none by default: no project quota limits
	// ProjectWeights are the projects' fair-share weights
	// (policy.ApplyProjectWeights); empty gives equal shares.
	ProjectWeights map[string]float64
	PoolName       string // name of the pool the node list forms
	Stage          vocab.AutomationStage
	Projects       int    // synthetic projects pods are hashed into (alibaba.ProjectOf)
	Seed           uint64 // seed of the recovery-evidence draw
	Recovery       RecoveryRule
	// CycleIntervalSeconds is the period of the timer-driven scheduling cycle
	// that runs, besides the cycles at arrivals and releases, while some job
	// waits for a reason that time alone can change and some job runs.
	CycleIntervalSeconds int64
	// StarvationFactor: a job is starved when one continuous wait exceeds this
	// many times its queue's wait objective, or it never started.
	StarvationFactor float64
	// StarvationMinWaitS is the queue report's floor, in seconds of trace
	// time, below which a wait carries no starvation signal
	// (queuereport.Options.StarvationMinWaitS): 0 means its default (300 s),
	// queuereport.NoStarvationMinWait none.
	StarvationMinWaitS float64
	// TraceQuotas adds the trace's own quotas (trace.Trace.Quotas: Philly's
	// virtual-cluster sizes) to Quotas, a quota of Quotas winning for the
	// same project and pool (policy simulation.trace_quotas).
	TraceQuotas bool
	// BackgroundStepS, when > 0, holds the pool occupancy the trace's jobs
	// do not explain (trace.Options.BackgroundStepS: Philly derives it from
	// its node sequence in steps of this many seconds) as GPUs no trace job
	// can use; 0 holds none (policy simulation.background_step_s).
	BackgroundStepS int64
	// CyclePeriodSeconds, when > 0, runs the scheduling cycles as periodic
	// passes: a cycle an arrival, a release, a background step or the timer
	// makes due runs at the next multiple of this many trace seconds (at
	// once on one), one pass for all the changes since the last, instead of
	// at the change's own instant; 0 (the default) runs it at once (policy
	// simulation.cycle_period_s).
	CyclePeriodSeconds int64
	// BackgroundByQuota charges the background occupancy to the pool's
	// quotas in proportion to their nominal GPUs (each quota's nominal is
	// lowered by its share of the GPUs the background holds), instead of to
	// the pool's capacity alone (policy simulation.background_by_quota).
	BackgroundByQuota bool
	// BackgroundRandom places the background's GPUs on free GPUs drawn
	// uniformly (a PCG stream per step seeded by Seed and the step's index)
	// and gives back GPUs drawn uniformly from those it holds, as the many
	// small jobs it stands for would scatter; false packs it onto the
	// fullest nodes and gives back from the emptiest (policy
	// simulation.background_placement random|pack).
	BackgroundRandom bool
	// LocalityRelaxS, when > 0, lets a pending job of more than one GPU
	// that has waited this many seconds in its current wait spread over any
	// nodes (its same-node or whole-nodes topology relaxed to any) from the
	// next cycle on; 0 never relaxes (policy simulation.locality_relax_s).
	LocalityRelaxS int64
}

// RecoveryRule assigns recovery evidence, which the trace lacks, to jobs: each
// job of the listed tiers is checkpointable with probability Probability,
// drawn from a PCG stream seeded by (Config.Seed, FNV-64a of the job ID) so
// a job's draw does not depend on the order of the others. A checkpointable
// job checkpoints every CheckpointIntervalSeconds of run time and starts with
// VerifiedResumes verified resumes. The trace carries no recovery profile:
// each job stands for its own, whose record — what the preemption gate reads
// (docs/design.md §5 "The evidence rule") — starts at VerifiedResumes
// verified resumes and no failed one, and gains one verified resume with each
// of the job's resumes (the simulator's resumes never fail), inside any
// evidence window.
type RecoveryRule struct {
	Tiers                     []vocab.Tier
	Probability               float64 // 0..1
	CheckpointIntervalSeconds int64   // > 0
	VerifiedResumes           int
}

// DefaultConfig returns the simulation defaults: FromPolicy of
// policy.Default() — scheduling.DefaultPolicy(), policy.DefaultQueues (four
// queues named after the tiers, shares 4:3:2:1, objectives 60 s, 10 min,
// 1 h, 6 h, production protected and experiment low-risk), no quotas, pool
// "alibaba" in stage automate, 8 projects, seed 1, standard and experiment
// jobs checkpointable with probability 0.5 every 1,800 s with one verified
// resume, a 600 s timer cycle and starvation at 4× the objective.
func DefaultConfig() Config {
	c, err := FromPolicy(policy.Default())
	if err != nil {
		panic(fmt.Sprintf("simulation: default policy: %v", err)) // policy.Default is valid by construction
	}
	return c
}

// FromPolicy builds the simulation's configuration from a resolved policy:
// its scheduling rules (Policy.Version is the policy's Hash), its queues
// (policy.DefaultQueues when it names none), quotas and project weights,
// and its simulation section; the pool's stage is Pools[simulation.pool],
// automate when the policy does not list that pool. It returns Validate's
// error, naming the policy field, when the result cannot be simulated.
func FromPolicy(p *policy.Policy) (Config, error) {
	pq := p.Queues
	if len(pq) == 0 {
		pq = policy.DefaultQueues()
	}
	queues, err := policy.SchedulingQueues(pq)
	if err != nil {
		return Config{}, err
	}
	s := p.Simulation
	c := Config{
		Policy: *p.Scheduling(), Queues: queues, Quotas: p.SchedulingQuotas(),
		ProjectWeights: p.FairShare.ProjectWeights,
		PoolName:       s.Pool, Stage: vocab.StageAutomate,
		Projects: s.Projects, Seed: s.Seed,
		Recovery: RecoveryRule{Probability: s.Recovery.Probability,
			CheckpointIntervalSeconds: s.Recovery.CheckpointIntervalSeconds, VerifiedResumes: s.Recovery.VerifiedResumes},
		CycleIntervalSeconds: s.CycleIntervalSeconds, StarvationFactor: s.StarvationFactor,
		TraceQuotas: s.TraceQuotas, BackgroundStepS: s.BackgroundStepS, CyclePeriodSeconds: s.CyclePeriodSeconds,
		BackgroundByQuota: s.BackgroundByQuota, BackgroundRandom: s.BackgroundPlacement == "random",
		LocalityRelaxS: s.LocalityRelaxSeconds,
	}
	if pl, ok := p.Pools[s.Pool]; ok {
		c.Stage = pl.Stage
	}
	for i, name := range s.Recovery.Tiers {
		t, err := vocab.ParseTier(name)
		if err != nil {
			return Config{}, fmt.Errorf("simulation.recovery.tiers[%d]: %w", i, err)
		}
		c.Recovery.Tiers = append(c.Recovery.Tiers, t)
	}
	if err := c.Validate(); err != nil {
		return Config{}, err
	}
	return c, nil
}

// fieldError is an invalid value, named by its dotted policy field path.
func fieldError(field, format string, args ...any) error {
	return fmt.Errorf("%s: %s", field, fmt.Sprintf(format, args...))
}

// Validate checks the settings the simulator relies on; errors name the
// policy file's field. FromPolicy and Run call it, so a Config built in code
// is held to the same rules: a queue named after each tier
// with that tier, a known stage, a non-empty pool, at least one project, a
// timer period and checkpoint interval of at least 1 s, a recovery
// probability in 0..1 and a positive starvation factor.
func (c Config) Validate() error {
	for _, t := range vocab.Tiers {
		i := slices.IndexFunc(c.Queues, func(q scheduling.Queue) bool { return q.Name == t.String() })
		if i < 0 {
			return fieldError("queues", "no queue named %q (trace jobs go to the queue named after their tier)", t)
		}
		if c.Queues[i].Tier != t {
			return fieldError(fmt.Sprintf("queues[%d].tier", i), "queue %q has tier %s, want %s", t, c.Queues[i].Tier, t)
		}
	}
	r := c.Recovery
	switch {
	case !slices.Contains([]vocab.AutomationStage{vocab.StageObserve, vocab.StageTrial, vocab.StageAutomate}, c.Stage):
		return fieldError(fmt.Sprintf("pools.%s.stage", c.PoolName), "%q is not observe, trial or automate", c.Stage)
	case c.PoolName == "":
		return fieldError("simulation.pool", "is empty")
	case c.Projects < 1:
		return fieldError("simulation.projects", "%d, want at least 1", c.Projects)
	case c.LocalityRelaxS < 0:
		return fieldError("simulation.locality_relax_s", "%d is negative", c.LocalityRelaxS)
	case c.CyclePeriodSeconds < 0:
		return fieldError("simulation.cycle_period_s", "%d is negative", c.CyclePeriodSeconds)
	case c.BackgroundStepS < 0:
		return fieldError("simulation.background_step_s", "%d is negative", c.BackgroundStepS)
	case c.CycleIntervalSeconds < 1:
		return fieldError("simulation.cycle_interval_s", "%d, want at least 1", c.CycleIntervalSeconds)
	case !(c.StarvationFactor > 0):
		return fieldError("simulation.starvation_factor", "%v, want > 0", c.StarvationFactor)
	case !(r.Probability >= 0 && r.Probability <= 1):
		return fieldError("simulation.recovery.probability", "%v is outside 0..1", r.Probability)
	case r.CheckpointIntervalSeconds < 1:
		return fieldError("simulation.recovery.checkpoint_interval_s", "%d, want at least 1", r.CheckpointIntervalSeconds)
	case r.VerifiedResumes < 0:
		return fieldError("simulation.recovery.verified_resumes", "%d is negative", r.VerifiedResumes)
	}
	return nil
}
