package replay

import (
	"context"
	"fmt"
	"io"
	"maps"
	"math"
	"slices"
	"sort"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/gpugov/gpugov/api"
	apiclient "github.com/gpugov/gpugov/api/client"
	"github.com/gpugov/gpugov/internal/queuereport"
	"github.com/gpugov/gpugov/internal/vocab"
)

// eventReaders bounds the concurrent GET /v1/jobs/{id}/events of the final read.
const eventReaders = 8

// Result is the outcome of a replay.
type Result struct {
	Started  time.Time `json:"started"`
	Finished time.Time `json:"finished"`
	Speed    float64   `json:"speed"`
	Pods     int       `json:"pods"`      // submissions planned
	Accepted int       `json:"submitted"` // submissions answered 2xx
	// Rejected lists the submissions the API refused.
	Rejected []Rejection `json:"rejected,omitempty"`
	// CancelFailures lists cancellations of never-scheduled pods that failed.
	CancelFailures []string `json:"cancel_failures,omitempty"`
	// TimedOut is true when Config.Wait passed before the jobs settled.
	TimedOut bool `json:"timed_out"`
	// JobIDs maps each accepted pod to its job ID.
	JobIDs map[string]string `json:"job_ids"`
	// States counts the jobs by state at the final read.
	States map[vocab.JobState]int `json:"states"`
	// Reasons counts the jobs waiting at the final read by tier, then reason.
	Reasons map[string]map[string]int `json:"reasons"`
	// StartsEstimated counts started jobs whose start no record shows — placed
	// by the first cycle that saw them (so no wait event) and ended before a
	// look — whose start is estimated as end − run_seconds/speed, an upper
	// bound. StartsUnknown counts those without even that (cancelled while
	// running): their wait counts as 0 s.
	StartsEstimated int `json:"starts_estimated"`
	StartsUnknown   int `json:"starts_unknown"`
	// Report is the queue report per tier over the replay's jobs, computed
	// by internal/queuereport from the records the API returned.
	Report queuereport.Report `json:"report"`
	// TraceWaits are the trace's own waits of the same pods (scheduled −
	// creation), divided by Speed so that they compare with Report's, per tier.
	TraceWaits map[string]WaitStats `json:"trace_waits"`
	// Governance is what the service's governance did to the replayed jobs
	// (readGovernance).
	Governance *Governance `json:"governance"`
	// TemporalUI is the Temporal UI's base URL the report links the
	// preemption workflows to (Config.TemporalUI); "" leaves the links out.
	TemporalUI string `json:"temporal_ui,omitempty"`
}

// WaitStats are nearest-rank percentiles of a sample of waits, in seconds.
type WaitStats struct {
	N   int     `json:"n"`
	P50 float64 `json:"p50_s"`
	P95 float64 `json:"p95_s"`
	P99 float64 `json:"p99_s"`
	Max float64 `json:"max_s"`
}

// jobRecord is one job as the final read returns it.
type jobRecord struct {
	tj     *trackedJob
	job    api.Job
	events []api.WaitEvent
}

// result reads every job and its wait events back and builds the Result.
func (r *runner) result(ctx context.Context, timedOut bool) (*Result, error) {
	t := r.tr
	t.mu.Lock()
	tracked := slices.Clone(t.order)
	res := &Result{Started: r.start, Speed: r.cfg.Speed, Pods: len(r.cfg.Submissions), Accepted: len(tracked),
		Rejected: slices.Clone(t.rejected), CancelFailures: slices.Clone(t.cancelErrs), TimedOut: timedOut,
		JobIDs: map[string]string{}, States: map[vocab.JobState]int{}, Reasons: map[string]map[string]int{}}
	t.mu.Unlock()
	recs, err := readBack(ctx, r.cfg.Client, tracked)
	if err != nil {
		return nil, err
	}
	queues, err := r.cfg.Client.Queues(ctx)
	if err != nil {
		return nil, fmt.Errorf("read the queues: %w", err)
	}
	inv, err := r.cfg.Client.Inventory(ctx)
	if err != nil {
		return nil, fmt.Errorf("read the inventory: %w", err)
	}
	preemptions, err := readPreemptions(ctx, r.cfg.Client, recs)
	if err != nil {
		return nil, err
	}
	res.Finished = time.Now()
	in, sources := reportInput(recs, queues, r.cfg.Speed, preemptions)
	in.Capacity = poolCapacity(inv)
	res.StartsEstimated, res.StartsUnknown = sources[startEstimated], sources[startUnknown]
	from := res.Started
	for _, j := range in.Jobs {
		from = minTime(from, j.SubmitTime)
	}
	res.Report, err = queuereport.Compute(in, starvingOptions(queuereport.Options{
		Window:  queuereport.Window{From: from, To: res.Finished.Add(time.Millisecond)},
		Now:     res.Finished,
		GroupBy: []string{queuereport.KeyTier},
	}, r.cfg.Speed))
	if err != nil {
		return nil, fmt.Errorf("queue report: %w", err)
	}
	for _, rec := range recs {
		res.JobIDs[rec.tj.sub.Key] = rec.job.ID
		res.States[rec.job.State]++
		if rec.job.State.Pending() {
			reason := "(no cycle yet)"
			if rec.job.Explanation != nil && rec.job.Explanation.Reason != "" {
				reason = rec.job.Explanation.Reason
			}
			if res.Reasons[rec.job.Tier] == nil {
				res.Reasons[rec.job.Tier] = map[string]int{}
			}
			res.Reasons[rec.job.Tier][reason]++
		}
	}
	res.TraceWaits = traceWaits(r.cfg.Submissions, r.cfg.Speed)
	res.Governance = buildGovernance(recs, inv, r.cfg.Pool, preemptions)
	res.TemporalUI = r.cfg.TemporalUI
	return res, nil
}

// readBack lists every job (the replay's are picked by ID) and reads the wait
// events of each, eventReaders at a time.
func readBack(ctx context.Context, c *apiclient.Client, tracked []*trackedJob) ([]*jobRecord, error) {
	all, err := listAll(ctx, c, apiclient.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("read the jobs back: %w", err)
	}
	byID := make(map[string]*api.Job, len(all))
	for i := range all {
		byID[all[i].ID] = &all[i]
	}
	recs := make([]*jobRecord, len(tracked))
	for i, tj := range tracked {
		j := byID[tj.jobID]
		if j == nil {
			return nil, fmt.Errorf("job %s of pod %s: %w", tj.jobID, tj.sub.Key, errNoJob)
		}
		recs[i] = &jobRecord{tj: tj, job: *j}
	}
	var wg sync.WaitGroup
	errs := make([]error, len(recs))
	sem := make(chan struct{}, eventReaders)
	for i, rec := range recs {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			ev, err := c.JobEvents(ctx, rec.job.ID)
			if err != nil {
				errs[i] = fmt.Errorf("wait events of job %s: %w", rec.job.ID, err)
				return
			}
			rec.events = ev.Events
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	return recs, nil
}

// reportInput converts the records to the queue report's input and counts
// the started jobs by the source of their start.
//
// A job's first start is the API's started_at (its first run's start); for
// jobs stored before that field existed it is taken as the instant its
// allocation was granted, from the first of: the end of its last
// wait event (the store closes it at placement); the start a look saw
// (trackedJob.seenStart); for a succeeded job, its end minus run_seconds/speed
// (an upper bound); else its submit time.
// A job that ended runs from that start to its end (ended_at, else its last
// update: the store stamps the job when it releases the allocation). A
// preempted job's runs are cut by its preemption records (oldest first): a
// run ends at a record's released_at and the next starts at its resumed_at
// (none when it never resumed).
func reportInput(recs []*jobRecord, queues *api.QueueList, speed float64, preemptions []api.Preemption) (queuereport.Input, map[startSource]int) {
	cuts := map[string][]api.Preemption{}
	for _, p := range preemptions {
		if p.ReleasedAt != nil {
			cuts[p.VictimJobID] = append(cuts[p.VictimJobID], p)
		}
	}
	var in queuereport.Input
	for _, q := range queues.Queues {
		in.Targets = append(in.Targets, queuereport.QueueTarget{Queue: q.Name, ServiceShare: q.ServiceShare,
			MaxWait: time.Duration(q.MaxWaitSec * float64(time.Second)), MinShare: q.MinShare, MaxShare: q.MaxShare})
	}
	sources := map[startSource]int{}
	for _, rec := range recs {
		j := &rec.job
		tier, _ := vocab.ParseTier(j.Tier)
		qj := queuereport.Job{
			ID: j.ID, Queue: j.Queue, Tier: tier, Pool: j.Resources.Pool, Project: j.Project, State: string(j.State),
			Request:    queuereport.Request{GPUs: j.Resources.GPUs, GPUMilli: j.Resources.GPUMilli, Models: j.Resources.GPUModels},
			SubmitTime: j.SubmittedAt,
		}
		final := j.State.Final()
		if final {
			end := j.UpdatedAt
			if j.EndedAt != nil {
				end = *j.EndedAt
			}
			qj.End = &end
		}
		started := j.State.HoldsGPUs() || j.State == vocab.JobSucceeded || j.State == vocab.JobFailed ||
			(j.Explanation != nil && j.Explanation.Placed != nil) || j.StartedAt != nil
		qj.Cancelled = j.State == vocab.JobCancelled
		qj.CancelledWhileWaiting = qj.Cancelled && !started
		if started {
			start, src := firstStart(rec, speed)
			sources[src]++
			if qj.End != nil && qj.End.Before(start) {
				start = *qj.End
			}
			qj.FirstStart = &start
			runStart := &start
			for _, p := range cuts[j.ID] {
				if runStart == nil {
					break
				}
				end := maxTime(*p.ReleasedAt, *runStart)
				in.Runs = append(in.Runs, queuereport.Run{JobID: j.ID, Start: *runStart, End: &end, GPUMilli: qj.Request.DemandMilli()})
				in.Releases = append(in.Releases, queuereport.Release{At: end, Pool: qj.Pool, GPUMilli: qj.Request.DemandMilli()})
				runStart = p.ResumedAt
			}
			if runStart != nil {
				in.Runs = append(in.Runs, queuereport.Run{JobID: j.ID, Start: *runStart, End: qj.End, GPUMilli: qj.Request.DemandMilli()})
				if qj.End != nil {
					in.Releases = append(in.Releases, queuereport.Release{At: *qj.End, Pool: qj.Pool, GPUMilli: qj.Request.DemandMilli()})
				}
			}
		}
		for _, e := range rec.events {
			in.WaitEvents = append(in.WaitEvents, queuereport.WaitEvent{JobID: j.ID,
				Reason: vocab.WaitReason(e.Reason), Start: e.StartedAt, End: e.EndedAt})
		}
		in.Jobs = append(in.Jobs, qj)
	}
	return in, sources
}

// startSource says where a started job's first start was read.
type startSource int

const (
	startRecorded  startSource = iota // a wait event's end or a look: exact
	startEstimated                    // end − run_seconds/speed: an upper bound
	startUnknown                      // nothing shows it: the submit time is used
)

// firstStart returns a started job's first start and its source (see
// reportInput). The estimate is an upper bound because the simulated executor
// computes for at least run_seconds/speed of real time (when its speed equals
// the replay's) and the job is stamped only after the run ends.
func firstStart(rec *jobRecord, speed float64) (time.Time, startSource) {
	j := &rec.job
	if j.StartedAt != nil {
		return maxTime(*j.StartedAt, j.SubmittedAt), startRecorded
	}
	if n := len(rec.events); n > 0 && rec.events[n-1].EndedAt != nil {
		return maxTime(*rec.events[n-1].EndedAt, j.SubmittedAt), startRecorded
	}
	if rec.tj.seenStart != nil {
		return maxTime(*rec.tj.seenStart, j.SubmittedAt), startRecorded
	}
	if j.State == vocab.JobSucceeded {
		run := time.Duration(math.Ceil(j.RunSeconds) / speed * float64(time.Second))
		return maxTime(j.UpdatedAt.Add(-run), j.SubmittedAt), startEstimated
	}
	return j.SubmittedAt, startUnknown
}

// traceWaits returns, per tier, the nearest-rank percentiles of the trace's
// own waits of the submitted pods it scheduled, divided by speed.
func traceWaits(subs []Submission, speed float64) map[string]WaitStats {
	byTier := map[string][]float64{}
	for _, s := range subs {
		if s.Job.HasRecordedWait {
			tier := s.Job.Spec.Tier.String()
			byTier[tier] = append(byTier[tier], float64(s.Job.RecordedWait)/speed)
		}
	}
	out := map[string]WaitStats{}
	var all []float64
	for tier, ws := range byTier {
		out[tier] = stats(ws)
		all = append(all, ws...)
	}
	out[totalKey] = stats(all)
	return out
}

// totalKey keys the all-tiers row of TraceWaits.
const totalKey = "total"

func stats(ws []float64) WaitStats {
	sort.Float64s(ws)
	s := WaitStats{N: len(ws)}
	s.P50, _ = queuereport.Percentile(ws, 50)
	s.P95, _ = queuereport.Percentile(ws, 95)
	s.P99, _ = queuereport.Percentile(ws, 99)
	s.Max, _ = queuereport.Percentile(ws, 100)
	return s
}

// Render writes the result as text: the header, the per-tier table (the
// service's waits next to the trace's), the current wait reasons, the
// pool's wait-reason shares with its main problem (queuereport's) and the
// final states. It returns the writer's error.
func (res *Result) Render(w io.Writer, header string) error {
	ew := &errWriter{w: w}
	ew.printf("%s", header)
	note := ""
	if res.TimedOut {
		note = " (the wait for the jobs to settle ran out: some still run)"
	}
	ew.printf("Replayed %d pods at %g×: %d submitted, %d rejected; read back after %s%s.\n",
		res.Pods, res.Speed, res.Accepted, len(res.Rejected), res.Finished.Sub(res.Started).Round(100*time.Millisecond), note)
	ew.printf("Waits are submit → start (allocation granted) in real seconds; TRACE_* are the trace's own waits of\n" +
		"the same pods divided by the speed. Percentiles are nearest-rank (internal/queuereport).\n")
	if res.StartsEstimated+res.StartsUnknown > 0 {
		ew.printf("The API shows no start time: for %d jobs placed by their first cycle and ended between two looks the start\n"+
			"is estimated as end − run_seconds/speed (an upper bound); %d cancelled ones count a 0 s wait.\n",
			res.StartsEstimated, res.StartsUnknown)
	}
	ew.printf("\n")
	tw := tabwriter.NewWriter(ew, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "TIER\tJOBS\tSTARTED\tP50\tP95\tP99\tMAX\tTRACE_P50\tTRACE_P95\tTRACE_P99\tTRACE_MAX\tWAITING\t")
	rows := append(slices.Clone(res.Report.Groups), res.Report.Total)
	for _, g := range rows {
		tier := g.Key[queuereport.KeyTier]
		if tier == "" {
			tier = totalKey
		}
		tr := res.TraceWaits[tier]
		fmt.Fprintf(tw, "%s\t%d\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d\t\n", tier, g.Jobs, g.Started,
			secs(g.WaitP50S), secs(g.WaitP95S), secs(g.WaitP99S), secs(g.WaitMaxS),
			traceSecs(tr.N, tr.P50), traceSecs(tr.N, tr.P95), traceSecs(tr.N, tr.P99), traceSecs(tr.N, tr.Max), g.StillWaiting)
	}
	ew.err = firstErr(ew.err, tw.Flush())
	ew.printf("\nCurrent wait reasons of the replayed jobs\n")
	if len(res.Reasons) == 0 {
		ew.printf("  (no job is waiting)\n")
	}
	for _, tier := range tierOrder(res.Reasons) {
		reasons := res.Reasons[tier]
		for _, reason := range slices.Sorted(maps.Keys(reasons)) {
			ew.printf("  %-12s %-30s %d\n", tier, reason, reasons[reason])
		}
	}
	ew.printf("\nWait-reason shares and main problem, over the replayed jobs only\n")
	ew.err = firstErr(ew.err, queuereport.RenderPoolShares(ew, res.Report.ReasonShares))
	res.renderGovernance(ew, res.TemporalUI)
	ew.printf("\nJobs by state:")
	for _, s := range vocab.JobStates {
		if n := res.States[s]; n > 0 {
			ew.printf(" %s %d", s, n)
		}
	}
	ew.printf("\n")
	for i, rj := range res.Rejected {
		if i == 5 {
			ew.printf("… and %d more rejections\n", len(res.Rejected)-5)
			break
		}
		ew.printf("rejected %s: %s\n", rj.Pod, rj.Error)
	}
	return ew.err
}

// tierOrder returns the tiers of m, highest first.
func tierOrder(m map[string]map[string]int) []string {
	var out []string
	for _, t := range vocab.Tiers {
		if _, ok := m[t.String()]; ok {
			out = append(out, t.String())
		}
	}
	return out
}

// secs renders seconds with a precision that suits their size; "-" when undefined.
func secs(v *float64) string {
	if v == nil {
		return "-"
	}
	return formatSeconds(*v)
}

func traceSecs(n int, v float64) string {
	if n == 0 {
		return "-"
	}
	return formatSeconds(v)
}

// formatSeconds renders 0.042 as "0.04s", 12.3 as "12.3s", 754 as "12m34s";
// the bounds are those of the rounded value, so 9.996 is "10.0s".
func formatSeconds(v float64) string {
	switch {
	case v < 9.995:
		return fmt.Sprintf("%.2fs", v)
	case v < 59.95:
		return fmt.Sprintf("%.1fs", v)
	default:
		return time.Duration(v * float64(time.Second)).Round(time.Second).String()
	}
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// errWriter keeps the first write error so rendering stays linear.
type errWriter struct {
	w   io.Writer
	err error
}

// Write writes p unless an earlier write failed; it then drops p silently.
func (e *errWriter) Write(p []byte) (int, error) {
	if e.err != nil {
		return len(p), nil
	}
	n, err := e.w.Write(p)
	e.err = err
	return n, err
}

func (e *errWriter) printf(format string, args ...any) { fmt.Fprintf(e, format, args...) }

func firstErr(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

// poolCapacity is each pool's usable GPUs (healthy, on schedulable nodes)
// in the inventory the API reports, the base of the queues' pool shares.
func poolCapacity(inv *api.Inventory) []queuereport.PoolCapacity {
	out := make([]queuereport.PoolCapacity, 0, len(inv.Pools))
	for _, p := range inv.Pools {
		var n float64
		for _, nd := range p.Nodes {
			for _, g := range nd.GPUs {
				if nd.Schedulable && g.Healthy {
					n++
				}
			}
		}
		out = append(out, queuereport.PoolCapacity{Pool: p.Name, GPUs: n})
	}
	return out
}
