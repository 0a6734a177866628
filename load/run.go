// Package load is the composition root of `gpugov load`: a sustained,
// open-loop load test of a running gpugov serve through its API (loopback,
// bounded in time), followed by a check that nothing was lost (docs/design.md
// §8 "Sustained load"). Each request kind (submit, get, why, list, report,
// cancel) arrives at its own constant rate, whatever the answers take, so a
// slow server shows as latency and requests in flight, not as a lower rate.
// During the run it samples serve's memory (RSS from /proc, the Go heap from
// /metrics); at the end it waits for every accepted job to settle and checks
// each one's row (PostgreSQL), its workflow (Temporal DescribeWorkflow) and
// its final state or wait reason.
package load

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"go.temporal.io/sdk/client"

	"github.com/gpugov/gpugov/api"
	apiclient "github.com/gpugov/gpugov/api/client"
	"github.com/gpugov/gpugov/store"
)

// Defaults of Config, the figures of `make load` (docs/design.md §8).
const (
	DefaultRate        = 50.0 // submissions per second
	DefaultDuration    = 5 * time.Minute
	DefaultGetRate     = 25.0 // GET /v1/jobs/{id} per second
	DefaultWhyRate     = 10.0 // GET /v1/jobs/{id}/events per second
	DefaultListRate    = 2.0  // GET /v1/jobs per second
	DefaultReportRate  = 0.2  // GET /v1/reports/queues per second
	DefaultCancelShare = 0.1  // share of accepted submissions cancelled
	// DefaultCancelDelay bounds the delay (uniform in [0, it)) between a
	// submission's 201 and its cancel: some land on waiting, some on running
	// and some on finished jobs (a 409).
	DefaultCancelDelay = 5 * time.Second
	// DefaultWaitShare is the share of submissions built to wait for good,
	// split evenly between held, an unknown GPU model (no_matching_capacity)
	// and a prerequisite not ready (environment_not_ready).
	DefaultWaitShare = 0.03
	// DefaultRunSeconds is each job's simulated run_seconds.
	DefaultRunSeconds  = 20.0
	DefaultProjects    = 8
	DefaultPool        = "load"
	DefaultMaxInFlight = 4096
	// DefaultDrain bounds the wait, after the load window, for every accepted
	// job to settle (final, or waiting with a reason); the wait ends as soon
	// as all have. When the job pipeline behind the API runs slower than the
	// submissions (on the 2-core development machine about 18 jobs/s against
	// 50, docs/design.md §8 "Sustained load"), the window leaves a backlog
	// that drains at that rate: 3,100 jobs waiting or holding an allocation
	// at the end of a 5-minute window took about 3 minutes. Ten minutes
	// covers a backlog of about 10,000 at that rate.
	DefaultDrain          = 10 * time.Minute
	DefaultSampleInterval = 5 * time.Second
	// DefaultMaxGrowth is the bound on the RSS and live-heap slopes over the
	// second half of the window, in MiB per minute (Trend).
	DefaultMaxGrowth = 4.0
	// DefaultAfterDrain is how long sampling goes on once every accepted
	// job has settled, so that Trend sees the memory given back (six
	// samples at the default interval, and time for a GC).
	DefaultAfterDrain = 30 * time.Second
	// DefaultVerifyConcurrency bounds DescribeWorkflow calls in flight.
	DefaultVerifyConcurrency = 16
)

// UnknownModel is the GPU model the no_matching_capacity share of
// submissions asks for; no inventory has it.
const UnknownModel = "load-no-such-model"

// Config is what Run needs; zero numeric fields take the defaults above
// (CancelShare and WaitShare only when negative: 0 means none).
type Config struct {
	// Client calls the API with an operator's or an admin's token: the load
	// submits for several projects and cancels their jobs.
	Client *apiclient.Client
	// Store and Temporal are the service's own database and Temporal
	// frontend, read (never written) by the final check.
	Store    *store.Store
	Temporal client.Client

	Rate                                   float64
	Duration                               time.Duration
	GetRate, WhyRate, ListRate, ReportRate float64
	CancelShare                            float64
	CancelDelay                            time.Duration
	WaitShare                              float64
	RunSeconds                             float64
	Projects                               int
	Pool                                   string
	MaxInFlight                            int
	Drain                                  time.Duration

	// ServePID is gpugov serve's process ID for RSS samples (0: none, e.g.
	// a test running the service in its own process may pass os.Getpid()).
	ServePID int
	// MetricsURL is serve's /metrics for heap samples ("": none).
	MetricsURL     string
	SampleInterval time.Duration
	// MaxGrowth is the bound of Trend's slopes, in MiB per minute;
	// MaxPerPendingKiB that of its growth per pending job, in KiB.
	MaxGrowth        float64
	MaxPerPendingKiB float64
	// AfterDrain is how long memory is still sampled once every accepted
	// job has settled (Trend's after-drain heap).
	AfterDrain time.Duration
	// CheckTrend makes a breached memory trend fail the run (a short test
	// run is too short for a trend and leaves it false).
	CheckTrend        bool
	VerifyConcurrency int
	// Seed seeds the job mix and the choice of targets.
	Seed uint64
	// Progress receives a line per sample; nil means none.
	Progress io.Writer
}

// withDefaults returns c with its zero values replaced by the defaults.
func (c Config) withDefaults() Config {
	def := func(v *float64, d float64) {
		if *v == 0 {
			*v = d
		}
	}
	def(&c.Rate, DefaultRate)
	def(&c.GetRate, DefaultGetRate)
	def(&c.WhyRate, DefaultWhyRate)
	def(&c.ListRate, DefaultListRate)
	def(&c.ReportRate, DefaultReportRate)
	def(&c.RunSeconds, DefaultRunSeconds)
	def(&c.MaxGrowth, DefaultMaxGrowth)
	def(&c.MaxPerPendingKiB, DefaultMaxPerPendingKiB)
	if c.AfterDrain <= 0 {
		c.AfterDrain = DefaultAfterDrain
	}
	if c.CancelShare < 0 {
		c.CancelShare = DefaultCancelShare
	}
	if c.WaitShare < 0 {
		c.WaitShare = DefaultWaitShare
	}
	if c.Duration <= 0 {
		c.Duration = DefaultDuration
	}
	if c.CancelDelay <= 0 {
		c.CancelDelay = DefaultCancelDelay
	}
	if c.Projects <= 0 {
		c.Projects = DefaultProjects
	}
	if c.Pool == "" {
		c.Pool = DefaultPool
	}
	if c.MaxInFlight <= 0 {
		c.MaxInFlight = DefaultMaxInFlight
	}
	if c.Drain <= 0 {
		c.Drain = DefaultDrain
	}
	if c.SampleInterval <= 0 {
		c.SampleInterval = DefaultSampleInterval
	}
	if c.VerifyConcurrency <= 0 {
		c.VerifyConcurrency = DefaultVerifyConcurrency
	}
	if c.Progress == nil {
		c.Progress = io.Discard
	}
	return c
}

// validate names the first setting out of range.
func (c Config) validate() error {
	switch {
	case c.Client == nil || c.Store == nil || c.Temporal == nil:
		return errors.New("load: Client, Store and Temporal are required")
	case c.Rate < 0 || c.GetRate < 0 || c.WhyRate < 0 || c.ListRate < 0 || c.ReportRate < 0:
		return errors.New("load: rates must not be negative")
	case c.CancelShare > 1 || c.WaitShare > 1:
		return errors.New("load: cancel and wait shares must be in 0..1")
	case !(c.RunSeconds > 0):
		return fmt.Errorf("load: run seconds must be > 0, got %g", c.RunSeconds)
	}
	return nil
}

// NewHTTPClient returns the http.Client a load run's API client should use:
// up to maxConns idle connections kept to the one API host (the default
// transport keeps 2, so an open-loop burst would open and close a
// connection per request) and apiclient.DefaultTimeout per exchange.
func NewHTTPClient(maxConns int) *http.Client {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConns = maxConns
	tr.MaxIdleConnsPerHost = maxConns
	return &http.Client{Transport: tr, Timeout: apiclient.DefaultTimeout}
}

// Run runs the load for cfg.Duration, drains, checks every accepted job and
// returns the report. It returns an error when the API lacks the pool or the
// queues, when the token may not submit for other projects (401/403 on the
// first submissions), or when the final check cannot read the store; lost
// jobs, 5xx answers and a memory trend are findings in the report
// (Report.Pass), not errors.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if err := preflight(ctx, cfg); err != nil {
		return nil, err
	}
	r := &runner{cfg: cfg, rec: newRecorder(), runID: strconv.FormatInt(time.Now().Unix(), 36)}
	rep := &Report{Config: cfg.summary(), LoadAvgStart: readLoad1()}
	r.start = time.Now()
	end := r.start.Add(cfg.Duration)

	sampleCtx, stopSampling := context.WithCancel(ctx)
	sampled := make(chan []MemorySample, 1)
	go func() { sampled <- r.sampleLoop(sampleCtx) }()

	var streams sync.WaitGroup
	for _, st := range r.streams() {
		streams.Add(1)
		go func() {
			defer streams.Done()
			r.stream(ctx, st, end)
		}()
	}
	streams.Wait()
	r.inFlight.Wait() // every answer, and every cancel scheduled by a 201
	rep.Window = cfg.Duration
	rep.Sent = time.Since(r.start)
	rep.Kinds = r.rec.snapshot(cfg.Duration)
	if err := r.abortErr(); err != nil {
		stopSampling()
		<-sampled
		return nil, err
	}

	fmt.Fprintf(cfg.Progress, "load: window over after %s; waiting up to %s for every accepted job to settle\n",
		rep.Sent.Round(time.Second), cfg.Drain)
	ids := r.acceptedIDs()
	drainStart := time.Now()
	settled, err := r.drain(ctx, ids)
	rep.Drain = time.Since(drainStart)
	var settledAt time.Duration
	rep.BacklogLeft = r.backlogLeft
	if err == nil && allSettled(ids, settled) && r.backlogLeft == 0 {
		settledAt = time.Since(r.start)
		fmt.Fprintf(cfg.Progress, "load: every accepted job settled and the backlog drained; sampling serve's memory %s more\n", cfg.AfterDrain)
		sleepUntil(ctx, time.Now().Add(cfg.AfterDrain))
	}
	stopSampling()
	rep.Memory = <-sampled
	rep.LoadAvgEnd = readLoad1()
	if err != nil {
		return nil, err
	}
	rep.Accepted, rep.Deferred = len(ids), int(r.deferred.Load())
	// Read the rows again: jobs went on ending while memory was sampled
	// (or, when the bound ended the drain, while the backlog drained), and
	// a stale pending row against a completed workflow costs the check
	// describeRetries looks.
	if settled, err = r.settlements(ctx, ids); err != nil {
		return nil, err
	}
	if err := r.verify(ctx, ids, settled, rep); err != nil {
		return nil, err
	}
	rep.Trend = computeTrend(rep.Memory, cfg.Duration, settledAt, cfg.MaxGrowth, cfg.MaxPerPendingKiB)
	rep.Pipeline = computePipeline(rep.Memory, cfg.Duration)
	rep.decide(cfg.CheckTrend)
	return rep, nil
}

// preflight checks that the pool and the tier queues exist.
func preflight(ctx context.Context, cfg Config) error {
	qs, err := cfg.Client.Queues(ctx)
	if err != nil {
		return fmt.Errorf("load: read the queues: %w", err)
	}
	have := map[string]bool{}
	for _, q := range qs.Queues {
		have[q.Name] = true
	}
	for _, q := range queues {
		if !have[q] {
			return fmt.Errorf("load: the API has no queue %q (serve creates one per tier in an empty database)", q)
		}
	}
	inv, err := cfg.Client.Inventory(ctx)
	if err != nil {
		return fmt.Errorf("load: read the inventory: %w", err)
	}
	for _, p := range inv.Pools {
		if p.Name == cfg.Pool {
			return nil
		}
	}
	return fmt.Errorf("load: the API has no pool %q (start serve with an inventory holding it)", cfg.Pool)
}

// queues are the queues the load submits to, one per tier (serve's default queues).
var queues = []string{"production", "key-project", "standard", "experiment"}

// runner is one load run in progress.
type runner struct {
	cfg      Config
	rec      *recorder
	runID    string
	start    time.Time
	inFlight sync.WaitGroup
	active   atomic.Int64 // requests in flight
	deferred atomic.Int64 // submissions answered 202

	mu       sync.Mutex
	accepted []string // job IDs answered 201 or 202, in answer order
	// waitsForGood holds the accepted job IDs built to wait for good
	// (WaitShare); backlogLeft is set by drain.
	waitsForGood map[string]bool
	backlogLeft  int
	abort        error // set by a 401/403: the token cannot run the load
}

// stream is one kind's constant-rate arrivals.
type stream struct {
	kind Kind
	rate float64
	// send performs one request; it returns the HTTP status (0: no answer)
	// and the error. ok is false when it had no target (nothing accepted yet).
	send func(ctx context.Context, rng *rand.Rand) (status int, ok bool, err error)
}

// streams returns the arrival streams of the mix; cancels are not a stream
// but follow accepted submissions (see submit).
func (r *runner) streams() []stream {
	c := r.cfg
	return []stream{
		{KindSubmit, c.Rate, r.submit},
		{KindGet, c.GetRate, r.withTarget(func(ctx context.Context, id string) error {
			_, err := c.Client.GetJob(ctx, id)
			return err
		})},
		{KindWhy, c.WhyRate, r.withTarget(func(ctx context.Context, id string) error {
			_, err := c.Client.JobEvents(ctx, id)
			return err
		})},
		{KindList, c.ListRate, func(ctx context.Context, _ *rand.Rand) (int, bool, error) {
			_, err := c.Client.ListJobs(ctx, apiclient.ListOptions{State: "waiting", Limit: 100})
			return status(err), true, err
		}},
		{KindReport, c.ReportRate, func(ctx context.Context, _ *rand.Rand) (int, bool, error) {
			now := time.Now()
			_, err := c.Client.QueueReport(ctx, apiclient.ReportOptions{From: now.Add(-time.Hour), To: now})
			return status(err), true, err
		}},
	}
}

// withTarget adapts a request on one job to a stream's send: the job is
// drawn uniformly from the accepted ones.
func (r *runner) withTarget(do func(ctx context.Context, id string) error) func(context.Context, *rand.Rand) (int, bool, error) {
	return func(ctx context.Context, rng *rand.Rand) (int, bool, error) {
		r.mu.Lock()
		n := len(r.accepted)
		id := ""
		if n > 0 {
			id = r.accepted[rng.IntN(n)]
		}
		r.mu.Unlock()
		if id == "" {
			return 0, false, nil
		}
		err := do(ctx, id)
		return status(err), true, err
	}
}

// status is the HTTP status behind err: 200 for nil, the API's status for
// an *apiclient.Error, 0 (no answer) otherwise.
func status(err error) int {
	if err == nil {
		return http.StatusOK
	}
	if ae, ok := apiclient.AsError(err); ok {
		return ae.Status
	}
	return 0
}

// stream sends st's requests at start + i/rate for every i before end, each
// in its own goroutine, never waiting for an answer (open loop). A request
// due while MaxInFlight are in flight is dropped and counted.
func (r *runner) stream(ctx context.Context, st stream, end time.Time) {
	if st.rate <= 0 {
		return
	}
	rng := rand.New(rand.NewPCG(r.cfg.Seed, uint64(len(st.kind))<<32|uint64(st.kind[0])))
	interval := time.Duration(float64(time.Second) / st.rate)
	for i := 0; ; i++ {
		due := r.start.Add(time.Duration(i) * interval)
		if !due.Before(end) || r.abortErr() != nil || !sleepUntil(ctx, due) {
			return
		}
		if r.active.Load() >= int64(r.cfg.MaxInFlight) {
			r.rec.scheduled(st.kind, "dropped")
			continue
		}
		// Each request gets its own generator, seeded from the stream's, so
		// that concurrent requests never share one.
		reqRng := rand.New(rand.NewPCG(rng.Uint64(), rng.Uint64()))
		r.active.Add(1)
		r.inFlight.Add(1)
		go func() {
			defer r.inFlight.Done()
			defer r.active.Add(-1)
			sent := time.Now()
			code, ok, err := st.send(ctx, reqRng)
			if !ok {
				r.rec.scheduled(st.kind, "no_target")
				return
			}
			r.rec.scheduled(st.kind, "")
			r.rec.answered(st.kind, code, time.Since(due), sent.Sub(due), err)
		}()
	}
}

// submit posts one job of the mix; an accepted one is remembered and, with
// probability CancelShare, cancelled after a delay drawn from [0, CancelDelay).
func (r *runner) submit(ctx context.Context, rng *rand.Rand) (int, bool, error) {
	spec, waits := r.jobSpec(rng)
	job, code, err := r.cfg.Client.Submit(ctx, spec, "")
	if err != nil {
		if code == http.StatusUnauthorized || code == http.StatusForbidden {
			r.setAbort(fmt.Errorf("load: submit: %w (the load submits for %d projects: use an operator or admin token)", err, r.cfg.Projects))
		}
		return status(err), true, err
	}
	if code == http.StatusAccepted {
		r.deferred.Add(1)
	}
	r.accept(job.ID, waits)
	if rng.Float64() < r.cfg.CancelShare {
		delay := time.Duration(rng.Int64N(int64(r.cfg.CancelDelay)))
		r.scheduleCancel(ctx, job.ID, time.Now().Add(delay))
	}
	return code, true, nil
}

// scheduleCancel cancels job id at due, counted as a cancel request whose
// latency runs from due. It runs even after the load window closed (at most
// CancelDelay later); Run waits for it.
func (r *runner) scheduleCancel(ctx context.Context, id string, due time.Time) {
	r.inFlight.Add(1)
	go func() {
		defer r.inFlight.Done()
		if !sleepUntil(ctx, due) {
			return
		}
		if r.active.Load() >= int64(r.cfg.MaxInFlight) {
			r.rec.scheduled(KindCancel, "dropped")
			return
		}
		r.active.Add(1)
		defer r.active.Add(-1)
		r.rec.scheduled(KindCancel, "")
		sent := time.Now()
		_, err := r.cfg.Client.Cancel(ctx, id, "gpugov load: a share of the submitted jobs is cancelled")
		r.rec.answered(KindCancel, status(err), time.Since(due), sent.Sub(due), err)
	}()
}

// jobSpec draws one job of the mix: a tier queue and a project uniformly; 1
// GPU (half of them a 500 milli-GPU share); run_seconds RunSeconds. A
// WaitShare of them waits for good, a third each held, asking for
// UnknownModel, or with a prerequisite not ready (waitsForGood true).
func (r *runner) jobSpec(rng *rand.Rand) (spec *api.JobSpec, waitsForGood bool) {
	spec = &api.JobSpec{
		Project:    fmt.Sprintf("load-%02d", rng.IntN(r.cfg.Projects)),
		Queue:      queues[rng.IntN(len(queues))],
		Resources:  api.ResourceSpec{Pool: r.cfg.Pool, GPUs: 1},
		RunSeconds: r.cfg.RunSeconds,
	}
	if rng.IntN(2) == 0 {
		spec.Resources.GPUMilli = 500
	}
	if rng.Float64() < r.cfg.WaitShare {
		switch rng.IntN(3) {
		case 0:
			spec.Hold = true
		case 1:
			spec.Resources.GPUModels = []string{UnknownModel}
		default:
			spec.Prerequisites = []api.PrerequisiteSpec{{Name: "dataset", Ready: false, Message: "gpugov load: never ready"}}
		}
		waitsForGood = true
	}
	return spec, waitsForGood
}

func (r *runner) setAbort(err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.abort == nil {
		r.abort = err
	}
}

func (r *runner) abortErr() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.abort
}

// acceptedIDs returns a copy of the accepted job IDs.
func (r *runner) acceptedIDs() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.accepted...)
}

// sampleLoop samples serve's memory every SampleInterval until ctx ends,
// writing a progress line per sample, and returns the samples.
func (r *runner) sampleLoop(ctx context.Context) []MemorySample {
	hc := &http.Client{Timeout: 10 * time.Second}
	var out []MemorySample
	tick := time.NewTicker(r.cfg.SampleInterval)
	defer tick.Stop()
	for {
		s := MemorySample{At: time.Since(r.start), Load1: readLoad1()}
		var errs []error
		if r.cfg.ServePID > 0 {
			rss, err := ReadRSS(r.cfg.ServePID)
			s.RSSBytes = rss
			errs = append(errs, err)
		}
		if r.cfg.MetricsURL != "" {
			m, err := ReadHeap(ctx, hc, r.cfg.MetricsURL)
			s.HeapLiveBytes, s.HeapInuseBytes = int64(m["go_gc_heap_live_bytes"]), int64(m["go_memstats_heap_inuse_bytes"])
			s.Goroutines = int64(m["go_goroutines"])
			s.Pipeline.Cycles, s.Pipeline.CycleSeconds = int64(m[metricCycleCount]), m[metricCycleSum]
			errs = append(errs, err)
		}
		errs = append(errs, r.samplePipeline(ctx, &s.Pipeline))
		if ctx.Err() != nil {
			return out
		}
		out = append(out, s)
		r.mu.Lock()
		accepted := len(r.accepted)
		r.mu.Unlock()
		p := s.Pipeline
		line := fmt.Sprintf("load %6.1fs  accepted %6d  in flight %4d  rss %7.1f MiB  heap live %6.1f MiB  goroutines %5d  load1 %.2f"+
			"  | finished %6d  pending %6d  holding %5d  cycles %5d",
			s.At.Seconds(), accepted, r.active.Load(), mib(float64(s.RSSBytes)), mib(float64(s.HeapLiveBytes)), s.Goroutines, s.Load1,
			p.Finished, p.Pending, p.Holding, p.Cycles)
		if err := errors.Join(errs...); err != nil {
			line += "  (sample: " + err.Error() + ")"
		}
		fmt.Fprintln(r.cfg.Progress, line)
		select {
		case <-ctx.Done():
			return out
		case <-tick.C:
		}
	}
}

// samplePipeline counts the database's jobs by state group into p.
func (r *runner) samplePipeline(ctx context.Context, p *PipelineSample) error {
	counts, err := r.cfg.Store.JobStateCounts(ctx)
	if err != nil {
		return err
	}
	for _, c := range counts {
		switch {
		case c.State.Final():
			p.Finished += c.Count
		case c.State.Pending():
			p.Pending += c.Count
		default:
			p.Holding += c.Count
		}
	}
	return nil
}

// sleepUntil sleeps until t and reports false when ctx ended first.
func sleepUntil(ctx context.Context, t time.Time) bool {
	d := time.Until(t)
	if d <= 0 {
		return ctx.Err() == nil
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C:
		return true
	case <-ctx.Done():
		return false
	}
}
