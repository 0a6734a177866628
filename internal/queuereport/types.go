package queuereport

import (
	"encoding/json"
	"fmt"
	"math"
	"time"

	"github.com/gpugov/gpugov/internal/scheduling"
	"github.com/gpugov/gpugov/internal/vocab"
)

// Request is the part of a job's resource request that decides whether two jobs
// fit the same GPUs. Its fields mean what they mean in scheduling.ResourceRequest.
type Request struct {
	GPUs     int      `json:"gpus"`                 // number of GPUs
	GPUMilli int      `json:"gpu_milli,omitempty"`  // share of one GPU in milli-GPU; only below 1000 with GPUs == 1; 0 or 1000 means whole GPUs
	Models   []string `json:"gpu_models,omitempty"` // allowed GPU models; empty means any model
}

// RequestOf summarises a scheduling.ResourceRequest.
func RequestOf(r scheduling.ResourceRequest) Request {
	return Request{GPUs: r.GPUs, GPUMilli: r.GPUMilli, Models: r.GPUModels}
}

// DemandMilli returns the request's whole GPU demand in milli-GPU: GPUs times
// the milli-GPU needed on each GPU (the same rule as
// scheduling.ResourceRequest.TotalMilli).
func (r Request) DemandMilli() int64 {
	per := int64(scheduling.MilliPerGPU)
	if r.GPUMilli > 0 && r.GPUMilli < scheduling.MilliPerGPU {
		per = int64(r.GPUMilli)
	}
	return int64(r.GPUs) * per
}

// Job is one job as the report sees it.
type Job struct {
	ID      string
	Queue   string
	Tier    vocab.Tier
	JobType string // free-form job type label (e.g. training, inference, notebook)
	Pool    string
	Project string
	Request Request

	SubmitTime time.Time  // original submit time; kept across requeues
	FirstStart *time.Time // start of the first run; nil when the job never started
	// End is when the job left the system (finished, failed or cancelled); nil
	// while it is pending or running. For a job that finished by running it
	// equals its last run's End.
	End                   *time.Time
	Cancelled             bool   // the job was cancelled (at any point)
	CancelledWhileWaiting bool   // the job was cancelled while waiting; End is the cancellation time
	State                 string // the job's state label as stored (listed with starving jobs)
}

// jobJSON is Job's JSON form: the tier is written by name.
type jobJSON struct {
	ID                    string     `json:"id"`
	Queue                 string     `json:"queue"`
	Tier                  string     `json:"tier"`
	JobType               string     `json:"job_type"`
	Pool                  string     `json:"pool"`
	Project               string     `json:"project"`
	Request               Request    `json:"request"`
	SubmitTime            time.Time  `json:"submit_time"`
	FirstStart            *time.Time `json:"first_start,omitempty"`
	End                   *time.Time `json:"end,omitempty"`
	Cancelled             bool       `json:"cancelled,omitempty"`
	CancelledWhileWaiting bool       `json:"cancelled_while_waiting,omitempty"`
	State                 string     `json:"state,omitempty"`
}

// MarshalJSON writes the job with snake_case keys and the tier by name.
func (j Job) MarshalJSON() ([]byte, error) {
	return json.Marshal(jobJSON{
		ID: j.ID, Queue: j.Queue, Tier: j.Tier.String(), JobType: j.JobType, Pool: j.Pool,
		Project: j.Project, Request: j.Request, SubmitTime: j.SubmitTime, FirstStart: j.FirstStart,
		End: j.End, Cancelled: j.Cancelled, CancelledWhileWaiting: j.CancelledWhileWaiting, State: j.State,
	})
}

// UnmarshalJSON reads the form MarshalJSON writes. It returns an error for an
// unknown tier name.
func (j *Job) UnmarshalJSON(b []byte) error {
	var v jobJSON
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	tier, err := vocab.ParseTier(v.Tier)
	if err != nil {
		return fmt.Errorf("job %q: %w", v.ID, err)
	}
	*j = Job{
		ID: v.ID, Queue: v.Queue, Tier: tier, JobType: v.JobType, Pool: v.Pool, Project: v.Project,
		Request: v.Request, SubmitTime: v.SubmitTime, FirstStart: v.FirstStart, End: v.End,
		Cancelled: v.Cancelled, CancelledWhileWaiting: v.CancelledWhileWaiting, State: v.State,
	}
	return nil
}

// Run is one execution attempt of a job on an allocation.
type Run struct {
	JobID    string     `json:"job_id"`
	Start    time.Time  `json:"start"`
	End      *time.Time `json:"end,omitempty"` // nil while running
	GPUMilli int64      `json:"gpu_milli"`     // total milli-GPU held by the run (2 whole GPUs = 2000)
}

// WaitEvent is one interval during which a job waited for one reason (docs/design.md §1).
type WaitEvent struct {
	JobID  string           `json:"job_id"`
	Reason vocab.WaitReason `json:"reason"`
	Start  time.Time        `json:"start"`
	End    *time.Time       `json:"end,omitempty"` // nil while the job still waits for this reason
}

// Release is one release of GPUs in a pool: an allocation ended (run exit,
// preemption or reclaim) and its GPUs became free.
type Release struct {
	At       time.Time `json:"at"`
	Pool     string    `json:"pool"`
	Models   []string  `json:"gpu_models,omitempty"` // models of the GPUs freed; empty means unknown (matches every job)
	GPUMilli int64     `json:"gpu_milli"`            // milli-GPU freed (informational; not used for matching)
}

// QueueTarget is a queue's configured service share, wait objective and
// pool shares (scheduling.Queue).
type QueueTarget struct {
	Queue        string
	ServiceShare float64       // relative weight of the queue's share of a pool; normalised over all targets
	MaxWait      time.Duration // wait objective; 0 means none
	MinShare     float64       // guaranteed fraction of each pool's GPUs (0..1); 0 means none
	MaxShare     float64       // cap as a fraction of each pool's GPUs (0..1); 0 means none
}

// queueTargetJSON is QueueTarget's JSON form: the objective is in seconds.
type queueTargetJSON struct {
	Queue        string  `json:"queue"`
	ServiceShare float64 `json:"service_share"`
	MaxWaitS     float64 `json:"max_wait_s"`
	MinShare     float64 `json:"min_share,omitempty"`
	MaxShare     float64 `json:"max_share,omitempty"`
}

// MarshalJSON writes the target with MaxWait in seconds (max_wait_s).
func (q QueueTarget) MarshalJSON() ([]byte, error) {
	return json.Marshal(queueTargetJSON{Queue: q.Queue, ServiceShare: q.ServiceShare, MaxWaitS: q.MaxWait.Seconds(),
		MinShare: q.MinShare, MaxShare: q.MaxShare})
}

// UnmarshalJSON reads the form MarshalJSON writes.
func (q *QueueTarget) UnmarshalJSON(b []byte) error {
	var v queueTargetJSON
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	*q = QueueTarget{Queue: v.Queue, ServiceShare: v.ServiceShare, MaxWait: time.Duration(math.Round(v.MaxWaitS * float64(time.Second))),
		MinShare: v.MinShare, MaxShare: v.MaxShare}
	return nil
}

// TargetsOf returns the targets of the given queues.
func TargetsOf(queues []scheduling.Queue) []QueueTarget {
	out := make([]QueueTarget, 0, len(queues))
	for _, q := range queues {
		out = append(out, QueueTarget{Queue: q.Name, ServiceShare: q.ServiceShare, MaxWait: q.MaxWait,
			MinShare: q.MinShare, MaxShare: q.MaxShare})
	}
	return out
}

// PoolCapacity is the GPUs a pool offers, the base of the queues' pool
// shares: its usable GPUs (healthy, on schedulable nodes), as Plan counts
// them for min_share and max_share, taken as constant over the window.
type PoolCapacity struct {
	Pool string  `json:"pool"`
	GPUs float64 `json:"gpus"`
}

// CapacityOf returns the usable GPUs of each pool (healthy GPUs on
// schedulable nodes), in the pools' order.
func CapacityOf(pools []scheduling.Pool) []PoolCapacity {
	out := make([]PoolCapacity, 0, len(pools))
	for _, p := range pools {
		var n float64
		for _, nd := range p.Nodes {
			if !nd.Schedulable {
				continue
			}
			for _, g := range nd.GPUs {
				if g.Healthy {
					n++
				}
			}
		}
		out = append(out, PoolCapacity{Pool: p.Name, GPUs: n})
	}
	return out
}

// Input is every record a report is computed from. Jobs must include every job
// referenced by Runs and WaitEvents, and Runs every run of each job.
type Input struct {
	Jobs       []Job         `json:"jobs"`
	Runs       []Run         `json:"runs"`
	WaitEvents []WaitEvent   `json:"wait_events"`
	Releases   []Release     `json:"releases"`
	Targets    []QueueTarget `json:"targets"`
	// Capacity is each pool's usable GPUs, the base of pool_share; a pool
	// not listed has no pool_share.
	Capacity []PoolCapacity `json:"capacity,omitempty"`
	// ProjectWeights are the projects' fair-share weights (the policy's
	// fair_share.project_weights; a project not listed weighs 1), the base
	// of project_target_share.
	ProjectWeights map[string]float64 `json:"project_weights,omitempty"`
}

// ShareBase is what a report's shares are measured against besides the
// queue targets: Input's Capacity and ProjectWeights, given to Assemble.
type ShareBase struct {
	Capacity       []PoolCapacity
	ProjectWeights map[string]float64
}

// Window is the half-open time interval [From, To) a report covers.
type Window struct {
	From time.Time `json:"from"`
	To   time.Time `json:"to"`
}

// Group-by keys, in the order report keys and columns are written.
const (
	KeyQueue   = "queue"
	KeyTier    = "tier"
	KeyJobType = "job_type"
	KeyPool    = "pool"
	KeyProject = "project"
)

// GroupKeys lists every accepted group-by key in canonical order.
var GroupKeys = []string{KeyQueue, KeyTier, KeyJobType, KeyPool, KeyProject}

// DefaultGroupBy is docs/design.md §6's grouping: queue × tier × job type × pool.
var DefaultGroupBy = []string{KeyQueue, KeyTier, KeyJobType, KeyPool}

// Default starvation thresholds, used where Options leaves a threshold at 0.
// They are gpugov's choices, not taken from another scheduler: one overtaking
// start is already unfair, while a release or a higher-tier arrival alone is
// ordinary; three of them during one wait are a pattern.
const (
	DefaultOvertakenThreshold   = 1
	DefaultStarvationReleases   = 3
	DefaultTierArrivalThreshold = 3
)

// DefaultStarvationMinWait is the shortest wait that can carry a starvation
// signal when Options leaves StarvationMinWaitS at 0; a queue's wait objective
// raises it (see Options.StarvationMinWaitS).
const DefaultStarvationMinWait = 5 * time.Minute

// NoStarvationMinWait as Options.StarvationMinWaitS drops the floor, so that
// only the queue's wait objective (if any) bounds which waits carry signals.
const NoStarvationMinWait = -1

// DefaultStarvingLimit is how many starving jobs a report lists when Options
// leaves StarvingLimit at 0: enough to act on, while a congested pool can make
// hundreds of thousands of jobs starving. The counts per group are always exact.
const DefaultStarvingLimit = 100

// NoStarvingLimit as Options.StarvingLimit lists every starving job.
const NoStarvingLimit = -1

// Options says what to compute. Zero thresholds and limit take the defaults
// above; nil GroupBy takes DefaultGroupBy.
type Options struct {
	Window Window    `json:"window"`
	Now    time.Time `json:"now"` // the instant the records were read; open intervals end at min(Window.To, Now)
	// GroupBy is any subset of GroupKeys; groups are keyed in canonical order
	// whatever the order given. An empty, non-nil list gives only the total.
	GroupBy              []string `json:"group_by"`
	OvertakenThreshold   int      `json:"overtaken_threshold"`    // overtaking starts during one wait that make a job starving
	StarvationReleases   int      `json:"starvation_releases"`    // matching releases during one wait that make a job starving (N)
	TierArrivalThreshold int      `json:"tier_arrival_threshold"` // higher-tier arrivals during one wait that make a job starving (K)
	StarvingLimit        int      `json:"starving_limit"`         // list at most this many starving jobs (longest waits first); 0: DefaultStarvingLimit; NoStarvingLimit: all
	// StarvationMinWaitS is the floor, in seconds, below which a wait carries
	// no starvation signal: a wait counts only once it has lasted at least
	// max(its queue's MaxWait, this floor), measured as for longest_wait_s.
	// 0 takes DefaultStarvationMinWait; NoStarvationMinWait takes none (the
	// queue's objective alone).
	//
	// Kueue and Armada report no starvation signal, so no floor is borrowed
	// from them; gpugov's reasons are: a job still inside its queue's wait
	// objective is served as the queue promises, so being overtaken or
	// passing a release then is ordinary queueing, not starvation; and
	// below a few minutes every busy pool shows overtakings and releases
	// within a few scheduling cycles (a live replay of the Alibaba trace
	// flagged 570 of 738 jobs, each of which had waited at most 19 s). Five
	// minutes is many scheduling cycles yet short against the objectives
	// operators set (tens of minutes to hours).
	StarvationMinWaitS float64 `json:"starvation_min_wait_s"`
	// WaitHistogram adds each group's histogram of initial waits
	// (Group.WaitHistogram, bins WaitHistogramEdges): the web console's
	// wait-distribution chart.
	WaitHistogram bool `json:"wait_histogram,omitempty"`
}

// starvationFloor returns the shortest wait of a queue with objective maxWait
// (ns, 0 for none) that carries starvation signals, in ns.
func (o Options) starvationFloor(maxWait int64) int64 {
	return max(maxWait, int64(math.Round(max(0, o.StarvationMinWaitS)*1e9)))
}

// normalized returns the options with defaults applied and GroupBy in
// canonical order, or an error naming the first bad field.
func (o Options) normalized() (Options, error) {
	if o.Window.From.IsZero() || o.Window.To.IsZero() {
		return o, fmt.Errorf("window: from and to are required")
	}
	if !o.Window.To.After(o.Window.From) {
		return o, fmt.Errorf("window: to (%s) must be after from (%s)", o.Window.To.Format(time.RFC3339), o.Window.From.Format(time.RFC3339))
	}
	if o.Now.IsZero() {
		return o, fmt.Errorf("now is required")
	}
	if o.Now.Before(o.Window.From) {
		return o, fmt.Errorf("now (%s) is before window.from (%s)", o.Now.Format(time.RFC3339), o.Window.From.Format(time.RFC3339))
	}
	switch {
	case o.StarvationMinWaitS == 0:
		o.StarvationMinWaitS = DefaultStarvationMinWait.Seconds()
	case o.StarvationMinWaitS < 0 && o.StarvationMinWaitS != NoStarvationMinWait,
		math.IsNaN(o.StarvationMinWaitS) || math.IsInf(o.StarvationMinWaitS, 0):
		return o, fmt.Errorf("starvation_min_wait_s: must be a number of seconds ≥ 0 (or %d for none), got %v",
			NoStarvationMinWait, o.StarvationMinWaitS)
	}
	gb, err := ParseGroupBy(o.GroupBy)
	if err != nil {
		return o, err
	}
	o.GroupBy = gb
	for _, t := range []struct {
		name string
		v    *int
		def  int
	}{
		{"overtaken_threshold", &o.OvertakenThreshold, DefaultOvertakenThreshold},
		{"starvation_releases", &o.StarvationReleases, DefaultStarvationReleases},
		{"tier_arrival_threshold", &o.TierArrivalThreshold, DefaultTierArrivalThreshold},
		{"starving_limit", &o.StarvingLimit, DefaultStarvingLimit},
	} {
		if *t.v < 0 && !(t.name == "starving_limit" && *t.v == NoStarvingLimit) {
			return o, fmt.Errorf("%s: must not be negative, got %d", t.name, *t.v)
		}
		if *t.v == 0 {
			*t.v = t.def
		}
	}
	return o, nil
}

// ParseGroupBy validates group-by keys and returns them in canonical order
// (GroupKeys). nil gives DefaultGroupBy; an empty, non-nil list gives an empty
// grouping. It returns an error naming an unknown or repeated key.
func ParseGroupBy(keys []string) ([]string, error) {
	if keys == nil {
		return append([]string(nil), DefaultGroupBy...), nil
	}
	seen := make(map[string]bool, len(keys))
	for _, k := range keys {
		if !isGroupKey(k) {
			return nil, fmt.Errorf("group_by: unknown key %q (want any of queue, tier, job_type, pool, project)", k)
		}
		if seen[k] {
			return nil, fmt.Errorf("group_by: key %q given twice", k)
		}
		seen[k] = true
	}
	out := make([]string, 0, len(keys))
	for _, k := range GroupKeys {
		if seen[k] {
			out = append(out, k)
		}
	}
	return out, nil
}

func isGroupKey(k string) bool {
	for _, g := range GroupKeys {
		if g == k {
			return true
		}
	}
	return false
}
