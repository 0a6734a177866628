// Package replay submits a slice of the Alibaba GPU trace to a running gpugov
// through its HTTP API, at the trace's pace compressed by a speed factor,
// shows progress while the service schedules it, and ends with a queue report
// per tier computed by internal/queuereport from the records the API returns,
// next to the waits the trace itself recorded for the same pods.
//
// What a pod becomes (Build): the job alibaba.PendingJob makes of it (queue
// named after its tier, synthetic project, its GPUs, share, models, CPU and
// memory), run_seconds = the trace's run time (deletion − scheduled, at least
// 1 s), recovery evidence drawn by a seeded rule (the trace has none), and the
// pod name as idempotency key, so replaying the same slice again creates no
// job twice. A pod the trace never scheduled (phase Pending) is cancelled at
// its deletion time, as internal/simulation does; its run_seconds is
// deletion − creation. The trace's failed pods run like the others: the API
// has no field for an injected failure.
//
// Times: a pod created at trace second c is submitted at (c − from) / speed
// after the replay starts. The serving side's simulated executor compresses
// runs by its own --sim-speed; keep the two equal (both default to
// DefaultSpeed) or waits are distorted.
package replay

import (
	"cmp"
	"fmt"
	"hash/fnv"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gpugov/gpugov/api"
	"github.com/gpugov/gpugov/internal/scheduling"
	"github.com/gpugov/gpugov/internal/simulation"
	"github.com/gpugov/gpugov/internal/trace"
	"github.com/gpugov/gpugov/internal/trace/alibaba"
	"github.com/gpugov/gpugov/internal/vocab"
)

// Defaults of the replay.
const (
	// DefaultSpeed is the compression factor: trace seconds per real second.
	// A day of trace is submitted in 144 s.
	DefaultSpeed = 600
	// DefaultFrom and DefaultTo bound the default busy slice of
	// openb_pod_list_default.csv: trace hours 3548–3572 (seconds 12,772,800 to
	// 12,859,200), the 24 hours with the most GPU-pod arrivals (732 pods),
	// found by sliding a 24-hour window over the creation times; it lies in
	// the trace's last 30 days, which hold 90% of its pods.
	DefaultFrom int64 = 3548 * 3600
	DefaultTo   int64 = 3572 * 3600
	// DefaultMinRunSeconds is the shortest run submitted: the API needs
	// run_seconds > 0 and some trace pods are deleted the second they start.
	DefaultMinRunSeconds = 1
)

// Recovery is the seeded rule that gives replayed jobs recovery evidence,
// which the trace lacks: a job of one of Tiers is checkpointable, every
// CheckpointIntervalSeconds, when the first draw of PCG(Seed, FNV-64a of the
// pod name) is below Probability — the rule internal/simulation applies, so
// that a replay and a simulation of the same pods agree.
type Recovery struct {
	Tiers                     []vocab.Tier
	Probability               float64 // 0..1
	CheckpointIntervalSeconds int64   // > 0
	Seed                      uint64
}

// DefaultRecovery returns internal/simulation's default rule: standard and
// experiment jobs, probability 0.5, a checkpoint every 1,800 s, seed 1.
func DefaultRecovery() Recovery {
	c := simulation.DefaultConfig()
	return Recovery{Tiers: c.Recovery.Tiers, Probability: c.Recovery.Probability,
		CheckpointIntervalSeconds: c.Recovery.CheckpointIntervalSeconds, Seed: c.Seed}
}

// String describes the rule for the replay's header.
func (r Recovery) String() string {
	names := make([]string, len(r.Tiers))
	for i, t := range r.Tiers {
		names[i] = t.String()
	}
	return fmt.Sprintf("%s jobs checkpointable with probability %g (seed %d), every %d s",
		strings.Join(names, " and "), r.Probability, r.Seed, r.CheckpointIntervalSeconds)
}

// draw returns the recovery spec of a pod of tier t.
func (r Recovery) draw(pod string, t vocab.Tier) api.RecoverySpec {
	if !slices.Contains(r.Tiers, t) {
		return api.RecoverySpec{}
	}
	h := fnv.New64a()
	h.Write([]byte(pod))
	if rand.New(rand.NewPCG(r.Seed, h.Sum64())).Float64() >= r.Probability {
		return api.RecoverySpec{}
	}
	return api.RecoverySpec{Checkpointable: true, CheckpointIntervalSeconds: r.CheckpointIntervalSeconds}
}

// Select returns the GPU pods (num_gpu > 0) created in [from, to), ordered by
// creation time (file order among equal times), at most max of them (max ≤ 0:
// all).
func Select(pods []alibaba.PodRow, from, to int64, max int) []alibaba.PodRow {
	var out []alibaba.PodRow
	for _, p := range pods {
		if p.NumGPU > 0 && p.CreationTime >= from && p.CreationTime < to {
			out = append(out, p)
		}
	}
	slices.SortStableFunc(out, func(a, b alibaba.PodRow) int { return cmp.Compare(a.CreationTime, b.CreationTime) })
	if max > 0 && len(out) > max {
		out = out[:max]
	}
	return out
}

// BuildOptions says how pods become submissions.
type BuildOptions struct {
	From     int64   // trace second submitted at replay offset 0
	Speed    float64 // trace seconds per real second; > 0
	Pool     string  // pool every job asks for; alibaba.DefaultPoolName when empty
	Projects int     // synthetic projects (alibaba.ProjectOf); alibaba.DefaultProjects when ≤ 0
	Recovery Recovery
	// MaxRunSeconds, when > 0, caps each job's run_seconds (tests that must
	// finish quickly); the trace's run time is used otherwise.
	MaxRunSeconds float64
}

// Submission is one trace job as the replay submits it.
type Submission struct {
	Pod  alibaba.PodRow // the Alibaba pod (Build); zero for other traces (BuildJobs)
	Job  trace.Job      // the job in the neutral trace model
	Key  string         // Idempotency-Key: the job's ID (an Alibaba pod's name)
	Spec api.JobSpec
	// SubmitAt is the real time after the replay's start to submit at.
	SubmitAt time.Duration
	// CancelAt, when > 0, is the real time after the start to cancel the job
	// at: the trace deleted the pod without ever scheduling it.
	CancelAt time.Duration
}

// Build turns selected pods into submissions (see the package comment). It
// returns an error for a speed ≤ 0 or a pod created before From.
func Build(pods []alibaba.PodRow, o BuildOptions) ([]Submission, error) {
	projects := o.Projects
	if projects <= 0 {
		projects = alibaba.DefaultProjects
	}
	tr, err := alibaba.Source{Pods: pods}.Trace(trace.Options{Pool: cmp.Or(o.Pool, alibaba.DefaultPoolName), Projects: projects})
	if err != nil {
		return nil, err
	}
	subs, err := BuildJobs(tr.Jobs, o)
	if err != nil {
		return nil, err
	}
	byName := make(map[string]*alibaba.PodRow, len(pods))
	for i := range pods {
		byName[pods[i].Name] = &pods[i]
	}
	for i := range subs {
		subs[i].Pod = *byName[subs[i].Key]
	}
	return subs, nil
}

// SelectJobs returns the jobs submitted in [from, to), ordered by submit
// time (file order among equal times), at most max of them (max ≤ 0: all).
func SelectJobs(jobs []trace.Job, from, to int64, max int) []trace.Job {
	var out []trace.Job
	for _, j := range jobs {
		if j.Submit >= from && j.Submit < to {
			out = append(out, j)
		}
	}
	slices.SortStableFunc(out, func(a, b trace.Job) int { return cmp.Compare(a.Submit, b.Submit) })
	if max > 0 && len(out) > max {
		out = out[:max]
	}
	return out
}

// BuildJobs turns selected trace jobs into submissions: the job's queue,
// project and request (pool, GPUs, share, models, topology, CPU, memory) as
// the trace's reader converted them, run_seconds its recorded run time (at
// least DefaultMinRunSeconds, capped by MaxRunSeconds), its ID as
// Idempotency-Key, recovery evidence by o.Recovery, submitted at (submit −
// From) / Speed, and a job the trace never scheduled cancelled at its end.
// It returns an error for a speed ≤ 0 or a job submitted before From.
func BuildJobs(jobs []trace.Job, o BuildOptions) ([]Submission, error) {
	if !(o.Speed > 0) {
		return nil, fmt.Errorf("speed must be > 0, got %g", o.Speed)
	}
	out := make([]Submission, 0, len(jobs))
	for _, j := range jobs {
		job := j.Spec
		if j.Submit < o.From {
			return nil, fmt.Errorf("job %s is submitted at trace second %d, before the replay's start %d", job.ID, j.Submit, o.From)
		}
		s := Submission{Job: j, Key: job.ID, SubmitAt: offset(j.Submit-o.From, o.Speed)}
		run := j.RunSeconds
		if !j.Scheduled {
			run = j.End - j.Submit
			s.CancelAt = max(offset(j.End-o.From, o.Speed), s.SubmitAt+time.Millisecond)
		}
		runSeconds := math.Max(float64(run), DefaultMinRunSeconds)
		if o.MaxRunSeconds > 0 {
			runSeconds = math.Min(runSeconds, o.MaxRunSeconds)
		}
		s.Spec = api.JobSpec{
			Project: job.Project, Queue: job.Queue, RunSeconds: runSeconds,
			Resources: api.ResourceSpec{
				GPUs: job.Request.GPUs, GPUMilli: job.Request.GPUMilli, GPUModels: job.Request.GPUModels,
				Pool: job.Request.Pool, Topology: string(job.Request.Topology),
				CPUMilli: job.Request.CPUMilli, MemoryMiB: job.Request.MemoryMiB,
			},
			Recovery: o.Recovery.draw(job.ID, job.Tier),
		}
		if s.Spec.Resources.GPUMilli == scheduling.MilliPerGPU {
			s.Spec.Resources.GPUMilli = 0 // whole GPUs: the API takes a share only below 1000
		}
		out = append(out, s)
	}
	return out, nil
}

// offset converts trace seconds after the start into real time at speed.
func offset(traceSeconds int64, speed float64) time.Duration {
	return time.Duration(float64(traceSeconds) / speed * float64(time.Second))
}

// ParseTraceTime reads a trace instant given as whole seconds from the start
// of the trace ("12772800") or as a Go duration ("3548h"). It returns an
// error naming the value otherwise.
func ParseTraceTime(s string) (int64, error) {
	if n, err := strconv.ParseInt(s, 10, 64); err == nil {
		if n < 0 {
			return 0, fmt.Errorf("trace time %q is negative", s)
		}
		return n, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 {
		return 0, fmt.Errorf("trace time %q: want seconds from the trace start (12772800) or a duration (3548h)", s)
	}
	return int64(d / time.Second), nil
}

// BusiestWindow returns the start of the window of width trace seconds
// holding the most job submissions (the earliest such window; 0 for no
// jobs): the default slice of a trace without a stated one (Philly). The
// window starts at a submit time.
func BusiestWindow(jobs []trace.Job, width int64) int64 {
	t := make([]int64, len(jobs))
	for i, j := range jobs {
		t[i] = j.Submit
	}
	slices.Sort(t)
	best, bestN, hi := int64(0), 0, 0
	for lo := range t {
		for hi < len(t) && t[hi] < t[lo]+width {
			hi++
		}
		if n := hi - lo; n > bestN {
			best, bestN = t[lo], n
		}
	}
	return best
}
