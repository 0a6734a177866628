// Package scheduling is gpugov's pure decision core: Plan(snapshot, policy, now)
// decides which pending jobs get which GPUs, records exactly one wait reason with
// quantities for every job that does not run, reports each job's effective
// priority by parts, and proposes preemptions. It does no I/O, reads no clock and
// imports neither Temporal nor pgx, so the same inputs always give the same plan
// (docs/design.md invariant 4).
//
// Units used throughout: GPU shares in milli-GPU (1000 = one whole GPU), memory in
// MiB, CPU in milli-cores, durations in seconds unless the type is time.Duration.
package scheduling

import (
	"time"

	"github.com/gpugov/gpugov/internal/vocab"
)

// MilliPerGPU is the capacity of one GPU in milli-GPU; a whole-GPU grant uses all of it.
const MilliPerGPU = 1000

// Topology is the placement constraint among the GPUs of one multi-GPU request.
type Topology string

// Accepted topologies.
const (
	TopologyAny          Topology = "any"           // GPUs may be spread across nodes of the pool
	TopologySameNode     Topology = "same-node"     // all GPUs on one node
	TopologyNVLinkDomain Topology = "nvlink-domain" // all GPUs in one NVLink/NVSwitch domain of one node
	// TopologyWholeNodes takes whole nodes: only nodes all of whose GPUs are
	// free (and match) are used, each entirely except possibly the last
	// when the count is not a multiple of the node size (a gang of several
	// machines, as Philly placed jobs larger than one machine).
	TopologyWholeNodes Topology = "whole-nodes"
)

// GPU is one device as reported by NVML (or a static inventory). Its capacity is
// MilliPerGPU.
type GPU struct {
	UUID         string // NVML UUID, unique across the inventory
	Model        string // e.g. "A100-SXM4-80GB", "T4", "G2"
	MemoryMiB    int64  // total device memory in MiB
	NVLinkDomain string // NVLink/NVSwitch domain within the node; "" means the GPU is alone in its domain
	Healthy      bool   // false keeps the GPU out of every placement
}

// Node is one machine of a pool.
type Node struct {
	Name        string
	CPUMilli    int64 // allocatable CPU in milli-cores; 0 means not tracked
	MemoryMiB   int64 // allocatable host memory in MiB; 0 means not tracked
	Schedulable bool  // false when cordoned or drained
	GPUs        []GPU
	// Labels describe the node's storage, network and other properties
	// (e.g. "network": "infiniband"); a request's NodeSelector must match them.
	Labels map[string]string
}

// Pool is a named group of nodes; quotas and automation stages are per pool.
type Pool struct {
	Name      string
	Available bool // false when the pool is drained or cordoned as a whole
	Stage     vocab.AutomationStage
	Nodes     []Node
}

// ResourceRequest is what one job asks for (docs/design.md §1 "resource request").
type ResourceRequest struct {
	GPUs         int      // number of GPUs, 0..n
	GPUMilli     int      // share of one GPU in milli-GPU; only below 1000 with GPUs == 1; 0 or 1000 means whole GPUs
	GPUMemoryMiB int64    // minimum memory per GPU in MiB; 0 means any
	GPUModels    []string // allowed models; empty means any
	Pool         string   // pool name; required
	Topology     Topology // "" is treated as TopologyAny
	CPUMilli     int64    // CPU per job in milli-cores (placed on the node of the first GPU)
	MemoryMiB    int64    // host memory in MiB (placed on the node of the first GPU)
	// Labels are descriptive (the report's job type reads "job_type"); they
	// never constrain placement.
	Labels map[string]string
	// NodeSelector is the required node labels (Kubernetes nodeSelector): a
	// node is a candidate only when every pair equals its label exactly; empty
	// means any node.
	NodeSelector map[string]string
}

// MilliPerDevice returns the milli-GPU the request needs on each of its GPUs.
func (r ResourceRequest) MilliPerDevice() int {
	if r.GPUMilli > 0 && r.GPUMilli < MilliPerGPU {
		return r.GPUMilli
	}
	return MilliPerGPU
}

// TotalMilli returns the request's whole GPU demand in milli-GPU.
func (r ResourceRequest) TotalMilli() int64 {
	return int64(r.GPUs) * int64(r.MilliPerDevice())
}

// Prerequisite is one thing that must be ready before a job can use GPUs
// (image, data volume, runtime).
type Prerequisite struct {
	Name    string
	Ready   bool
	Message string
}

// Checkpoint is one saved state of a job's run.
type Checkpoint struct {
	At       time.Time
	Step     int64
	Location string
}

// RecoveryEvidence says whether a job can be saved and resumed (docs/design.md §1).
type RecoveryEvidence struct {
	Checkpointable            bool
	CheckpointIntervalSeconds int64
	LastCheckpoint            *Checkpoint // nil when the current run has none yet
	VerifiedResumes           int         // count of resumes verified to start at the saved step
	// TotalSteps is the job's declared work in steps, the highest step a
	// checkpoint may report (recovery.total_steps; a job without a command
	// declares its run_seconds, one step per second); 0 when none is declared.
	TotalSteps int64
	// ResumeDowngraded is true after a resume from the wrong step, until a
	// verified resume: the job is then not preempted automatically.
	ResumeDowngraded bool
	// Profile is the job's recovery profile, "<project>/<name>"
	// (docs/design.md §1 "recovery profile"; store.ProfileOf).
	Profile string
	// ProfileVerifiedResumes and ProfileFailedResumes are the profile's
	// record over the policy's evidence window (preemption.evidence_window_s):
	// resumes of any of its jobs that were verified, and those that failed or
	// started from the wrong step. The preemption gate reads them, not
	// VerifiedResumes (the job's own count, kept as information); a new job
	// inherits them (docs/design.md §5 "The evidence rule"). The simulator
	// gives them from its recovery rule.
	ProfileVerifiedResumes int
	ProfileFailedResumes   int
}

// ProfileFailureRate is ProfileFailedResumes / (ProfileVerifiedResumes +
// ProfileFailedResumes); ok is false when the profile has no observed
// resume in the window.
func (r *RecoveryEvidence) ProfileFailureRate() (rate float64, ok bool) {
	n := r.ProfileVerifiedResumes + r.ProfileFailedResumes
	if n <= 0 {
		return 0, false
	}
	return float64(r.ProfileFailedResumes) / float64(n), true
}

// PendingJob is a job waiting for an allocation.
type PendingJob struct {
	ID      string
	Project string
	Queue   string
	Tier    vocab.Tier
	Request ResourceRequest
	// RequestVersion identifies the version of Request the snapshot read
	// (the store's job_queue.seq, which an amendment renews); Plan copies it
	// to the job's Placement so that applying the cycle can refuse a
	// placement planned on a request amended since. 0 means unknown.
	RequestVersion int64
	SubmitTime     time.Time // original submit time; kept across preemption requeues
	WaitingSince   time.Time // start of the current wait (submit, or requeue after preemption)
	AccruedAgingS  float64   // eligible wait seconds of closed stretches: earlier waits (kept on requeue) and this wait's paused-off parts
	// AgingSince is the start of the current stretch of wait that earns aging
	// credit (waiting for GPUs: vocab.WaitReason.EarnsAging); the zero time
	// means WaitingSince. AgingPaused is true while the job's current reason
	// earns none (held, environment_not_ready, pool_unavailable,
	// no_matching_capacity): its credit is AccruedAgingS alone. The store and
	// the simulator keep both with accounting.AgingClock.
	AgingSince    time.Time
	AgingPaused   bool
	Prerequisites []Prerequisite
	Held          bool
	// PreemptionInProgress names the victims' job IDs being checkpointed and released
	// for this job; non-empty makes the reason preemption_in_progress.
	PreemptionInProgress []string
	// PreemptionNoticeAt is the earliest notice (before it, the start) of
	// the preemptions in progress for this job; zero when none. The GPUs
	// come back by it + Policy.Preemption.GraceSeconds (docs/design.md §5,
	// borrowing that gives back).
	PreemptionNoticeAt time.Time
	// VictimsReleasedAt is the latest release of a victim of a preemption
	// carried out for this job during its current wait (zero: none). A
	// lender (within its nominal quota) keeps its claim on its lent quota
	// until it is placed, so that the released borrowers cannot take the
	// GPUs back (docs/design.md §5).
	VictimsReleasedAt time.Time
	// RecentPreemptions holds the times this job was preempted (every run of
	// the job, as RunningJob.RecentPreemptions): a job at the anti-thrash
	// limit may run within its project's nominal quota but not borrow.
	RecentPreemptions []time.Time
	Recovery          RecoveryEvidence
	Protected         bool
	// StoredReason is the wait reason the store holds for the job (the one
	// the previous cycle stored; "" when none). Plan ignores it; the
	// scheduling-cycle activity compares this cycle's reasons with it when
	// it does not remember the previous cycle's, to signal only changes.
	StoredReason vocab.WaitReason
}

// GPUShare is a slice of one GPU held by an allocation.
type GPUShare struct {
	UUID  string
	Milli int // 1..1000
}

// Allocation is the GPUs (or GPU share) held by one run of a job, from grant to release.
type Allocation struct {
	ID        string
	JobID     string
	Pool      string
	Node      string // node of the first GPU (CPU and host memory are charged there)
	GPUs      []GPUShare
	CPUMilli  int64
	MemoryMiB int64
	Borrowed  bool // granted beyond the project's nominal quota (Kueue-style borrowing)
}

// RunningJob is a job holding an allocation.
type RunningJob struct {
	ID         string
	Project    string
	Queue      string
	Tier       vocab.Tier
	Request    ResourceRequest
	Allocation Allocation
	StartedAt  time.Time // start of the current run
	RunSeconds int64     // the job's declared run time in seconds (0: unknown)
	Recovery   RecoveryEvidence
	Protected  bool
	// RecentPreemptions holds the times this job was preempted, for the anti-thrash rule.
	RecentPreemptions []time.Time
}

// Quota is a project's GPU quota in one pool, in milli-GPU (Kueue ClusterQueue
// nominalQuota and borrowingLimit).
type Quota struct {
	Project             string
	Pool                string
	NominalMilli        int64
	BorrowingLimitMilli int64 // how much more than nominal the project may borrow from idle quota
}

// Queue is a named service lane with a tier, a service share and a wait objective.
type Queue struct {
	Name         string
	Tier         vocab.Tier
	ServiceShare float64       // relative weight of the queue's share of the pool
	MaxWait      time.Duration // wait objective; 0 means none
	LowRisk      bool          // victims in this queue may be preempted in the trial stage
	Protected    bool          // jobs in this queue are never preempted or reclaimed
	// MinShare is the fraction (0..1) of each pool's usable GPUs (healthy,
	// on schedulable nodes) guaranteed to the queue while it has demand
	// (Kueue's nominal quota, KAI's deserved quota): while the queue's
	// allocations in a pool hold less, Plan serves its jobs there before
	// the non-production jobs of queues at or above their minimum
	// (docs/design.md §4, "Queue service shares"). It orders; it never
	// preempts. 0 means no guarantee.
	MinShare float64
	// MaxShare caps the queue's allocations in each pool at this fraction
	// (0 < MaxShare ≤ 1) of the pool's usable GPUs: a job that would pass
	// it waits with quota_exhausted naming the cap. 0 means no cap.
	MaxShare float64
}

// ProjectUsage is a project's decayed GPU usage, the input to the fair-share factor.
type ProjectUsage struct {
	Project           string
	DecayedGPUSeconds float64 // sum of GPU-seconds, each decayed by policy half-life to AsOf
	AsOf              time.Time
	Share             float64 // the project's normalised share (0..1]; 0 means equal shares
}

// ProtectionWindow is a time window during which jobs of the named queues (all
// queues when empty) may not be preempted or reclaimed.
type ProtectionWindow struct {
	Name   string
	Start  time.Time
	End    time.Time
	Queues []string
}

// Snapshot is everything Plan needs, loaded at one instant.
type Snapshot struct {
	Pools             []Pool
	Allocations       []Allocation // every active allocation, including those of Running
	Running           []RunningJob
	Pending           []PendingJob
	Quotas            []Quota
	Queues            []Queue
	Usage             []ProjectUsage
	ProtectionWindows []ProtectionWindow
	// CycleIntervalSeconds is the scheduler's timer period: a cycle runs at
	// the latest this long after the snapshot's instant without a signal.
	// It dates the "timer" next re-evaluation; 0 means unknown (none given).
	CycleIntervalSeconds float64
	// InventoryVersion identifies the content of Pools for a Planner, which
	// reuses its capacity index across snapshots with the same nonzero
	// version: whoever fills Pools must give a new version whenever any
	// pool, node or GPU field changes (the store's inventory_version, moved
	// by triggers on pools, nodes, node labels and GPUs; the simulator's
	// inventory, which never changes). 0 means unknown: the index is built
	// afresh. Plan itself ignores it.
	InventoryVersion int64
}
