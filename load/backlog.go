package load

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"

	"github.com/gpugov/gpugov/api"
	"github.com/gpugov/gpugov/internal/scheduling"
	"github.com/gpugov/gpugov/internal/vocab"
	"github.com/gpugov/gpugov/store"
)

// Defaults of BacklogConfig (docs/design.md §8 "Bursts and backlogs").
const (
	// DefaultBacklogHold is how long serve is sampled after the backlog is stored.
	DefaultBacklogHold = 3 * time.Minute
	// DefaultBacklogBaseline is how long serve is sampled before: its memory
	// without the backlog.
	DefaultBacklogBaseline = 15 * time.Second
	// BacklogBatch is how many jobs one store.CreateJobs transaction stores.
	BacklogBatch = 10000
)

// BacklogSubmitter is the actor the backlog's "submit" audit entries name.
const BacklogSubmitter = "gpugov-load-backlog"

// BacklogConfig is what RunBacklog needs: Config's connections, job mix
// (Pool, Projects, RunSeconds, WaitShare) and memory sampling (its rates and
// cancel settings are not used), and the backlog itself.
type BacklogConfig struct {
	Config
	// Jobs is the number of pending jobs stored (> 0).
	Jobs int
	// Baseline is how long serve is sampled before the jobs are stored, Hold
	// how long after; ≤ 0: DefaultBacklogBaseline, DefaultBacklogHold.
	Baseline, Hold time.Duration
}

// BacklogReport is the outcome of a backlog run. Times named "…At" run
// from the first sample.
type BacklogReport struct {
	Jobs       int     `json:"jobs"`
	Pool       string  `json:"pool"`
	Projects   int     `json:"projects"`
	WaitShare  float64 `json:"wait_share"`
	RunSeconds float64 `json:"run_seconds"`
	Label      string  `json:"label"`
	// LoadAvgStart and LoadAvgEnd are the machine's 1-minute load averages.
	LoadAvgStart float64 `json:"load_avg_start"`
	LoadAvgEnd   float64 `json:"load_avg_end"`
	// InsertStartAt is when the first batch was sent and InsertTime how long
	// the BacklogBatch-sized store.CreateJobs transactions took in all.
	InsertStartAt time.Duration `json:"insert_start_at_ns"`
	InsertTime    time.Duration `json:"insert_ns"`
	Hold          time.Duration `json:"hold_ns"`
	// LabelledRows is how many rows carry the run's label at the end (Jobs
	// unless a batch failed).
	LabelledRows int `json:"labelled_rows"`
	// WorkflowsCounted is Temporal's visibility count, at the end, of the
	// JobWorkflows started since the first batch: how many of the backlog's
	// jobs the reconciler had started (every job of the database counts;
	// in `make load`'s stack only the backlog's are new).
	WorkflowsCounted int64 `json:"workflows_counted"`
	// BaselineRSSBytes and BaselineHeapLiveBytes are the medians over the
	// samples before the insert; PeakRSSBytes and PeakHeapLiveBytes the
	// maxima after it; EndRSSBytes and EndHeapLiveBytes the last sample's.
	BaselineRSSBytes      int64 `json:"baseline_rss_bytes"`
	BaselineHeapLiveBytes int64 `json:"baseline_heap_live_bytes"`
	PeakRSSBytes          int64 `json:"peak_rss_bytes"`
	PeakHeapLiveBytes     int64 `json:"peak_heap_live_bytes"`
	EndRSSBytes           int64 `json:"end_rss_bytes"`
	EndHeapLiveBytes      int64 `json:"end_heap_live_bytes"`
	// PendingPeak and PendingEnd are the database's pending jobs (submitted
	// or waiting) at most and at the last sample; FinishedInHold the jobs
	// that ended after the insert.
	PendingPeak    int64 `json:"pending_peak"`
	PendingEnd     int64 `json:"pending_end"`
	FinishedInHold int64 `json:"finished_in_hold"`
	// Cycles and MeanCycleMillis are the scheduling cycles after the insert
	// and their mean duration.
	Cycles          int64   `json:"cycles"`
	MeanCycleMillis float64 `json:"mean_cycle_ms"`
	// Memory is every sample, before and after the insert.
	Memory []MemorySample `json:"memory"`
	// Failures says why Pass is false, one line each.
	Failures []string `json:"failures"`
	Pass     bool     `json:"pass"`
}

// RunBacklog puts serve under a backlog of Jobs pending jobs without Jobs
// API calls: it samples serve's memory (Run's sampler) for Baseline, stores
// the jobs — the sustained mix's specs converted as POST /v1/jobs converts
// them (api.NewStoreJob) and committed through store.CreateJobs in batches
// of BacklogBatch, each job audited like a bulk import — and samples for
// Hold while serve's scheduler cycles over them and its reconciler (the
// first pass after the insert, then every 30 s) starts their workflows. It
// measures memory against a pending count made mostly of rows whose
// workflows are still being started, not of 100,000 running workflows. The
// run fails only when the rows did not all land (LabelledRows ≠ Jobs) or no
// sample read serve's memory. It returns an error for bad settings, a
// missing pool or queue, or a store failure.
func RunBacklog(ctx context.Context, bc BacklogConfig) (*BacklogReport, error) {
	if bc.Jobs <= 0 {
		return nil, fmt.Errorf("load: backlog jobs must be > 0, got %d", bc.Jobs)
	}
	if bc.Baseline <= 0 {
		bc.Baseline = DefaultBacklogBaseline
	}
	if bc.Hold <= 0 {
		bc.Hold = DefaultBacklogHold
	}
	cfg := bc.Config.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if err := preflight(ctx, cfg); err != nil {
		return nil, err
	}
	queues, err := cfg.Store.ListQueues(ctx)
	if err != nil {
		return nil, fmt.Errorf("load: %w", err)
	}
	r := &runner{cfg: cfg, rec: newRecorder(), runID: strconv.FormatInt(time.Now().Unix(), 36)}
	rep := &BacklogReport{Jobs: bc.Jobs, Pool: cfg.Pool, Projects: cfg.Projects, WaitShare: cfg.WaitShare, RunSeconds: cfg.RunSeconds,
		Label: "backlog-" + r.runID, Hold: bc.Hold, WorkflowsCounted: -1, LoadAvgStart: readLoad1()}
	jobs, err := r.backlogJobs(bc.Jobs, rep.Label, queues)
	if err != nil {
		return nil, err
	}

	r.start = time.Now()
	sampleCtx, stopSampling := context.WithCancel(ctx)
	sampled := make(chan []MemorySample, 1)
	go func() { sampled <- r.sampleLoop(sampleCtx) }()
	stop := func() []MemorySample {
		stopSampling()
		return <-sampled
	}
	fmt.Fprintf(cfg.Progress, "load: backlog of %d jobs; %s of baseline samples first\n", bc.Jobs, bc.Baseline)
	if !sleepUntil(ctx, r.start.Add(bc.Baseline)) {
		stop()
		return nil, ctx.Err()
	}
	insertStart := time.Now()
	rep.InsertStartAt = insertStart.Sub(r.start)
	for off := 0; off < len(jobs); off += BacklogBatch {
		if _, err := cfg.Store.CreateJobs(ctx, jobs[off:min(len(jobs), off+BacklogBatch)]); err != nil {
			stop()
			return nil, fmt.Errorf("load: store the backlog (%d of %d stored): %w", off, len(jobs), err)
		}
		fmt.Fprintf(cfg.Progress, "load: %d of %d backlog jobs stored (%s)\n", min(len(jobs), off+BacklogBatch), len(jobs),
			time.Since(insertStart).Round(time.Millisecond))
	}
	rep.InsertTime = time.Since(insertStart)
	if !sleepUntil(ctx, time.Now().Add(bc.Hold)) {
		stop()
		return nil, ctx.Err()
	}
	rep.Memory = stop()
	rep.LoadAvgEnd = readLoad1()
	labelled, err := cfg.Store.JobIDsWithEnv(ctx, RunLabel, rep.Label)
	if err != nil {
		return nil, fmt.Errorf("load: %w", err)
	}
	rep.LabelledRows = len(labelled)
	// No wait for visibility: the count is of the starts made so far.
	if rep.WorkflowsCounted, err = r.countWorkflows(ctx, insertStart.Add(-time.Second), 0); err != nil {
		return nil, err
	}
	rep.summarise(rep.InsertStartAt)
	rep.decide(cfg.ServePID > 0, cfg.MetricsURL != "")
	return rep, nil
}

// backlogJobs draws n jobs of the mix, labelled, validated as the API
// validates them and converted as it converts them.
func (r *runner) backlogJobs(n int, label string, queues []scheduling.Queue) ([]*store.NewJob, error) {
	byName := make(map[string]scheduling.Queue, len(queues))
	for _, q := range queues {
		byName[q.Name] = q
	}
	p := api.Principal{Name: BacklogSubmitter, Project: "platform", Role: vocab.RoleOperator}
	out := make([]*store.NewJob, n)
	for i := range out {
		spec, _ := r.jobSpec(rand.New(rand.NewPCG(r.cfg.Seed, uint64(i))))
		spec.Env = map[string]string{RunLabel: label}
		q, ok := byName[spec.Queue]
		if errs := api.ValidateJobSpec(spec, func(string) bool { return ok }); len(errs) > 0 {
			return nil, fmt.Errorf("load: backlog job %d: %s: %s", i, errs[0].Field, errs[0].Message)
		}
		out[i] = api.NewStoreJob(spec, p, q)
	}
	return out, nil
}

// summarise fills the memory, pending and cycle figures from the samples,
// split at insertAt.
func (r *BacklogReport) summarise(insertAt time.Duration) {
	var baseRSS, baseHeap []float64
	var after []MemorySample
	for _, s := range r.Memory {
		if s.At < insertAt {
			baseRSS, baseHeap = append(baseRSS, float64(s.RSSBytes)), append(baseHeap, float64(s.HeapLiveBytes))
			continue
		}
		after = append(after, s)
		r.PendingPeak = max(r.PendingPeak, s.Pipeline.Pending)
	}
	r.BaselineRSSBytes, r.BaselineHeapLiveBytes = int64(median(baseRSS)), int64(median(baseHeap))
	r.PeakRSSBytes, r.PeakHeapLiveBytes, r.Cycles, r.MeanCycleMillis = memorySummary(after)
	if n := len(after); n > 0 {
		last := after[n-1]
		r.EndRSSBytes, r.EndHeapLiveBytes, r.PendingEnd = last.RSSBytes, last.HeapLiveBytes, last.Pipeline.Pending
		r.FinishedInHold = last.Pipeline.Finished - after[0].Pipeline.Finished
	}
}

// decide fills Failures and Pass: every row stored, and memory read when
// asked for (rss: a serve PID was given; heap: a /metrics URL).
func (r *BacklogReport) decide(rss, heap bool) {
	r.Failures = nil
	if r.LabelledRows != r.Jobs {
		r.Failures = append(r.Failures, fmt.Sprintf("%d rows carry the run's label, want %d", r.LabelledRows, r.Jobs))
	}
	if rss && r.PeakRSSBytes == 0 {
		r.Failures = append(r.Failures, "no sample read serve's RSS after the insert")
	}
	if heap && r.PeakHeapLiveBytes == 0 {
		r.Failures = append(r.Failures, "no sample read serve's live heap after the insert")
	}
	r.Pass = len(r.Failures) == 0
}

// Render writes the backlog report as text.
func (r *BacklogReport) Render(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, "gpugov load --backlog: %d pending jobs of the sustained mix (%.0f%% built to wait), run_seconds %g, pool %s, %d projects; label %s=%s\n",
		r.Jobs, 100*r.WaitShare, r.RunSeconds, r.Pool, r.Projects, RunLabel, r.Label)
	fmt.Fprintf(&b, "machine load average (1 min): %.2f at the start, %.2f at the end\n", r.LoadAvgStart, r.LoadAvgEnd)
	fmt.Fprintf(&b, "stored through store.CreateJobs (the API's conversion, %d a transaction) at %s, in %s (%.0f jobs/s); then %s of samples\n\n",
		BacklogBatch, r.InsertStartAt.Round(time.Second), r.InsertTime.Round(time.Millisecond),
		float64(r.Jobs)/max(r.InsertTime.Seconds(), 1e-9), r.Hold)
	fmt.Fprintf(&b, "What this measures: serve holding a backlog of pending rows that its scheduler cycles over, whose workflows its reconciler\n"+
		"starts one after another (one Temporal call each). By the end Temporal counts %d JobWorkflows started since the insert, of %d jobs stored",
		r.WorkflowsCounted, r.Jobs)
	if r.WorkflowsCounted >= int64(r.Jobs) {
		b.WriteString(":\nevery stored job had its workflow by the end.\n\n")
	} else {
		fmt.Fprintf(&b, ":\nthe other pending jobs had no workflow yet, so this is not the memory of %d job workflows waiting.\n\n", r.Jobs)
	}
	fmt.Fprintf(&b, "serve's memory: baseline (median before the insert) RSS %.1f MiB, live heap %.1f MiB; after: peak RSS %.1f MiB, peak live heap %.1f MiB; "+
		"at the end RSS %.1f MiB, live heap %.1f MiB\n",
		mib(float64(r.BaselineRSSBytes)), mib(float64(r.BaselineHeapLiveBytes)), mib(float64(r.PeakRSSBytes)), mib(float64(r.PeakHeapLiveBytes)),
		mib(float64(r.EndRSSBytes)), mib(float64(r.EndHeapLiveBytes)))
	fmt.Fprintf(&b, "pending (submitted or waiting, the whole database): peak %d, at the end %d; %d jobs finished after the insert; "+
		"%d scheduling cycles after it, %.0f ms each on average\n",
		r.PendingPeak, r.PendingEnd, r.FinishedInHold, r.Cycles, r.MeanCycleMillis)
	if err := renderSamples(&b, r.Memory, sampleStride(r.Memory)); err != nil {
		return err
	}
	b.WriteString("\n")
	renderVerdict(&b, r.Pass, r.Failures, fmt.Sprintf("PASS: %d rows stored, memory sampled (a measurement: no bound is checked)", r.LabelledRows))
	_, err := io.WriteString(w, b.String())
	return err
}
