package queuereport

import "time"

// Report is the queue service report over one window. Its definitions are in
// the package documentation.
type Report struct {
	// Options are the effective options: defaults applied, group_by in canonical order.
	Options Options `json:"options"`
	// End is min(Window.To, Now), the end of the observed part of the window.
	End      time.Time     `json:"end"`
	Total    Group         `json:"total"`    // every job, whatever the grouping
	Groups   []Group       `json:"groups"`   // one per key present, sorted by key (tiers highest first)
	Starving []StarvingJob `json:"starving"` // starving jobs, longest wait first, at most Options.StarvingLimit (Total.StarvingJobs counts all)
	// Stuck lists the jobs stuck, needing action, at the report end
	// (StuckJob), longest wait first, at most Options.StarvingLimit
	// (Total.StuckJobs counts all).
	Stuck []StuckJob `json:"stuck"`
	// ReasonShares gives, per pool (by name) whatever the grouping, each
	// wait reason's and reason group's share of the waiting and the verdict
	// naming the pool's main problem (PoolReasons).
	ReasonShares []PoolReasons `json:"reason_shares"`
}

// Group is the report of one group of jobs. Durations are seconds; pointers are
// null where the value is undefined (no sample, zero denominator, no target).
type Group struct {
	// Key maps each group-by key to this group's value; empty for the total.
	Key map[string]string `json:"key"`

	Jobs      int `json:"jobs"`      // jobs submitted before the end and not ended before the window
	Submitted int `json:"submitted"` // jobs submitted in the window
	Cancelled int `json:"cancelled"` // cancelled jobs whose End is in the window

	Started  int      `json:"started"` // initial waits ended by a start in the window (the wait samples)
	WaitP50S *float64 `json:"wait_p50_s"`
	WaitP95S *float64 `json:"wait_p95_s"`
	WaitP99S *float64 `json:"wait_p99_s"`
	WaitMaxS *float64 `json:"wait_max_s"`
	// WaitHistogram counts the same initial waits in the bins of
	// WaitHistogramEdges; only with Options.WaitHistogram.
	WaitHistogram []HistogramBin `json:"wait_histogram,omitempty"`

	RequeueStarts   int      `json:"requeue_starts"` // requeue waits ended by a start in the window
	RequeueWaitP50S *float64 `json:"requeue_wait_p50_s"`
	RequeueWaitP95S *float64 `json:"requeue_wait_p95_s"`
	RequeueWaitP99S *float64 `json:"requeue_wait_p99_s"`
	RequeueWaitMaxS *float64 `json:"requeue_wait_max_s"`

	LongestWaitS       *float64 `json:"longest_wait_s"`                // longest continuous wait overlapping the window, to its end or the report end
	LongestWaitJobID   string   `json:"longest_wait_job_id,omitempty"` // the job that waited it
	LongestWaitOngoing bool     `json:"longest_wait_ongoing"`          // that wait was still open at the report end
	StillWaiting       int      `json:"still_waiting"`                 // jobs with a wait open at the report end
	JobsOverObjective  int      `json:"jobs_over_objective"`           // jobs whose wait exceeded their queue's MaxWait

	WaitsEnded            int      `json:"waits_ended"`             // waits ended in the window by a start or a cancellation
	CancelledWhileWaiting int      `json:"cancelled_while_waiting"` // of those, ended by a cancellation
	CancellationRate      *float64 `json:"cancellation_rate"`       // cancelled_while_waiting / waits_ended

	GPUSeconds    float64  `json:"gpu_seconds"`     // GPU-seconds of runs clipped to the window
	ServiceShare  *float64 `json:"service_share"`   // delivered share of the pool's (or the report's) GPU-seconds
	TargetShare   *float64 `json:"target_share"`    // the queue's normalised ServiceShare (grouped by queue only)
	ShareVsTarget *float64 `json:"share_vs_target"` // the whole queue's delivered share in the same scope / target_share
	// PoolShare is the whole queue's time-averaged share of the pools' GPUs
	// in the same scope (its GPU-seconds over capacity GPUs × observed
	// window seconds), to hold against MinShare and MaxShare (grouped by
	// queue, with the pools' capacity known).
	PoolShare *float64 `json:"pool_share,omitempty"`
	MinShare  *float64 `json:"min_share,omitempty"` // the queue's guaranteed fraction of each pool's GPUs, when it has one
	MaxShare  *float64 `json:"max_share,omitempty"` // the queue's cap as a fraction of each pool's GPUs, when it has one
	// ProjectShare is the whole project's share of the report's GPU-seconds
	// (fair share counts usage across pools), and ProjectTargetShare its
	// fair-share entitlement: its weight over the weights of the report's
	// projects (grouped by project).
	ProjectShare       *float64 `json:"project_share,omitempty"`
	ProjectTargetShare *float64 `json:"project_target_share,omitempty"`

	// WaitReasonSeconds maps a wait reason to the seconds of wait events clipped
	// to the window; reasons with no time are left out.
	WaitReasonSeconds map[string]float64 `json:"wait_reason_seconds"`

	StarvingJobs       int `json:"starving_jobs"`        // jobs with at least one starvation signal
	OvertakenJobs      int `json:"overtaken_jobs"`       // jobs with the overtaken signal
	ReleaseStarvedJobs int `json:"release_starved_jobs"` // jobs with the releases signal
	TierStarvedJobs    int `json:"tier_starved_jobs"`    // jobs with the higher_tier_arrivals signal
	// StuckJobs counts the jobs stuck, needing action, at the report end
	// (StuckJob); they carry no starvation signal.
	StuckJobs int `json:"stuck_jobs"`
}

// Starvation signal names, as listed in StarvingJob.Signals.
const (
	SignalOvertaken          = "overtaken"
	SignalReleases           = "releases"
	SignalHigherTierArrivals = "higher_tier_arrivals"
)

// StarvingJob is one job with at least one starvation signal. Counts are the
// largest over the job's waits in the window; the wait fields describe its
// longest wait in the window.
type StarvingJob struct {
	JobID   string            `json:"job_id"`
	Key     map[string]string `json:"key"` // the job's group key (shared with its Group: read-only)
	Queue   string            `json:"queue"`
	Tier    string            `json:"tier"`
	Pool    string            `json:"pool"`
	Project string            `json:"project"`
	State   string            `json:"state,omitempty"`

	WaitStart   time.Time `json:"wait_start"`
	WaitS       float64   `json:"wait_s"`       // measured to the wait's end or the report end
	WaitOngoing bool      `json:"wait_ongoing"` // still waiting at the report end
	LastReason  string    `json:"last_reason,omitempty"`

	Signals            []string `json:"signals"` // in the order overtaken, releases, higher_tier_arrivals (shared: read-only)
	Overtaken          int      `json:"overtaken"`
	Releases           int      `json:"releases"`
	HigherTierArrivals int      `json:"higher_tier_arrivals"`
}
