package simulation

import (
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/gpugov/gpugov/internal/plural"
	"github.com/gpugov/gpugov/internal/queuereport"
	"github.com/gpugov/gpugov/internal/scheduling"
	"github.com/gpugov/gpugov/internal/trace/alibaba"
	"github.com/gpugov/gpugov/internal/vocab"
)

// Report is the outcome of one simulation run. Durations are in seconds,
// GPU-seconds count a share of g milli-GPU as g/1000 of a GPU.
type Report struct {
	Trace         string      `json:"trace"` // the trace format: alibaba or philly (trace.Trace.Format)
	PolicyVersion string      `json:"policy_version"`
	Seed          uint64      `json:"seed"`
	Stage         string      `json:"stage"`
	Nodes         int         `json:"nodes"`            // GPU nodes in the pool
	GPUs          int         `json:"gpus"`             // GPUs in the pool
	Pods          int         `json:"pods"`             // pod rows read
	GPUJobs       int         `json:"gpu_jobs"`         // pods simulated (num_gpu > 0)
	CPUOnlyPods   int         `json:"cpu_only_pods"`    // pods left out (num_gpu 0)
	CutOffInTrace int         `json:"cut_off_in_trace"` // GPU pods still Running at the trace window's end
	SkippedRows   SkippedRows `json:"skipped_rows"`
	Span          Span        `json:"span"`
	Cycles        int         `json:"cycles"` // scheduling cycles run
	Groups        []Group     `json:"groups"` // one per tier, highest first
	// Reasons is the seconds all jobs spent in each wait reason (sum of Groups' Reasons).
	Reasons map[string]float64 `json:"reasons"`
	// ReasonShares is the pool's wait-reason shares and the verdict naming
	// its main problem, computed by queuereport from the simulation's
	// records as `gpugov report --reasons` computes the service's
	// (queuereport.PoolReasons; docs/design.md §6).
	ReasonShares        []queuereport.PoolReasons `json:"reason_shares"`
	Preemptions         Preemptions               `json:"preemptions"`
	GPUUtilization      float64                   `json:"gpu_utilization"` // AllocatedGPUSeconds / CapacityGPUSeconds
	AllocatedGPUSeconds float64                   `json:"allocated_gpu_seconds"`
	CapacityGPUSeconds  float64                   `json:"capacity_gpu_seconds"` // GPUs × span
	StarvedJobs         Starved                   `json:"starved_jobs"`
	Unfinished          Unfinished                `json:"unfinished"`
	// Fidelity sets the simulated waits beside the recorded ones per project
	// and GPU bucket, for traces that name their projects (Philly); absent
	// otherwise.
	Fidelity    *Fidelity `json:"fidelity,omitempty"`
	Assumptions []string  `json:"assumptions"`
	// History is what the simulation did, as the service would have recorded
	// it; left out of the JSON form (it holds every job).
	History *History `json:"-"`
}

// History is a simulation's decisions and records in the service's terms,
// for comparing a simulation with the service run on the same jobs (the
// conformance test in e2e).
type History struct {
	// Placements lists every grant in the order the simulation made them.
	Placements []Placement
	// Records are the jobs, runs, wait events, releases and queue targets
	// the queue service report was computed from (trace second s is
	// alibaba.Epoch + s).
	Records queuereport.Input
	// Window is the report window the simulation's own report used.
	Window queuereport.Window
}

// Placement is one grant of the simulation.
type Placement struct {
	JobID string    // the pod name
	At    time.Time // the cycle's instant
	Cycle int       // the cycle's number, from 1
	Rank  int       // the job's rank in that cycle (scheduling.Placement.Rank)
	Node  string    // the node granted
}

// SkippedRows reports the pod rows dropped by --skip-invalid.
type SkippedRows struct {
	Count    int      `json:"count"`
	Messages []string `json:"messages"` // the first few "file:line: what is wrong"
}

// Span is the simulated interval in trace seconds: first arrival to last event.
type Span struct {
	StartS int64 `json:"start_s"`
	EndS   int64 `json:"end_s"`
}

// Group is the queue service of one tier (its queue is named after it).
// The simulation's numbers (sim waits, requeue waits, longest wait, over
// objective, cancelled while waiting, reasons) are computed by
// queuereport.Compute from the simulation's jobs, runs and wait events, with
// the definitions of `gpugov report` (see package queuereport): percentiles
// are nearest-rank and null when no wait was recorded. The sim waits are the
// first waits (submit → first start) of the jobs that were scheduled in the
// trace and started in the simulation; the trace waits are scheduled_time −
// creation_time of all jobs scheduled in the trace, nearest-rank as well.
type Group struct {
	Tier       string `json:"tier"`
	Queue      string `json:"queue"`
	ObjectiveS int64  `json:"objective_s"` // the queue's wait objective; 0 means none
	Jobs       int    `json:"jobs"`        // GPU jobs of the tier
	SimWaits   int    `json:"sim_waits"`   // waits in the sim percentiles
	WaitP50S   *int64 `json:"wait_p50_s"`
	WaitP95S   *int64 `json:"wait_p95_s"`
	WaitP99S   *int64 `json:"wait_p99_s"`
	WaitMaxS   *int64 `json:"wait_max_s"`
	TraceWaits int    `json:"trace_waits"` // waits in the trace percentiles
	TraceP50S  *int64 `json:"trace_wait_p50_s"`
	TraceP95S  *int64 `json:"trace_wait_p95_s"`
	TraceP99S  *int64 `json:"trace_wait_p99_s"`
	TraceMaxS  *int64 `json:"trace_wait_max_s"`
	// RequeueWaits counts waits after a preemption (requeue → restart).
	RequeueWaits    int    `json:"requeue_waits"`
	RequeueWaitP95S *int64 `json:"requeue_wait_p95_s"`
	RequeueWaitMaxS *int64 `json:"requeue_wait_max_s"`
	// LongestWaitS is the longest continuous wait of any job of the tier,
	// including waits cut by a cancellation or the end of the simulation.
	LongestWaitS int64 `json:"longest_wait_s"`
	// OverObjective counts jobs with a continuous wait longer than the
	// objective (first, requeue, cancelled or unfinished); TraceOverObjective
	// counts jobs whose trace wait was.
	OverObjective      int `json:"over_objective"`
	TraceOverObjective int `json:"trace_over_objective"`
	// TraceUnscheduled counts pods Pending in the trace; of them,
	// TraceUnscheduledStarted started in the simulation before their deletion
	// and CancelledWhileWaiting were deleted while still waiting.
	TraceUnscheduled        int                `json:"trace_unscheduled"`
	TraceUnscheduledStarted int                `json:"trace_unscheduled_started"`
	CancelledWhileWaiting   int                `json:"cancelled_while_waiting"`
	NeverStarted            int                `json:"never_started"` // waiting when the simulation ended, never started
	Preemptions             int                `json:"preemptions"`   // runs of the tier preempted
	LossGPUSeconds          float64            `json:"loss_gpu_seconds"`
	Reasons                 map[string]float64 `json:"reasons"` // seconds per wait reason code
}

// Preemptions sums the preemptions carried out and those only proposed.
type Preemptions struct {
	Count          int     `json:"count"`            // victims stopped
	LossGPUSeconds float64 `json:"loss_gpu_seconds"` // their effective run loss (accounting.EffectiveRunLoss)
	// RecomputeGPUSeconds is the recompute part of that loss: the victims'
	// GPUs × the recompute seconds, where measured.
	RecomputeGPUSeconds float64 `json:"recompute_gpu_seconds"`
	// RecomputeUnmeasured counts the preemptions whose loss has no recompute
	// term: the job's next run never started, or ended (or the simulation
	// did) before it was back at the step of the notice.
	RecomputeUnmeasured int `json:"recompute_unmeasured"`
	WouldPreempt        int `json:"would_preempt"` // proposals recorded but not acted on (stage observe/trial)
}

// Starved lists the jobs that waited longer than Factor × their queue's wait
// objective in one continuous wait, that were still waiting when the
// simulation ended (never started, or never resumed after a preemption), or
// that carried one of queuereport's starvation signals in a wait (overtaken
// by a later job that fit the same GPUs, waited through matching releases, or
// through higher-tier arrivals; thresholds as queuereport's defaults).
type Starved struct {
	Count  int          `json:"count"`
	Factor float64      `json:"factor"`
	Jobs   []StarvedJob `json:"jobs"` // the longest waits, at most MaxListed
}

// StarvedJob is one starved job.
type StarvedJob struct {
	Job          string `json:"job"`
	Tier         string `json:"tier"`
	LongestWaitS int64  `json:"longest_wait_s"`
	ObjectiveS   int64  `json:"objective_s"`
	Started      bool   `json:"started"`
	Reason       string `json:"reason"` // last wait reason ("" if it never waited through a cycle)
	// Signals says why the job is listed, in this order: waiting_at_end,
	// over_objective (longer than Factor × objective), then queuereport's
	// overtaken, releases and higher_tier_arrivals.
	Signals []string `json:"signals"`
}

// Why a job is listed as starved (StarvedJob.Signals), besides queuereport's signals.
const (
	SignalWaitingAtEnd  = "waiting_at_end"
	SignalOverObjective = "over_objective"
)

// Unfinished counts the jobs that had not run to their end when the
// simulation ran out of events.
type Unfinished struct {
	Count              int      `json:"count"`
	NeverStarted       int      `json:"never_started"`
	RequeuedNotResumed int      `json:"requeued_not_resumed"`
	Jobs               []string `json:"jobs"` // the first MaxListed, in trace order
}

// MaxListed bounds the job lists of the report.
const MaxListed = 10

// tracePercentile is the nearest-rank percentile of the trace's waits, with
// queuereport.NearestRank (the ceil(p/100 × n)-th smallest), so that trace
// and simulated percentiles share one definition. It returns nil for no
// waits. sorted must be ascending.
func tracePercentile(sorted []int64, p int) *int64 {
	if len(sorted) == 0 {
		return nil
	}
	v := sorted[queuereport.NearestRank(len(sorted), p)-1]
	return &v
}

// Job types of the simulation's queue service records: whether the trace
// scheduled the pod, which decides whether its first wait has a trace
// counterpart to compare with.
const (
	jobTypeTraceScheduled = "trace_scheduled"
	jobTypeTracePending   = "trace_pending"
)

// serviceReports computes the queue service report of the whole simulated
// span with queuereport, grouped by tier and by tier and job type, listing
// every starving job. The window ends a nanosecond after the last event, so
// that a run starting at the last instant counts while waits still open are
// measured to that instant (a nanosecond is below the reported second).
func (e *engine) serviceReports() (in queuereport.Input, window queuereport.Window, byTier, byType queuereport.Report, err error) {
	in = e.serviceRecords()
	end := e.at(e.now).Add(time.Nanosecond)
	window = queuereport.Window{From: e.at(e.start), To: end}
	opts := queuereport.Options{Window: window, Now: end,
		GroupBy: []string{queuereport.KeyTier}, StarvingLimit: queuereport.NoStarvingLimit,
		StarvationMinWaitS: e.cfg.StarvationMinWaitS}
	if byTier, err = queuereport.Compute(in, opts); err != nil {
		return in, window, byTier, byType, fmt.Errorf("queue service report of the simulation: %w", err)
	}
	opts.GroupBy, opts.StarvingLimit = []string{queuereport.KeyTier, queuereport.KeyJobType}, 0
	if byType, err = queuereport.Compute(in, opts); err != nil {
		return in, window, byTier, byType, fmt.Errorf("queue service report of the simulation: %w", err)
	}
	return in, window, byTier, byType, nil
}

// serviceRecords returns the simulation's history as the service would have
// stored it: every GPU job with its runs, its wait events (one per reason
// held from one cycle to a later one), every GPU release and the queues'
// targets. A pod the trace never scheduled is deleted by its owner at its
// deletion time (Cancelled), while waiting or after running.
func (e *engine) serviceRecords() queuereport.Input {
	in := queuereport.Input{Releases: e.releases, Targets: queuereport.TargetsOf(e.cfg.Queues), Capacity: queuereport.CapacityOf(e.pools),
		ProjectWeights: e.cfg.ProjectWeights}
	for _, j := range e.jobs {
		if j.state == stFuture {
			continue
		}
		job := queuereport.Job{
			ID: j.spec.ID, Queue: j.spec.Queue, Tier: j.spec.Tier, JobType: jobTypeTracePending, Pool: j.spec.Request.Pool,
			Project: j.spec.Project, Request: queuereport.RequestOf(j.spec.Request), SubmitTime: e.at(j.tj.Submit),
			State: j.state.String(),
		}
		if j.tj.Scheduled {
			job.JobType = jobTypeTraceScheduled
		}
		if j.firstStart >= 0 {
			job.FirstStart = timePtr(e.at(j.firstStart))
		}
		if j.state == stDone || j.state == stCancelled {
			job.End = timePtr(e.at(j.endAt))
			job.Cancelled = !j.tj.Scheduled
			job.CancelledWhileWaiting = j.state == stCancelled
		}
		in.Jobs = append(in.Jobs, job)
		for _, r := range j.runs {
			run := queuereport.Run{JobID: job.ID, Start: e.at(r.start), GPUMilli: j.spec.Request.TotalMilli()}
			if r.end >= 0 {
				run.End = timePtr(e.at(r.end))
			}
			in.Runs = append(in.Runs, run)
		}
		for _, w := range j.waits {
			in.WaitEvents = append(in.WaitEvents, queuereport.WaitEvent{JobID: job.ID, Reason: w.reason,
				Start: e.at(w.start), End: timePtr(e.at(w.end))})
		}
	}
	return in
}

func timePtr(t time.Time) *time.Time { return &t }

// String names a job state in the service's records.
func (s jobState) String() string {
	switch s {
	case stWaiting:
		return string(vocab.JobWaiting)
	case stRunning:
		return string(vocab.JobRunning)
	case stDone:
		return "done"
	case stCancelled:
		return string(vocab.JobCancelled)
	}
	return "future"
}

// groupsByKey indexes a report's groups by their group-by values joined with "/".
func groupsByKey(r *queuereport.Report, keys ...string) map[string]*queuereport.Group {
	out := make(map[string]*queuereport.Group, len(r.Groups))
	for i := range r.Groups {
		vals := make([]string, len(keys))
		for k, name := range keys {
			vals[k] = r.Groups[i].Key[name]
		}
		out[strings.Join(vals, "/")] = &r.Groups[i]
	}
	return out
}

// seconds converts an optional number of whole seconds (the simulation's
// clock has one-second steps) to the report's integers.
func seconds(v *float64) *int64 {
	if v == nil {
		return nil
	}
	s := int64(math.Round(*v))
	return &s
}

// report builds the Report from the finished engine. It returns an error
// when queuereport rejects the simulation's records, which would be a bug
// of the engine.
func (e *engine) report() (*Report, error) {
	records, window, byTier, byType, err := e.serviceReports()
	if err != nil {
		return nil, err
	}
	tiers := groupsByKey(&byTier, queuereport.KeyTier)
	scheduled := groupsByKey(&byType, queuereport.KeyTier, queuereport.KeyJobType)
	r := &Report{
		PolicyVersion: e.cfg.Policy.Version, Seed: e.cfg.Seed, Stage: string(e.cfg.Stage),
		Trace: e.trace.Format,
		Nodes: len(e.pools[0].Nodes), GPUs: e.gpus, Pods: e.trace.Rows, GPUJobs: len(e.jobs),
		CPUOnlyPods: e.cpuOnly, CutOffInTrace: e.cutOff,
		SkippedRows: SkippedRows{Count: e.trace.Skipped.Count, Messages: slices.Clone(e.trace.Skipped.Messages)},
		Span:        Span{StartS: e.start, EndS: max(e.now, e.start)},
		Cycles:      e.cycleNo, Reasons: map[string]float64{},
		StarvedJobs:  Starved{Factor: e.cfg.StarvationFactor, Jobs: []StarvedJob{}},
		Unfinished:   Unfinished{Jobs: []string{}},
		History:      &History{Placements: e.placements, Records: records, Window: window},
		ReasonShares: byTier.ReasonShares,
	}
	if r.SkippedRows.Messages == nil {
		r.SkippedRows.Messages = []string{}
	}
	for _, t := range vocab.Tiers {
		g := e.group(t, tiers[t.String()], scheduled[t.String()+"/"+jobTypeTraceScheduled])
		for code, s := range g.Reasons {
			r.Reasons[code] += s
		}
		r.Preemptions.Count += g.Preemptions
		r.Preemptions.LossGPUSeconds += g.LossGPUSeconds
		r.Groups = append(r.Groups, g)
	}
	r.Preemptions.WouldPreempt = e.wouldPreempt
	r.Preemptions.RecomputeUnmeasured = e.unmeasured
	r.Preemptions.RecomputeGPUSeconds = e.recomputeGPUS
	r.AllocatedGPUSeconds = e.allocMilliS / scheduling.MilliPerGPU
	r.CapacityGPUSeconds = float64(e.gpus) * float64(r.Span.EndS-r.Span.StartS)
	if r.CapacityGPUSeconds > 0 {
		r.GPUUtilization = r.AllocatedGPUSeconds / r.CapacityGPUSeconds
	}
	e.fillStarvedAndUnfinished(r, byTier.Starving)
	r.Fidelity = e.fidelity()
	r.Assumptions = e.assumptions(r)
	return r, nil
}

// group gathers the statistics of one tier: the simulation's from tier (the
// tier's queuereport group) and scheduled (its trace-scheduled jobs' group),
// either nil when the tier has no such job; the trace's and the engine's own
// counts from the jobs.
func (e *engine) group(t vocab.Tier, tier, scheduled *queuereport.Group) Group {
	g := Group{Tier: t.String(), Queue: t.String(), Reasons: map[string]float64{}}
	if q := e.queue(t.String()); q != nil {
		g.ObjectiveS = int64(q.MaxWait / time.Second)
	}
	var trace []int64
	for _, j := range e.jobs {
		if j.spec.Tier != t {
			continue
		}
		g.Jobs++
		if j.state == stWaiting && j.firstStart < 0 {
			g.NeverStarted++
		}
		if j.tj.HasRecordedWait {
			tw := j.tj.RecordedWait
			trace = append(trace, tw)
			if g.ObjectiveS > 0 && tw > g.ObjectiveS {
				g.TraceOverObjective++
			}
			continue
		}
		if j.tj.Scheduled {
			continue // scheduled, but its start was not recorded (Philly outside the recorded subset)
		}
		g.TraceUnscheduled++
		if j.firstStart >= 0 {
			g.TraceUnscheduledStarted++
		}
	}
	slices.Sort(trace)
	g.TraceWaits = len(trace)
	g.TraceP50S, g.TraceP95S, g.TraceP99S, g.TraceMaxS = tracePercentile(trace, 50), tracePercentile(trace, 95), tracePercentile(trace, 99), tracePercentile(trace, 100)
	if scheduled != nil {
		g.SimWaits = scheduled.Started
		g.WaitP50S, g.WaitP95S, g.WaitP99S, g.WaitMaxS = seconds(scheduled.WaitP50S), seconds(scheduled.WaitP95S), seconds(scheduled.WaitP99S), seconds(scheduled.WaitMaxS)
	}
	if tier != nil {
		g.RequeueWaits, g.RequeueWaitP95S, g.RequeueWaitMaxS = tier.RequeueStarts, seconds(tier.RequeueWaitP95S), seconds(tier.RequeueWaitMaxS)
		if l := seconds(tier.LongestWaitS); l != nil {
			g.LongestWaitS = *l
		}
		g.OverObjective, g.CancelledWhileWaiting = tier.JobsOverObjective, tier.CancelledWhileWaiting
		for code, s := range tier.WaitReasonSeconds {
			g.Reasons[code] = s
		}
	}
	g.Preemptions, g.LossGPUSeconds = e.preempts[t], e.lossGPUS[t]
	return g
}

// fillStarvedAndUnfinished lists the unfinished jobs and the starved ones:
// still waiting at the end, a wait longer than StarvationFactor × the
// objective, or one of queuereport's signals (starving, every starving job
// of the simulation's report).
func (e *engine) fillStarvedAndUnfinished(r *Report, starving []queuereport.StarvingJob) {
	signals := make(map[string][]string, len(starving))
	for _, s := range starving {
		signals[s.JobID] = s.Signals
	}
	var starved []StarvedJob
	for _, j := range e.jobs {
		stuck := j.state == stWaiting
		if stuck {
			r.Unfinished.Count++
			if j.firstStart < 0 {
				r.Unfinished.NeverStarted++
			} else {
				r.Unfinished.RequeuedNotResumed++
			}
			if len(r.Unfinished.Jobs) < MaxListed {
				r.Unfinished.Jobs = append(r.Unfinished.Jobs, j.spec.ID)
			}
		}
		var why []string
		if stuck {
			why = append(why, SignalWaitingAtEnd)
		}
		if j.objectiveS > 0 && float64(j.longestWaitS) > e.cfg.StarvationFactor*float64(j.objectiveS) {
			why = append(why, SignalOverObjective)
		}
		why = append(why, signals[j.spec.ID]...)
		if len(why) > 0 {
			starved = append(starved, StarvedJob{Job: j.spec.ID, Tier: j.spec.Tier.String(), LongestWaitS: j.longestWaitS,
				ObjectiveS: j.objectiveS, Started: j.firstStart >= 0, Reason: string(j.reason), Signals: why})
		}
	}
	slices.SortStableFunc(starved, func(a, b StarvedJob) int {
		return cmp.Or(cmp.Compare(b.LongestWaitS, a.LongestWaitS), cmp.Compare(a.Job, b.Job))
	})
	r.StarvedJobs.Count = len(starved)
	r.StarvedJobs.Jobs = append(r.StarvedJobs.Jobs, starved[:min(len(starved), MaxListed)]...)
}

// assumptions states every rule the simulation adds to the trace.
func (e *engine) assumptions(r *Report) []string {
	c := e.cfg
	var objectives []string
	var shares []string
	for _, q := range c.Queues {
		objectives = append(objectives, fmt.Sprintf("%s %ds", q.Name, int64(q.MaxWait/time.Second)))
		if q.MinShare > 0 {
			shares = append(shares, fmt.Sprintf("%s min_share %g", q.Name, q.MinShare))
		}
		if q.MaxShare > 0 {
			shares = append(shares, fmt.Sprintf("%s max_share %g", q.Name, q.MaxShare))
		}
	}
	sharesText := "no queue has a min_share or max_share"
	if len(shares) > 0 {
		sharesText = "pool shares (fractions of the pool's usable GPUs) " + strings.Join(shares, ", ")
	}
	fairText := "equal fair shares"
	if len(c.ProjectWeights) > 0 {
		fairText = "fair-share weights from the policy's fair_share.project_weights (a project not listed weighs 1)"
	}
	var tiers []string
	for _, t := range c.Recovery.Tiers {
		tiers = append(tiers, t.String())
	}
	var out []string
	if e.trace.Format == alibaba.Format {
		out = e.alibabaAssumptions(r, fairText, strings.Join(objectives, ", "), sharesText)
	} else {
		out = append(slices.Clone(e.trace.Assumptions),
			fmt.Sprintf("Queues: one per tier, named after it; wait objectives %s; %s; fair-share: %s.", strings.Join(objectives, ", "), sharesText, fairText),
			quotaText(c))
	}
	if c.LocalityRelaxS > 0 {
		out = append(out, fmt.Sprintf("Locality relaxation (simulation.locality_relax_s %d): a waiting job of more than one GPU may spread over any nodes once its current wait reaches %d s, from the next cycle on (%d waits relaxed); Philly's scheduler relaxed locality for jobs that waited (Jeon et al., ATC '19), its threshold is not published.",
			c.LocalityRelaxS, c.LocalityRelaxS, e.relaxed))
	}
	if c.CyclePeriodSeconds > 0 {
		out = append(out, fmt.Sprintf("Scheduling passes (simulation.cycle_period_s %d): a cycle that an arrival, a release, a background step or the timer makes due runs at the next multiple of %d s of trace time, one pass for every change since the last.",
			c.CyclePeriodSeconds, c.CyclePeriodSeconds))
	}
	if b := e.bg; b != nil {
		out = append(out, fmt.Sprintf("Background occupancy (simulation.background_step_s %d): %d steps; it held %.0f GPU-hours of the %.0f its steps asked for (%.1f%%; short when too few GPUs were free at a step, topped up at steps only; placed %s); it is not in gpu_utilization, which counts the trace's jobs.",
			c.BackgroundStepS, len(b.steps), b.heldS/3600, b.wantS/3600, 100*b.heldS/max(b.wantS, 1), backgroundPlacementText(c)))
	}
	return append(out,
		fmt.Sprintf("Recovery evidence is not in the trace: jobs of tiers [%s] are checkpointable with probability %g (seed %d, one PCG draw per job seeded by its name), checkpoint every %d s of run time and have %s; all other jobs are not checkpointable.",
			strings.Join(tiers, " "), c.Recovery.Probability, c.Seed, c.Recovery.CheckpointIntervalSeconds,
			plural.Count(c.Recovery.VerifiedResumes, "verified resume", "verified resumes")),
		fmt.Sprintf("Preemptions Plan may act on (pool stage %s) are carried out at once: the victim saves no checkpoint on the way out and is requeued keeping its submit time and aging; its effective run loss is the service's formula (lost since the last periodic checkpoint + save/restore, 0 without a save after the notice, + recompute), per GPU held. Recompute is the time its next run takes to be back at the step of the notice: %g s restore plus the lost seconds, counted when that run gets there (preemptions whose next run does not are counted in recompute_unmeasured); its remaining run time grows by the restore and lost seconds.", c.Stage, c.Policy.Preemption.SaveRestoreSeconds),
		fmt.Sprintf("A scheduling cycle runs at every second with an arrival, at every release or deletion while jobs wait, again at once after a preemption, and every %d s while a job waits for a reason time can change (capacity_busy, fragmented, reserved_for_higher_priority, quota_exhausted); a wait reason holds from the cycle that gave it to the next cycle.", c.CycleIntervalSeconds),
		"The simulation's waits, objectives, wait reasons and starvation signals are computed by the queuereport package from the simulated jobs, runs and wait events, with the definitions `gpugov report` applies to the service's records; the wait events are segmented by the store's rule (accounting.WaitChanged, WaitRefreshed and NotYetEvaluatedSince, combined in WaitTransition: a new event when a cycle's reason changes, the open event's detail refreshed in place when only its quantities change, and a not_yet_evaluated event from submit or requeue to the first cycle that evaluates the job).",
		"Wait percentiles are nearest-rank (the ceil(p/100·n)-th smallest wait); the sim percentiles cover the first waits of jobs scheduled in the trace that started in the simulation, the trace percentiles those jobs' recorded waits (Alibaba: scheduled_time − creation_time; Philly: first attempt start − submit, recorded for a subset only).",
		"gpu_utilization is allocated GPU-seconds (a share of g milli-GPU counts g/1000) over GPUs × span, the span running from the first arrival to the last event.",
		fmt.Sprintf("A job is starved when one continuous wait exceeded %g × its queue's objective, when it was still waiting at the end (never started, or never resumed after a preemption), or when queuereport's starvation signals fired in one of its waits: overtaken by ≥ %d later job of the pool that fit the same GPUs, ≥ %d releases of matching GPUs, or ≥ %d arrivals of higher tiers.",
			c.StarvationFactor, queuereport.DefaultOvertakenThreshold, queuereport.DefaultStarvationReleases, queuereport.DefaultTierArrivalThreshold),
	)
}

// quotaText states the project quotas the simulation ran under.
func quotaText(c Config) string {
	if len(c.Quotas) == 0 {
		return "Quotas: none; every project may use the whole pool."
	}
	var total int64
	for _, q := range c.Quotas {
		total += q.NominalMilli
	}
	src := "the policy's"
	if c.TraceQuotas {
		src = "the trace's (simulation.trace_quotas) and the policy's"
	}
	return fmt.Sprintf("Quotas: %d project quotas from %s, %d GPUs nominal in all; a project without one is not limited.", len(c.Quotas), src, total/scheduling.MilliPerGPU)
}

// alibabaAssumptions are the rules the simulation adds to an Alibaba trace.
func (e *engine) alibabaAssumptions(r *Report, fairText, objectives, sharesText string) []string {
	c := e.cfg
	return []string{
		fmt.Sprintf("CPU-only pods (num_gpu 0) are left out of GPU scheduling: %d of %d pods; their CPU and memory use on GPU nodes is not modelled.", r.CPUOnlyPods, r.Pods),
		"A pod arrives at its creation_time; once started it runs for deletion_time − scheduled_time of the trace (its recorded run time), whenever the simulation starts it.",
		"Pods Pending in the trace (never scheduled) arrive at creation_time and are deleted at deletion_time: still waiting then, they are cancelled; started earlier, they run until deletion_time. Their waits are left out of the wait percentiles (the trace has none to compare) and counted in trace_unscheduled, trace_unscheduled_started and cancelled_while_waiting.",
		fmt.Sprintf("%d GPU pods were still Running at the end of the trace window (deletion_time = the largest deletion_time): their run time is cut off there, so it is a lower bound.", r.CutOffInTrace),
		fmt.Sprintf("Projects are not in the trace: pods are hashed into %d projects (FNV-1a of the pod name, project-NN) with %s; the trace has no quotas, so only the policy file's apply.", c.Projects, fairText),
		fmt.Sprintf("Queues: one per tier, named after it (QoS LS → production, Guaranteed → key-project, Burstable → standard, BE → experiment); wait objectives %s; %s.", objectives, sharesText),
		fmt.Sprintf("Nodes form one pool %q; GPU UUIDs are synthetic (GPU-<sn>-<i>); GPU memory of the undisclosed models is assumed (G1 32768, G2 and G3 81920 MiB); 8-GPU V100 and G-model nodes are one NVLink domain each; multi-GPU pods need one node.", c.PoolName),
	}
}

// WriteJSON writes r as indented JSON.
func (r *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// WriteText writes r as aligned tables followed by the assumptions.
func (r *Report) WriteText(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(w, "policy %s, seed %d, stage %s: %d nodes, %d GPUs; %d pods, %d GPU jobs simulated, %d CPU-only left out, %d rows skipped\n",
		r.PolicyVersion, r.Seed, r.Stage, r.Nodes, r.GPUs, r.Pods, r.GPUJobs, r.CPUOnlyPods, r.SkippedRows.Count)
	fmt.Fprintf(w, "span %d..%d s (%.1f days), %d scheduling cycles, GPU utilization %.1f%%\n\n",
		r.Span.StartS, r.Span.EndS, float64(r.Span.EndS-r.Span.StartS)/86400, r.Cycles, 100*r.GPUUtilization)
	fmt.Fprintln(tw, "tier\tjobs\tobjective_s\tsim_p50\tsim_p95\tsim_p99\tsim_max\ttrace_p50\ttrace_p95\ttrace_p99\ttrace_max\tover_obj\ttrace_over_obj\tlongest_wait\tnever_started\tcancelled\tpreempted\t")
	for _, g := range r.Groups {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d\t%d\t%d\t%d\t%d\t%d\t\n",
			g.Tier, g.Jobs, g.ObjectiveS, secs(g.WaitP50S), secs(g.WaitP95S), secs(g.WaitP99S), secs(g.WaitMaxS),
			secs(g.TraceP50S), secs(g.TraceP95S), secs(g.TraceP99S), secs(g.TraceMaxS),
			g.OverObjective, g.TraceOverObjective, g.LongestWaitS, g.NeverStarted, g.CancelledWhileWaiting, g.Preemptions)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w, "\nseconds per wait reason:")
	if len(r.Reasons) == 0 {
		fmt.Fprintln(w, "  none: no job was still waiting at the end of a scheduling cycle")
	}
	for _, code := range vocab.WaitReasons {
		if s, ok := r.Reasons[string(code)]; ok {
			fmt.Fprintf(w, "  %-30s %14.0f\n", code, s)
		}
	}
	fmt.Fprintln(w, "\nwait-reason shares and main problem:")
	if err := queuereport.RenderPoolShares(w, r.ReasonShares); err != nil {
		return err
	}
	fmt.Fprintf(w, "\npreemptions %d (loss %.0f GPU-s, %d without a measured recompute), would preempt %d\n", r.Preemptions.Count,
		r.Preemptions.LossGPUSeconds, r.Preemptions.RecomputeUnmeasured, r.Preemptions.WouldPreempt)
	fmt.Fprintf(w, "starved jobs %d (over %g × objective, waiting at the end, or starvation signals); unfinished %d (never started %d, not resumed %d)\n",
		r.StarvedJobs.Count, r.StarvedJobs.Factor, r.Unfinished.Count, r.Unfinished.NeverStarted, r.Unfinished.RequeuedNotResumed)
	for _, s := range r.StarvedJobs.Jobs {
		fmt.Fprintf(w, "  %s %s waited %d s (objective %d s, started %v, last reason %s; %s)\n", s.Job, s.Tier, s.LongestWaitS, s.ObjectiveS,
			s.Started, s.Reason, strings.Join(s.Signals, ", "))
	}
	r.writeFidelity(w)
	fmt.Fprintln(w, "\nassumptions:")
	for _, a := range r.Assumptions {
		fmt.Fprintf(w, "  - %s\n", a)
	}
	return nil
}

// secs renders an optional number of seconds, "-" when absent.
func secs(v *int64) string {
	if v == nil {
		return "-"
	}
	return fmt.Sprint(*v)
}

// backgroundPlacementText states how the background took and gave back GPUs.
func backgroundPlacementText(c Config) string {
	where := "on the fullest nodes' free GPUs first and given back from the emptiest (background_placement pack)"
	if c.BackgroundRandom {
		where = fmt.Sprintf("on free GPUs drawn uniformly and given back uniformly from those held (background_placement random, PCG seeded by seed %d and the step)", c.Seed)
	}
	if c.BackgroundByQuota {
		return where + ", charged to the VCs' quotas in proportion to their nominal GPUs as well as to the pool (background_by_quota)"
	}
	return where + ", charged to the pool's capacity only, not to any quota"
}
