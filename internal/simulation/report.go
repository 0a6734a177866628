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

	"github.com/gpugov/gpugov/internal/scheduling"
)

// Report is the outcome of one simulation run. Durations are in seconds,
// GPU-seconds count a share of g milli-GPU as g/1000 of a GPU.
type Report struct {
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
	Reasons             map[string]float64 `json:"reasons"`
	Preemptions         Preemptions        `json:"preemptions"`
	GPUUtilization      float64            `json:"gpu_utilization"` // AllocatedGPUSeconds / CapacityGPUSeconds
	AllocatedGPUSeconds float64            `json:"allocated_gpu_seconds"`
	CapacityGPUSeconds  float64            `json:"capacity_gpu_seconds"` // GPUs × span
	StarvedJobs         Starved            `json:"starved_jobs"`
	Unfinished          Unfinished         `json:"unfinished"`
	Assumptions         []string           `json:"assumptions"`
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
// Wait percentiles are nearest-rank (see waitPercentile); they are null when
// no wait was recorded. The sim waits are the first waits (submit → first
// start) of the jobs that were scheduled in the trace and started in the
// simulation; the trace waits are scheduled_time − creation_time of all jobs
// scheduled in the trace.
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
	LossGPUSeconds float64 `json:"loss_gpu_seconds"` // their effective run loss
	WouldPreempt   int     `json:"would_preempt"`    // proposals recorded but not acted on (stage observe/trial)
}

// Starved lists the jobs that waited longer than Factor × their queue's wait
// objective in one continuous wait, or that were still waiting when the
// simulation ended (never started, or never resumed after a preemption).
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
}

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

// waitPercentile is the nearest-rank percentile: the ceil(p/100 × n)-th
// smallest of n waits (the smallest for p = 0), so it is always a wait that
// occurred. It returns nil for no waits. sorted must be ascending.
func waitPercentile(sorted []int64, p float64) *int64 {
	if len(sorted) == 0 {
		return nil
	}
	rank := int(math.Ceil(p / 100 * float64(len(sorted))))
	v := sorted[min(max(rank, 1), len(sorted))-1]
	return &v
}

// report builds the Report from the finished engine.
func (e *engine) report(in Input) *Report {
	r := &Report{
		PolicyVersion: e.cfg.Policy.Version, Seed: e.cfg.Seed, Stage: string(e.cfg.Stage),
		Nodes: len(e.pools[0].Nodes), GPUs: e.gpus, Pods: len(in.Pods), GPUJobs: len(e.jobs),
		CPUOnlyPods: e.cpuOnly, CutOffInTrace: e.cutOff,
		SkippedRows: SkippedRows{Count: in.Skipped.Count, Messages: slices.Clone(in.Skipped.Messages)},
		Span:        Span{StartS: e.start, EndS: max(e.now, e.start)},
		Cycles:      e.cycleNo, Reasons: map[string]float64{},
		StarvedJobs: Starved{Factor: e.cfg.StarvationFactor, Jobs: []StarvedJob{}},
		Unfinished:  Unfinished{Jobs: []string{}},
	}
	if r.SkippedRows.Messages == nil {
		r.SkippedRows.Messages = []string{}
	}
	for _, t := range scheduling.Tiers {
		g := e.group(t)
		for code, s := range g.Reasons {
			r.Reasons[code] += s
		}
		r.Preemptions.Count += g.Preemptions
		r.Preemptions.LossGPUSeconds += g.LossGPUSeconds
		r.Groups = append(r.Groups, g)
	}
	r.Preemptions.WouldPreempt = e.wouldPreempt
	r.AllocatedGPUSeconds = e.allocMilliS / scheduling.MilliPerGPU
	r.CapacityGPUSeconds = float64(e.gpus) * float64(r.Span.EndS-r.Span.StartS)
	if r.CapacityGPUSeconds > 0 {
		r.GPUUtilization = r.AllocatedGPUSeconds / r.CapacityGPUSeconds
	}
	e.fillStarvedAndUnfinished(r)
	r.Assumptions = e.assumptions(r)
	return r
}

// group gathers the statistics of one tier.
func (e *engine) group(t scheduling.Tier) Group {
	g := Group{Tier: t.String(), Queue: t.String(), Reasons: map[string]float64{}}
	if q := e.queue(t.String()); q != nil {
		g.ObjectiveS = int64(q.MaxWait / time.Second)
	}
	var sim, trace, requeue []int64
	for _, j := range e.jobs {
		if j.spec.Tier != t {
			continue
		}
		g.Jobs++
		requeue = append(requeue, j.requeueWaits...)
		g.LongestWaitS = max(g.LongestWaitS, j.longestWaitS)
		if j.overObjective {
			g.OverObjective++
		}
		if j.state == stWaiting && j.firstStart < 0 {
			g.NeverStarted++
		}
		if tw, ok := j.pod.TraceWaitSeconds(); ok {
			trace = append(trace, tw)
			if g.ObjectiveS > 0 && tw > g.ObjectiveS {
				g.TraceOverObjective++
			}
			if j.firstStart >= 0 {
				sim = append(sim, j.firstWaitS)
			}
			continue
		}
		g.TraceUnscheduled++
		if j.firstStart >= 0 {
			g.TraceUnscheduledStarted++
		}
		if j.state == stCancelled {
			g.CancelledWhileWaiting++
		}
	}
	for _, l := range [][]int64{sim, trace, requeue} {
		slices.Sort(l)
	}
	g.SimWaits, g.TraceWaits, g.RequeueWaits = len(sim), len(trace), len(requeue)
	g.WaitP50S, g.WaitP95S, g.WaitP99S, g.WaitMaxS = waitPercentile(sim, 50), waitPercentile(sim, 95), waitPercentile(sim, 99), waitPercentile(sim, 100)
	g.TraceP50S, g.TraceP95S, g.TraceP99S, g.TraceMaxS = waitPercentile(trace, 50), waitPercentile(trace, 95), waitPercentile(trace, 99), waitPercentile(trace, 100)
	g.RequeueWaitP95S, g.RequeueWaitMaxS = waitPercentile(requeue, 95), waitPercentile(requeue, 100)
	for code, s := range e.reasonS[t] {
		g.Reasons[string(code)] = s
	}
	g.Preemptions, g.LossGPUSeconds = e.preempts[t], e.lossGPUS[t]
	return g
}

func (e *engine) fillStarvedAndUnfinished(r *Report) {
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
		tooLong := j.objectiveS > 0 && float64(j.longestWaitS) > e.cfg.StarvationFactor*float64(j.objectiveS)
		if stuck || tooLong {
			starved = append(starved, StarvedJob{Job: j.spec.ID, Tier: j.spec.Tier.String(), LongestWaitS: j.longestWaitS,
				ObjectiveS: j.objectiveS, Started: j.firstStart >= 0, Reason: string(j.reason)})
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
	for _, q := range c.Queues {
		objectives = append(objectives, fmt.Sprintf("%s %ds", q.Name, int64(q.MaxWait/time.Second)))
	}
	var tiers []string
	for _, t := range c.Recovery.Tiers {
		tiers = append(tiers, t.String())
	}
	return []string{
		fmt.Sprintf("CPU-only pods (num_gpu 0) are left out of GPU scheduling: %d of %d pods; their CPU and memory use on GPU nodes is not modelled.", r.CPUOnlyPods, r.Pods),
		"A pod arrives at its creation_time; once started it runs for deletion_time − scheduled_time of the trace (its recorded run time), whenever the simulation starts it.",
		"Pods Pending in the trace (never scheduled) arrive at creation_time and are deleted at deletion_time: still waiting then, they are cancelled; started earlier, they run until deletion_time. Their waits are left out of the wait percentiles (the trace has none to compare) and counted in trace_unscheduled, trace_unscheduled_started and cancelled_while_waiting.",
		fmt.Sprintf("%d GPU pods were still Running at the end of the trace window (deletion_time = the largest deletion_time): their run time is cut off there, so it is a lower bound.", r.CutOffInTrace),
		fmt.Sprintf("Recovery evidence is not in the trace: jobs of tiers [%s] are checkpointable with probability %g (seed %d, one PCG draw per job seeded by its name), checkpoint every %d s of run time and have %d verified resume(s); all other jobs are not checkpointable.",
			strings.Join(tiers, " "), c.Recovery.Probability, c.Seed, c.Recovery.CheckpointIntervalSeconds, c.Recovery.VerifiedResumes),
		fmt.Sprintf("Preemptions Plan may act on (pool stage %s) are carried out at once: the victim loses the run time since its last checkpoint plus %g s save/restore, per GPU held (effective run loss), and is requeued keeping its submit time and aging; its remaining run time grows by the same seconds.", c.Stage, c.Policy.Preemption.SaveRestoreSeconds),
		fmt.Sprintf("Projects are not in the trace: pods are hashed into %d projects (FNV-1a of the pod name, project-NN) with equal fair shares; the trace has no quotas, so only the policy file's apply.", c.Projects),
		fmt.Sprintf("Queues: one per tier, named after it (QoS LS → production, Guaranteed → key-project, Burstable → standard, BE → experiment); wait objectives %s.", strings.Join(objectives, ", ")),
		fmt.Sprintf("Nodes form one pool %q; GPU UUIDs are synthetic (GPU-<sn>-<i>); GPU memory of the undisclosed models is assumed (G1 32768, G2 and G3 81920 MiB); 8-GPU V100 and G-model nodes are one NVLink domain each; multi-GPU pods need one node.", c.PoolName),
		fmt.Sprintf("A scheduling cycle runs at every second with an arrival, at every release or deletion while jobs wait, again at once after a preemption, and every %d s while a job waits for a reason time can change (capacity_busy, fragmented, reserved_for_higher_priority, quota_exhausted); a wait reason holds from the cycle that gave it to the next cycle.", c.CycleIntervalSeconds),
		"Wait percentiles are nearest-rank (the ceil(p/100·n)-th smallest wait); the sim percentiles cover the first waits of jobs scheduled in the trace that started in the simulation, the trace percentiles those jobs' scheduled_time − creation_time.",
		"gpu_utilization is allocated GPU-seconds (a share of g milli-GPU counts g/1000) over GPUs × span, the span running from the first arrival to the last event.",
		fmt.Sprintf("A job is starved when one continuous wait exceeded %g × its queue's objective, or when it was still waiting at the end (never started, or never resumed after a preemption).", c.StarvationFactor),
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
	for _, code := range scheduling.WaitReasons {
		if s, ok := r.Reasons[string(code)]; ok {
			fmt.Fprintf(w, "  %-30s %14.0f\n", code, s)
		}
	}
	fmt.Fprintf(w, "\npreemptions %d (loss %.0f GPU-s), would preempt %d\n", r.Preemptions.Count, r.Preemptions.LossGPUSeconds, r.Preemptions.WouldPreempt)
	fmt.Fprintf(w, "starved jobs %d (over %g × objective or never started); unfinished %d (never started %d, not resumed %d)\n",
		r.StarvedJobs.Count, r.StarvedJobs.Factor, r.Unfinished.Count, r.Unfinished.NeverStarted, r.Unfinished.RequeuedNotResumed)
	for _, s := range r.StarvedJobs.Jobs {
		fmt.Fprintf(w, "  %s %s waited %d s (objective %d s, started %v, last reason %s)\n", s.Job, s.Tier, s.LongestWaitS, s.ObjectiveS, s.Started, s.Reason)
	}
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
