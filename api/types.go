package api

import (
	"time"

	"github.com/gpugov/gpugov/internal/scheduling"
	"github.com/gpugov/gpugov/internal/vocab"
	"github.com/gpugov/gpugov/store"
)

// Job is a job as the API returns it. Units: milli-GPU, MiB, seconds.
type Job struct {
	ID              string             `json:"id"`
	Project         string             `json:"project"`
	Queue           string             `json:"queue"`
	Tier            string             `json:"tier"`
	State           vocab.JobState     `json:"state"`
	Resources       ResourceSpec       `json:"resources"`
	Command         []string           `json:"command,omitempty"`
	Env             map[string]string  `json:"env,omitempty"`
	RunSeconds      float64            `json:"run_seconds,omitempty"`
	Recovery        Recovery           `json:"recovery"`
	Prerequisites   []PrerequisiteSpec `json:"prerequisites,omitempty"`
	Protected       bool               `json:"protected"`
	Held            bool               `json:"held"`
	CancelRequested bool               `json:"cancel_requested,omitempty"`
	SubmittedAt     time.Time          `json:"submitted_at"`
	// WaitingSince is the start of the current wait (submit, or requeue after a
	// preemption); only set while the job is pending.
	WaitingSince *time.Time `json:"waiting_since,omitempty"`
	// StartedAt is when the job's first run started (Slurm's sacct Start);
	// absent while it never ran.
	StartedAt *time.Time `json:"started_at,omitempty"`
	// EndedAt is when the job reached a final state; absent until then.
	EndedAt   *time.Time `json:"ended_at,omitempty"`
	UpdatedAt time.Time  `json:"updated_at"`
	// Wait is the job's current wait event; nil when it is not waiting or no
	// scheduling cycle has looked at it yet.
	Wait *Wait `json:"wait,omitempty"`
	// Explanation is the last scheduling cycle's account of the job.
	Explanation *Explanation `json:"explanation,omitempty"`
	// LastRun is how the job's latest run went; only GET /v1/jobs/{id} fills
	// it, once the job has run.
	LastRun *Run `json:"last_run,omitempty"`
	// LastDecision is the last scheduling action for the job; only GET
	// /v1/jobs/{id} fills it, once a cycle has decided about the job.
	LastDecision *LastDecision `json:"last_decision,omitempty"`
	// Note tells the client something about this answer, e.g. that the job
	// workflow will be started by the reconciler (202 on submit).
	Note string `json:"note,omitempty"`
}

// Run is one run of a job (Slurm's sacct line of a job step).
type Run struct {
	ID        string     `json:"id"`
	Number    int        `json:"number"` // 1 for the first run, +1 per requeue or preemption
	StartedAt time.Time  `json:"started_at"`
	EndedAt   *time.Time `json:"ended_at,omitempty"`
	// Outcome is succeeded, failed, cancelled or preempted; absent while it runs.
	Outcome string `json:"outcome,omitempty"`
	// Detail says why it ended that way (executor error, node failure, who cancelled).
	Detail string `json:"detail,omitempty"`
}

// runFromStore converts a run summary; nil stays nil.
func runFromStore(r *store.RunSummary) *Run {
	if r == nil {
		return nil
	}
	return &Run{ID: r.ID, Number: r.Number, StartedAt: r.StartedAt, EndedAt: r.EndedAt, Outcome: string(r.Outcome), Detail: r.Detail}
}

// Recovery is the job's recovery evidence (docs/design.md "recovery evidence").
type Recovery struct {
	Checkpointable            bool        `json:"checkpointable"`
	CheckpointIntervalSeconds int64       `json:"checkpoint_interval_s,omitempty"`
	LastCheckpoint            *Checkpoint `json:"last_checkpoint,omitempty"`
	// VerifiedResumes is the job's own count, as information: the
	// preemption gate reads its profile's record (docs/design.md §5).
	VerifiedResumes int `json:"verified_resumes"`
	// Profile is the job's recovery profile, "<project>/<name>".
	Profile string `json:"profile,omitempty"`
	// TotalSteps is the job's declared work in steps (recovery.total_steps); absent when none.
	TotalSteps int64 `json:"total_steps,omitempty"`
}

// Checkpoint is one saved state of a run.
type Checkpoint struct {
	At       time.Time `json:"at"`
	Step     int64     `json:"step"`
	Location string    `json:"location,omitempty"`
}

// Wait is the current wait of a job: one reason, its quantities and since when.
type Wait struct {
	Reason        string    `json:"reason"`
	Detail        string    `json:"detail,omitempty"`
	NextAction    string    `json:"next_action,omitempty"`
	ReEvaluate    string    `json:"reevaluate,omitempty"`
	BlockingJobID string    `json:"blocking_job_id,omitempty"`
	Since         time.Time `json:"since"` // start of this reason's wait event
}

// Explanation is the last scheduling cycle's account of a job: rank in its
// pool, effective priority by parts, and what would change its wait.
type Explanation struct {
	Rank     int      `json:"rank"` // among the cycle's pending jobs of Pool, 1 = first
	Pool     string   `json:"pool"`
	Priority Priority `json:"priority"`
	Reason   string   `json:"reason,omitempty"`
	// Detail is the reason's quantities as the cycle that wrote the
	// explanation saw them (the open wait event's detail then).
	Detail        string    `json:"detail,omitempty"`
	ReEvaluate    string    `json:"reevaluate,omitempty"`
	BlockingJobID string    `json:"blocking_job_id,omitempty"`
	Placed        *PlacedOn `json:"placed,omitempty"`
	// Suggestions are the nearest requests that would fit, for
	// no_matching_capacity and fragmented (docs/design.md §1 "What would
	// change it"); absent when no single change fits.
	Suggestions []Suggestion `json:"suggestions,omitempty"`
	// Releases are the running jobs whose end would free what the job
	// needs, earliest first, for capacity_busy and quota_exhausted.
	Releases []ExpectedRelease `json:"releases,omitempty"`
	// CycleID and EvaluatedAt name the cycle that wrote the explanation.
	CycleID     string     `json:"cycle_id,omitempty"`
	EvaluatedAt *time.Time `json:"evaluated_at,omitempty"`
	// NextEvaluation is when a cycle is next expected to evaluate the job
	// with a chance of a different outcome; absent when unknown.
	NextEvaluation *NextEvaluation `json:"next_evaluation,omitempty"`
	// Overtake is aging's comparison with the job ahead in the pool; absent
	// when no job is ahead, aging is off or the reason is not a capacity one.
	Overtake *Overtake `json:"overtake,omitempty"`
}

// NextEvaluation is a waiting job's expected next re-evaluation
// (docs/design.md §1): the timer's next cycle, the instant aging lifts it
// above the job ahead in its pool, or a running job's expected end from its
// declared run time (estimate true).
type NextEvaluation struct {
	At       time.Time `json:"at"`
	Kind     string    `json:"kind"` // vocab.NextEvalKinds
	Estimate bool      `json:"estimate,omitempty"`
}

// Overtake is what aging does to a blocked job's place behind the job ahead
// (both aging, each up to its own bound). Points are priority points; At is
// absent when never is true: the gap is larger than what this job can still
// gain beyond what the job ahead gains.
type Overtake struct {
	AheadJobID          string     `json:"ahead_job_id"`
	GapPoints           float64    `json:"gap_points"`
	HeadroomPoints      float64    `json:"headroom_points"`
	AheadHeadroomPoints float64    `json:"ahead_headroom_points"`
	BoundPoints         float64    `json:"bound_points"`
	At                  *time.Time `json:"at,omitempty"`
	Never               bool       `json:"never,omitempty"`
}

// LastDecision is the last scheduling action for a job (docs/design.md §1,
// "last scheduling action"; store.LastDecision).
type LastDecision struct {
	CycleID string    `json:"cycle_id"`
	At      time.Time `json:"at"`     // the cycle's time
	Action  string    `json:"action"` // vocab.SchedulingActions
	// Reason is the wait reason of left_waiting, held_by_reservation and skipped.
	Reason string `json:"reason,omitempty"`
	// JobID is the job holding the reservation (held_by_reservation).
	JobID string `json:"job_id,omitempty"`
	// Victims are the jobs a started or proposed preemption stops.
	Victims []string `json:"victims,omitempty"`
	// Detail is a refused placement's refusal or a proposal's reason.
	Detail string `json:"detail,omitempty"`
	Rank   int    `json:"rank,omitempty"` // in the job's pool, that cycle
	// Since is when cycles began taking this action without a break.
	Since time.Time `json:"since"`
	// Policy is the hash of the policy version the deciding cycle ran with
	// (absent when the cycle recorded none).
	Policy string `json:"policy,omitempty"`
}

// lastDecisionFromStore converts a last decision; nil stays nil.
func lastDecisionFromStore(d *store.LastDecision) *LastDecision {
	if d == nil {
		return nil
	}
	return &LastDecision{CycleID: d.CycleID, At: d.At, Action: string(d.Action), Reason: string(d.Reason), JobID: d.JobID,
		Victims: d.Victims, Detail: d.Detail, Rank: d.Rank, Since: d.Since, Policy: d.Policy}
}

// Suggestion is one changed request that would fit the job's pool: field
// (gpu_models, gpu_memory_mib, gpus, topology, node_selector) set to value as
// a spec writes it; now says it fits the GPUs free in the last cycle, else
// only once its matching GPUs are free.
type Suggestion struct {
	Field        string `json:"field"`
	Value        string `json:"value"`
	Now          bool   `json:"now"`
	MatchingGPUs int    `json:"matching_gpus"` // usable GPUs the changed request matches
	FreeGPUs     int    `json:"free_gpus"`     // of those, free outside reservations
	Nodes        int    `json:"nodes"`         // schedulable nodes its node selector matches
	Text         string `json:"text"`          // the suggestion in words
}

// ExpectedRelease is a running job whose end would free milli-GPU the job
// could use; expected_end is its run's start plus its declared run_seconds,
// an estimate and never a promise.
type ExpectedRelease struct {
	JobID       string    `json:"job_id"`
	Milli       int64     `json:"milli"`
	ExpectedEnd time.Time `json:"expected_end"`
}

// Priority is a job's effective priority in points: score = tier_base +
// aging_credit + fair_share (scheduling.Priority).
type Priority struct {
	Score       float64   `json:"score"`
	TierBase    float64   `json:"tier_base"`
	AgingCredit float64   `json:"aging_credit"`
	AgingCapped bool      `json:"aging_capped"`
	FairShare   float64   `json:"fair_share"`
	FairFactor  float64   `json:"fair_factor"`
	SubmitTime  time.Time `json:"submit_time"`
	// MinShareBoost says, with the numbers, that the job's queue was below
	// its min_share in the pool, so the job was served before queues at or
	// above theirs (scheduling.Priority.MinShareBoost); absent otherwise.
	MinShareBoost string `json:"min_share_boost,omitempty"`
}

// PlacedOn is where the last cycle placed the job.
type PlacedOn struct {
	Pool     string     `json:"pool"`
	Node     string     `json:"node"`
	GPUs     []GPUShare `json:"gpus"`
	Borrowed bool       `json:"borrowed,omitempty"`
}

// GPUShare is a share of one GPU in milli-GPU.
type GPUShare struct {
	UUID  string `json:"uuid"`
	Milli int    `json:"milli"`
}

// JobList is one page of GET /v1/jobs. NextCursor is passed back as ?cursor=
// for the next page; empty on the last page.
type JobList struct {
	Jobs       []Job  `json:"jobs"`
	NextCursor string `json:"next_cursor,omitempty"`
}

// WaitEvent is one interval during which a job waited for one reason.
// EndedAt is nil for the current one; DurationSeconds then counts to now.
type WaitEvent struct {
	Reason          string     `json:"reason"`
	Detail          string     `json:"detail,omitempty"`
	NextAction      string     `json:"next_action,omitempty"`
	ReEvaluate      string     `json:"reevaluate,omitempty"`
	BlockingJobID   string     `json:"blocking_job_id,omitempty"`
	StartedAt       time.Time  `json:"started_at"`
	EndedAt         *time.Time `json:"ended_at,omitempty"`
	DurationSeconds float64    `json:"duration_s"`
}

// WaitEventList is the body of GET /v1/jobs/{id}/events: the job's wait
// events, oldest first, with the rest of its why record — state, submit
// time, the current wait's start, the last cycle's explanation (rank in
// pool, next re-evaluation, overtake) and the last scheduling action.
type WaitEventList struct {
	JobID        string         `json:"job_id"`
	State        vocab.JobState `json:"state"`
	SubmittedAt  time.Time      `json:"submitted_at"`
	WaitingSince *time.Time     `json:"waiting_since,omitempty"` // only while pending
	Explanation  *Explanation   `json:"explanation,omitempty"`
	LastDecision *LastDecision  `json:"last_decision,omitempty"`
	Events       []WaitEvent    `json:"events"`
}

// Queue is a service lane (docs/design.md "queue").
type Queue struct {
	Name         string  `json:"name"`
	Tier         string  `json:"tier"`
	ServiceShare float64 `json:"service_share"`
	MaxWaitSec   float64 `json:"max_wait_s"` // wait objective; 0 means none
	LowRisk      bool    `json:"low_risk"`
	Protected    bool    `json:"protected"`
	// MinShare is the fraction of each pool's usable GPUs guaranteed to the
	// queue while it has demand; 0 means none (docs/design.md §4).
	MinShare float64 `json:"min_share"`
	// MaxShare caps the queue at this fraction of each pool's usable GPUs; 0 means no cap.
	MaxShare float64 `json:"max_share"`
}

// QueueList is the body of GET /v1/queues.
type QueueList struct {
	Queues []Queue `json:"queues"`
}

// Inventory is the body of GET /v1/inventory.
type Inventory struct {
	Pools []Pool `json:"pools"`
}

// Pool is one pool of the inventory.
type Pool struct {
	Name      string `json:"name"`
	Available bool   `json:"available"`
	Stage     string `json:"stage"`
	Nodes     []Node `json:"nodes"`
}

// Node is one machine of a pool; CPU in milli-cores, memory in MiB.
type Node struct {
	Name        string `json:"name"`
	CPUMilli    int64  `json:"cpu_milli"`
	MemoryMiB   int64  `json:"memory_mib"`
	Schedulable bool   `json:"schedulable"`
	GPUs        []GPU  `json:"gpus"`
	// Labels are the node's labels (storage, network, ...) that jobs'
	// resources.node_selector match.
	Labels map[string]string `json:"labels,omitempty"`
}

// GPU is one device; memory in MiB.
type GPU struct {
	UUID         string `json:"uuid"`
	Model        string `json:"model"`
	MemoryMiB    int64  `json:"memory_mib"`
	NVLinkDomain string `json:"nvlink_domain,omitempty"`
	Healthy      bool   `json:"healthy"`
}

// ActionRequest is the optional body of cancel, hold and release: why, for
// the audit log (and a hold's wait detail), at most vocab.MaxReasonLength
// bytes.
type ActionRequest struct {
	Reason string `json:"reason,omitempty"`
}

// Health is the body of /healthz and of a ready /readyz.
type Health struct {
	Status string `json:"status"`
}

// jobFromStore converts a stored job; wait is its open wait event or nil.
func jobFromStore(j *store.Job, wait *store.WaitEvent) Job {
	out := Job{
		ID: j.ID, Project: j.Project, Queue: j.Queue, Tier: j.Tier.String(), State: j.State,
		Resources: resourcesFromRequest(j.Request), Command: j.Command, Env: j.Env, RunSeconds: j.RunSeconds,
		Recovery: recoveryFromStore(j.Recovery), Protected: j.Protected, Held: j.Held,
		CancelRequested: j.CancelRequested, SubmittedAt: j.SubmitTime, UpdatedAt: j.UpdatedAt,
		StartedAt: j.StartedAt, EndedAt: j.EndedAt,
	}
	for _, p := range j.Prerequisites {
		out.Prerequisites = append(out.Prerequisites, PrerequisiteSpec{Name: p.Name, Ready: p.Ready, Message: p.Message})
	}
	if j.State.Pending() {
		since := j.WaitingSince
		out.WaitingSince = &since
	}
	if wait != nil {
		out.Wait = &Wait{
			Reason: string(wait.Reason), Detail: wait.Detail, NextAction: wait.NextAction,
			ReEvaluate: wait.ReEvaluate, BlockingJobID: wait.BlockingJobID, Since: wait.StartedAt,
		}
	}
	if j.Explanation != nil {
		out.Explanation = explanationFromStore(j.Explanation, j.Request.Pool)
	}
	return out
}

func resourcesFromRequest(r scheduling.ResourceRequest) ResourceSpec {
	return ResourceSpec{
		GPUs: r.GPUs, GPUMilli: r.GPUMilli, GPUMemoryMiB: r.GPUMemoryMiB, GPUModels: r.GPUModels, Pool: r.Pool,
		Topology: string(r.Topology), CPUMilli: r.CPUMilli, MemoryMiB: r.MemoryMiB, Labels: r.Labels,
		NodeSelector: r.NodeSelector,
	}
}

func recoveryFromStore(r scheduling.RecoveryEvidence) Recovery {
	out := Recovery{
		Checkpointable: r.Checkpointable, CheckpointIntervalSeconds: r.CheckpointIntervalSeconds,
		VerifiedResumes: r.VerifiedResumes, Profile: r.Profile, TotalSteps: r.TotalSteps,
	}
	if c := r.LastCheckpoint; c != nil {
		out.LastCheckpoint = &Checkpoint{At: c.At, Step: c.Step, Location: c.Location}
	}
	return out
}

func explanationFromStore(e *store.Explanation, pool string) *Explanation {
	out := &Explanation{
		Rank: e.Rank, Pool: pool, Reason: string(e.Reason), Detail: e.Detail, ReEvaluate: e.ReEvaluate, BlockingJobID: e.BlockingJobID,
		CycleID: e.CycleID, EvaluatedAt: e.EvaluatedAt,
		Priority: Priority{
			Score: e.Priority.Score, TierBase: e.Priority.TierBase, AgingCredit: e.Priority.AgingCredit,
			AgingCapped: e.Priority.AgingCapped, FairShare: e.Priority.FairShare, FairFactor: e.Priority.FairFactor,
			SubmitTime: e.Priority.SubmitTime, MinShareBoost: e.Priority.MinShareBoost,
		},
	}
	if n := e.NextEvaluation; n != nil {
		out.NextEvaluation = &NextEvaluation{At: n.At, Kind: string(n.Kind), Estimate: n.Estimate}
	}
	if o := e.Overtake; o != nil {
		out.Overtake = &Overtake{AheadJobID: o.AheadJobID, GapPoints: o.GapPoints, HeadroomPoints: o.HeadroomPoints,
			AheadHeadroomPoints: o.AheadHeadroomPoints, BoundPoints: o.BoundPoints, At: o.At, Never: o.Never}
	}
	for _, sg := range e.Suggestions {
		out.Suggestions = append(out.Suggestions, Suggestion(sg))
	}
	for _, r := range e.Releases {
		out.Releases = append(out.Releases, ExpectedRelease(r))
	}
	if p := e.Placed; p != nil {
		out.Pool = p.Pool
		out.Placed = &PlacedOn{Pool: p.Pool, Node: p.Node, Borrowed: p.Borrowed}
		for _, g := range p.GPUs {
			out.Placed.GPUs = append(out.Placed.GPUs, GPUShare{UUID: g.UUID, Milli: g.Milli})
		}
	}
	return out
}

// waitEventFromStore converts a stored wait event; now closes an open one for
// its duration.
func waitEventFromStore(e store.WaitEvent, now time.Time) WaitEvent {
	end := now
	if e.EndedAt != nil {
		end = *e.EndedAt
	}
	return WaitEvent{
		Reason: string(e.Reason), Detail: e.Detail, NextAction: e.NextAction, ReEvaluate: e.ReEvaluate,
		BlockingJobID: e.BlockingJobID, StartedAt: e.StartedAt, EndedAt: e.EndedAt,
		DurationSeconds: end.Sub(e.StartedAt).Seconds(),
	}
}

func queueFromScheduling(q scheduling.Queue) Queue {
	return Queue{
		Name: q.Name, Tier: q.Tier.String(), ServiceShare: q.ServiceShare, MaxWaitSec: q.MaxWait.Seconds(),
		LowRisk: q.LowRisk, Protected: q.Protected, MinShare: q.MinShare, MaxShare: q.MaxShare,
	}
}

func inventoryFromScheduling(pools []scheduling.Pool) Inventory {
	inv := Inventory{Pools: make([]Pool, 0, len(pools))}
	for _, p := range pools {
		op := Pool{Name: p.Name, Available: p.Available, Stage: string(p.Stage), Nodes: make([]Node, 0, len(p.Nodes))}
		for _, n := range p.Nodes {
			on := Node{Name: n.Name, CPUMilli: n.CPUMilli, MemoryMiB: n.MemoryMiB, Schedulable: n.Schedulable,
				GPUs: make([]GPU, 0, len(n.GPUs)), Labels: n.Labels}
			for _, g := range n.GPUs {
				on.GPUs = append(on.GPUs, GPU{UUID: g.UUID, Model: g.Model, MemoryMiB: g.MemoryMiB,
					NVLinkDomain: g.NVLinkDomain, Healthy: g.Healthy})
			}
			op.Nodes = append(op.Nodes, on)
		}
		inv.Pools = append(inv.Pools, op)
	}
	return inv
}
