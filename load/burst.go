package load

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.temporal.io/api/serviceerror"
	"go.temporal.io/api/workflowservice/v1"

	"github.com/gpugov/gpugov/internal/temporalx"
	"github.com/gpugov/gpugov/store"
	"github.com/gpugov/gpugov/workflows"
)

// Defaults and bounds of a burst (docs/design.md §8 "Bursts and backlogs").
const (
	// DefaultBurstConcurrency is how many submissions a burst keeps in flight.
	DefaultBurstConcurrency = 64
	// DefaultFloorRate is the floor the predicted drain time divides by, in
	// lifecycles per second: the median floor/s of `make bench-throughput`
	// (BenchmarkService/lifecycle, e2e/floor_test.go) on the 2-core
	// development machine at a load average of 0.8–2.3 (docs/design.md §8
	// "Throughput against the floor"). Measure the machine's own and pass it
	// as --floor-rate.
	DefaultFloorRate = 27.3
	// MinStartBound is the least bound on the time until every accepted
	// job's workflow started: the bound is max(2 × predicted, MinStartBound).
	MinStartBound = time.Minute
	// RunLabel is the environment variable every job of a burst or a
	// backlog carries in its spec, set to the run's label ("burst-<id>",
	// "backlog-<id>"), so that the store can count the run's rows
	// (store.JobIDsWithEnv). Simulated jobs never read it.
	RunLabel = "GPUGOV_LOAD_RUN"
)

// retry429 is the pause before a submission answered 429 (the token's rate
// limit: nothing was stored) is sent again.
const retry429 = 200 * time.Millisecond

// startPollPause is the pause between two passes over the jobs whose
// workflow was not seen yet.
const startPollPause = time.Second

// visibilityWait bounds the wait for Temporal's visibility count of the
// burst's workflows to reach the accepted count (it lags the starts).
const visibilityWait = 30 * time.Second

// BurstConfig is what RunBurst needs: Config's connections, job mix (Pool,
// Projects, RunSeconds, WaitShare; no cancels), memory sampling, Drain and
// VerifyConcurrency (its rates, Duration and cancel settings are not used),
// and the burst itself.
type BurstConfig struct {
	Config
	// Jobs is the number of submissions (> 0).
	Jobs int
	// Concurrency is how many are in flight at once (closed loop); ≤ 0:
	// DefaultBurstConcurrency.
	Concurrency int
	// FloorRate is the floor, in lifecycles per second, the predicted drain
	// time Jobs ÷ FloorRate comes from; ≤ 0: DefaultFloorRate.
	FloorRate float64
}

// BurstPrediction is the drain time the floor predicts for n jobs at
// floorRate lifecycles per second, and the bound on the time until every
// accepted job's workflow started: max(2 × predicted, MinStartBound).
func BurstPrediction(n int, floorRate float64) (predicted, startBound time.Duration) {
	predicted = time.Duration(float64(n) / floorRate * float64(time.Second))
	return predicted, max(2*predicted, MinStartBound)
}

// BurstReport is the outcome of a burst. Times named "…At" run from the
// first submission.
type BurstReport struct {
	Jobs        int     `json:"jobs"`
	Concurrency int     `json:"concurrency"`
	FloorRate   float64 `json:"floor_rate_per_s"`
	Pool        string  `json:"pool"`
	Projects    int     `json:"projects"`
	WaitShare   float64 `json:"wait_share"`
	RunSeconds  float64 `json:"run_seconds"`
	Label       string  `json:"label"`
	// LoadAvgStart and LoadAvgEnd are the machine's 1-minute load averages.
	LoadAvgStart float64 `json:"load_avg_start"`
	LoadAvgEnd   float64 `json:"load_avg_end"`

	// Submit counts every POST /v1/jobs sent (a submission answered 429 is
	// sent again after 200 ms, and each attempt counts); its latencies run
	// from each request's send to its answer, in milliseconds.
	Submit KindStats `json:"submit"`
	// Accepted is the number of submissions answered 201 or 202 (Deferred
	// of them 202: stored, start left to the reconciler); SendTime the
	// time from the first submission to the last answer; AcceptPerSecond
	// Accepted over SendTime.
	Accepted        int           `json:"accepted"`
	Deferred        int           `json:"deferred_202"`
	SendTime        time.Duration `json:"send_ns"`
	AcceptPerSecond float64       `json:"accept_per_s"`

	// MissingAtAnswer are accepted IDs without a row in the one query made
	// right after the last answer: durability at answer time.
	MissingAtAnswer []string `json:"missing_at_answer"`

	// Predicted is Jobs ÷ FloorRate; StartBound max(2 × Predicted, 1 min).
	Predicted  time.Duration `json:"predicted_ns"`
	StartBound time.Duration `json:"start_bound_ns"`
	// NotStarted are accepted IDs whose workflow was never seen (polled with
	// DescribeWorkflow until the drain bound). LastStartedAt is the latest
	// workflow StartTime (Temporal's clock, the same machine's) since the
	// first submission, LastStartedAfterAnswer the same since the last
	// answer, and LastSeenAt when the poll saw that all had started.
	NotStarted             []string      `json:"not_started"`
	LastStartedAt          time.Duration `json:"last_started_at_ns"`
	LastStartedAfterAnswer time.Duration `json:"last_started_after_answer_ns"`
	LastSeenAt             time.Duration `json:"last_seen_at_ns"`
	// AllSettled says whether, before the drain bound Drain, every accepted
	// job was settled (final, or waiting with a reason) and none was pending
	// but those built to wait for good, and SettledAt when the drain saw it
	// (the bound when not); BacklogLeft is the pending jobs not built to
	// wait at the drain's last look.
	AllSettled  bool          `json:"all_settled"`
	BacklogLeft int           `json:"backlog_left"`
	SettledAt   time.Duration `json:"settled_at_ns"`
	Drain       time.Duration `json:"drain_bound_ns"`

	// LabelledRows is how many rows carry the run's label; ExtraRows those
	// of them not among the accepted IDs (a submission stored twice, or
	// stored without a 2xx); DuplicateAnswers how many accepted IDs were
	// answered more than once. WorkflowsCounted is Temporal's visibility
	// count of JobWorkflows started since the first submission (-1: not
	// read): more than Accepted means workflows beyond one per job.
	LabelledRows     int      `json:"labelled_rows"`
	ExtraRows        []string `json:"extra_rows"`
	DuplicateAnswers int      `json:"duplicate_answers"`
	WorkflowsCounted int64    `json:"workflows_counted"`

	// The final check of every accepted job, as in Report.
	MissingRows      []string       `json:"missing_rows"`
	MissingWorkflows []string       `json:"missing_workflows"`
	Unsettled        []string       `json:"unsettled"`
	WorkflowMismatch []string       `json:"workflow_mismatch"`
	States           map[string]int `json:"states"`
	Reasons          map[string]int `json:"reasons"`
	Workflows        map[string]int `json:"workflows"`
	VerifyTime       time.Duration  `json:"verify_ns"`

	// Memory is serve's memory from the first submission to the end of the
	// drain; PeakRSSBytes and PeakHeapLiveBytes its maxima; Cycles and
	// MeanCycleMillis the scheduling cycles over it.
	Memory            []MemorySample `json:"memory"`
	PeakRSSBytes      int64          `json:"peak_rss_bytes"`
	PeakHeapLiveBytes int64          `json:"peak_heap_live_bytes"`
	Cycles            int64          `json:"cycles"`
	MeanCycleMillis   float64        `json:"mean_cycle_ms"`

	// Failures says why Pass is false, one line each.
	Failures []string `json:"failures"`
	Pass     bool     `json:"pass"`
}

// RunBurst submits Jobs jobs of the sustained mix without cancels as fast as
// the API takes them, Concurrency in flight (closed loop), then checks:
// (a) right after the last answer, every accepted job's row, in one query;
// (b) how long until every accepted job's workflow started (DescribeWorkflow
// of the not yet seen, VerifyConcurrency in flight, a pass a second) and
// until all settled (the drain of Run), against Jobs ÷ FloorRate;
// (c) one row per submission (the rows carrying the run's label are the
// accepted IDs) and no more JobWorkflows started than jobs accepted;
// (d) the accept rate, submit latency, and serve's memory (the sampler of
// Run). Drain zero bounds the wait at max(DefaultDrain, 3 × predicted).
//
// The run fails (BurstReport.Pass false) when a row is missing at answer
// time or at the end, a job is lost (no row, no workflow, or a workflow that
// failed or disagrees with its job) or duplicated (an extra labelled row, an
// ID answered twice, more workflows than jobs), any submission was answered
// 5xx, another 4xx than 429, or not at all, none was accepted, or not every
// accepted job's workflow started within max(2 × predicted, 60 s) of the
// first submission. Jobs still unsettled at the drain bound are reported,
// not failed. It returns an error for bad settings, a missing pool or
// queues, a token that may not submit for other projects, or a store or
// Temporal failure of the checks.
func RunBurst(ctx context.Context, bc BurstConfig) (*BurstReport, error) {
	if bc.Jobs <= 0 {
		return nil, fmt.Errorf("load: burst jobs must be > 0, got %d", bc.Jobs)
	}
	if bc.Concurrency <= 0 {
		bc.Concurrency = DefaultBurstConcurrency
	}
	if !(bc.FloorRate > 0) {
		bc.FloorRate = DefaultFloorRate
	}
	predicted, bound := BurstPrediction(bc.Jobs, bc.FloorRate)
	if bc.Drain <= 0 {
		bc.Drain = max(DefaultDrain, 3*predicted)
	}
	cfg := bc.Config.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if err := preflight(ctx, cfg); err != nil {
		return nil, err
	}
	r := &runner{cfg: cfg, rec: newRecorder(), runID: strconv.FormatInt(time.Now().Unix(), 36)}
	rep := &BurstReport{Jobs: bc.Jobs, Concurrency: bc.Concurrency, FloorRate: bc.FloorRate, Pool: cfg.Pool,
		Projects: cfg.Projects, WaitShare: cfg.WaitShare, RunSeconds: cfg.RunSeconds, Label: "burst-" + r.runID,
		Predicted: predicted, StartBound: bound, Drain: cfg.Drain, WorkflowsCounted: -1, LoadAvgStart: readLoad1()}
	fmt.Fprintf(cfg.Progress, "load: burst of %d submissions, %d in flight; predicted drain %s at %g lifecycles/s, start bound %s\n",
		bc.Jobs, bc.Concurrency, predicted.Round(time.Second), bc.FloorRate, bound.Round(time.Second))

	r.start = time.Now()
	sampleCtx, stopSampling := context.WithCancel(ctx)
	sampled := make(chan []MemorySample, 1)
	go func() { sampled <- r.sampleLoop(sampleCtx) }()
	stop := func() []MemorySample {
		stopSampling()
		return <-sampled
	}

	r.burst(ctx, bc.Jobs, bc.Concurrency, rep.Label)
	lastAnswer := time.Now()
	rep.SendTime = lastAnswer.Sub(r.start)
	if err := r.abortErr(); err != nil {
		stop()
		return nil, err
	}
	ids := r.acceptedIDs()
	rep.Accepted, rep.Deferred = len(ids), int(r.deferred.Load())
	rep.AcceptPerSecond = float64(rep.Accepted) / rep.SendTime.Seconds()
	rep.Submit = r.rec.snapshot(rep.SendTime)[0]

	// (a) Durability at answer time: every 201's row, in one query.
	rows, err := cfg.Store.JobSettlements(ctx, ids)
	if err != nil {
		stop()
		return nil, fmt.Errorf("load: %w", err)
	}
	found := make([]string, len(rows))
	for i, row := range rows {
		found[i] = row.ID
	}
	rep.MissingAtAnswer = missingIDs(ids, found)
	fmt.Fprintf(cfg.Progress, "load: %d accepted in %s (%.1f/s); %d rows missing at answer time; waiting up to %s for the workflows and the settling\n",
		rep.Accepted, rep.SendTime.Round(time.Millisecond), rep.AcceptPerSecond, len(rep.MissingAtAnswer), cfg.Drain)

	// (b) Every workflow started, and every job settled, watched together.
	deadline := time.Now().Add(cfg.Drain)
	var (
		wg                  sync.WaitGroup
		lastStart, lastSeen time.Time
		notStarted          []string
		startErr, drainErr  error
		settled             map[string]store.JobSettlement
		settledAt           time.Time
	)
	wg.Add(2)
	go func() {
		defer wg.Done()
		lastStart, lastSeen, notStarted, startErr = r.awaitStarts(ctx, ids, deadline)
	}()
	go func() {
		defer wg.Done()
		settled, drainErr = r.drain(ctx, ids)
		settledAt = time.Now()
	}()
	wg.Wait()
	if err := errors.Join(startErr, drainErr); err != nil {
		stop()
		return nil, err
	}
	rep.NotStarted = notStarted
	if len(ids) > 0 && len(notStarted) == 0 {
		rep.LastStartedAt = lastStart.Sub(r.start)
		rep.LastStartedAfterAnswer = lastStart.Sub(lastAnswer)
		rep.LastSeenAt = lastSeen.Sub(r.start)
	}
	rep.SettledAt = settledAt.Sub(r.start)
	rep.BacklogLeft = r.backlogLeft
	rep.AllSettled = allSettled(ids, settled) && rep.BacklogLeft == 0

	// The final check of every job (Run's), then one row and one workflow each.
	var check Report
	if err := r.verify(ctx, ids, settled, &check); err != nil {
		stop()
		return nil, err
	}
	rep.MissingRows, rep.MissingWorkflows, rep.Unsettled, rep.WorkflowMismatch = check.MissingRows, check.MissingWorkflows,
		check.Unsettled, check.WorkflowMismatch
	rep.States, rep.Reasons, rep.Workflows, rep.VerifyTime = check.States, check.Reasons, check.Workflows, check.VerifyTime
	labelled, err := cfg.Store.JobIDsWithEnv(ctx, RunLabel, rep.Label)
	if err != nil {
		stop()
		return nil, fmt.Errorf("load: %w", err)
	}
	rep.LabelledRows = len(labelled)
	rep.ExtraRows, rep.DuplicateAnswers = extraAndDuplicates(ids, labelled)
	rep.WorkflowsCounted, err = r.countWorkflows(ctx, r.start.Add(-time.Second), int64(len(ids)))
	if err != nil {
		stop()
		return nil, err
	}
	rep.Memory = stop()
	rep.LoadAvgEnd = readLoad1()
	rep.PeakRSSBytes, rep.PeakHeapLiveBytes, rep.Cycles, rep.MeanCycleMillis = memorySummary(rep.Memory)
	rep.decide()
	return rep, nil
}

// burst sends n submissions with conc in flight; each accepted ID is
// recorded in r.accepted, each answer in r.rec.
func (r *runner) burst(ctx context.Context, n, conc int, label string) {
	var next atomic.Int64
	var wg sync.WaitGroup
	for range conc {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := next.Add(1) - 1
				if i >= int64(n) || ctx.Err() != nil || r.abortErr() != nil {
					return
				}
				r.burstOne(ctx, i, label)
			}
		}()
	}
	wg.Wait()
}

// burstOne submits job i of the mix (its own generator, seeded from Seed and
// i), sent again after retry429 for as long as it is answered 429.
func (r *runner) burstOne(ctx context.Context, i int64, label string) {
	rng := rand.New(rand.NewPCG(r.cfg.Seed, uint64(i)))
	spec, waits := r.jobSpec(rng)
	spec.Env = map[string]string{RunLabel: label}
	for {
		r.rec.scheduled(KindSubmit, "")
		r.active.Add(1)
		sent := time.Now()
		job, code, err := r.cfg.Client.Submit(ctx, spec, "")
		lat := time.Since(sent)
		r.active.Add(-1)
		st := code
		if err != nil {
			st = status(err)
		}
		r.rec.answered(KindSubmit, st, lat, 0, err)
		switch {
		case st == http.StatusTooManyRequests:
			if !sleepUntil(ctx, time.Now().Add(retry429)) {
				return
			}
			continue
		case st == http.StatusUnauthorized || st == http.StatusForbidden:
			r.setAbort(fmt.Errorf("load: submit: %w (the load submits for %d projects: use an operator or admin token)", err, r.cfg.Projects))
		case err == nil:
			if code == http.StatusAccepted {
				r.deferred.Add(1)
			}
			r.accept(job.ID, waits)
		}
		return
	}
}

// accept records an accepted job ID, and whether it was built to wait for
// good (the drain does not wait for those to leave the pending states).
func (r *runner) accept(id string, waitsForGood bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.accepted = append(r.accepted, id)
	if waitsForGood {
		if r.waitsForGood == nil {
			r.waitsForGood = map[string]bool{}
		}
		r.waitsForGood[id] = true
	}
}

// awaitStarts describes job/<id> of every ID not seen yet, VerifyConcurrency
// at a time, a pass every startPollPause, until all were seen or deadline.
// It returns the latest workflow StartTime, when the poll saw the last one,
// and the IDs never seen (sorted). A failure other than not-found is an error.
func (r *runner) awaitStarts(ctx context.Context, ids []string, deadline time.Time) (lastStart, lastSeen time.Time, notSeen []string, err error) {
	unseen := slices.Clone(ids)
	for pass := 1; ; pass++ {
		t0 := time.Now()
		var (
			mu       sync.Mutex
			still    []string
			firstErr error
		)
		r.eachID(ctx, unseen, func(id string) {
			d, err := r.cfg.Temporal.DescribeWorkflow(ctx, temporalx.JobWorkflowID(id), "")
			var nf *serviceerror.NotFound
			mu.Lock()
			defer mu.Unlock()
			switch {
			case errors.As(err, &nf):
				still = append(still, id)
			case err != nil:
				still = append(still, id)
				if firstErr == nil {
					firstErr = fmt.Errorf("load: describe workflow of job %s: %w", id, err)
				}
			default:
				if st := d.RawResponse.GetWorkflowExecutionInfo().GetStartTime().AsTime(); st.After(lastStart) {
					lastStart = st
				}
			}
		})
		if firstErr == nil {
			firstErr = ctx.Err()
		}
		if firstErr != nil {
			return lastStart, lastSeen, nil, firstErr
		}
		unseen = still
		fmt.Fprintf(r.cfg.Progress, "load: workflows pass %d: %d of %d started (pass %s)\n",
			pass, len(ids)-len(unseen), len(ids), time.Since(t0).Round(time.Millisecond))
		if len(unseen) == 0 {
			return lastStart, time.Now(), nil, nil
		}
		if !time.Now().Before(deadline) {
			slices.Sort(unseen)
			return lastStart, lastSeen, unseen, nil
		}
		if !sleepUntil(ctx, time.Now().Add(startPollPause)) {
			return lastStart, lastSeen, nil, ctx.Err()
		}
	}
}

// countWorkflows returns Temporal's visibility count of JobWorkflows started
// at or after since, read again (visibility lags the starts) until it
// reaches want or visibilityWait passed.
func (r *runner) countWorkflows(ctx context.Context, since time.Time, want int64) (int64, error) {
	q := fmt.Sprintf("WorkflowType = '%s' AND StartTime >= '%s'", workflows.JobWorkflowName, since.UTC().Format(time.RFC3339Nano))
	end := time.Now().Add(visibilityWait)
	for {
		resp, err := r.cfg.Temporal.CountWorkflow(ctx, &workflowservice.CountWorkflowExecutionsRequest{Query: q})
		if err != nil {
			return -1, fmt.Errorf("load: count workflows (%s): %w", q, err)
		}
		if n := resp.GetCount(); n >= want || !time.Now().Before(end) {
			return n, nil
		}
		if !sleepUntil(ctx, time.Now().Add(time.Second)) {
			return -1, ctx.Err()
		}
	}
}

// missingIDs returns the IDs (sorted, once each) that found lacks.
func missingIDs(ids, found []string) []string {
	have := make(map[string]bool, len(found))
	for _, id := range found {
		have[id] = true
	}
	var out []string
	for _, id := range ids {
		if !have[id] {
			out = append(out, id)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// extraAndDuplicates returns the labelled rows not among the accepted IDs
// (sorted) and how many accepted IDs repeat an earlier one.
func extraAndDuplicates(accepted, labelled []string) (extra []string, dups int) {
	seen := make(map[string]bool, len(accepted))
	for _, id := range accepted {
		if seen[id] {
			dups++
		}
		seen[id] = true
	}
	for _, id := range labelled {
		if !seen[id] {
			extra = append(extra, id)
		}
	}
	slices.Sort(extra)
	return extra, dups
}

// memorySummary returns the peak RSS and live heap of the samples, and the
// scheduling cycles between the first and the last with their mean
// duration in milliseconds.
func memorySummary(samples []MemorySample) (peakRSS, peakHeap, cycles int64, meanMillis float64) {
	for _, s := range samples {
		peakRSS, peakHeap = max(peakRSS, s.RSSBytes), max(peakHeap, s.HeapLiveBytes)
	}
	if n := len(samples); n > 1 {
		first, last := samples[0].Pipeline, samples[n-1].Pipeline
		cycles = last.Cycles - first.Cycles
		if cycles > 0 {
			meanMillis = 1000 * (last.CycleSeconds - first.CycleSeconds) / float64(cycles)
		}
	}
	return peakRSS, peakHeap, cycles, meanMillis
}

// decide fills Failures and Pass by the rule of RunBurst.
func (r *BurstReport) decide() {
	r.Failures = nil
	add := func(format string, args ...any) { r.Failures = append(r.Failures, fmt.Sprintf(format, args...)) }
	if n := len(r.MissingAtAnswer); n > 0 {
		add("%d accepted jobs had no row right after the last answer (not durable at answer time): %s", n, head(r.MissingAtAnswer))
	}
	addLossFindings(add, r.MissingRows, r.MissingWorkflows, r.WorkflowMismatch)
	if n := len(r.ExtraRows); n > 0 {
		add("%d rows carry the run's label but were not answered 2xx (duplicated or unacknowledged): %s", n, head(r.ExtraRows))
	}
	if r.DuplicateAnswers > 0 {
		add("%d accepted job IDs were answered more than once", r.DuplicateAnswers)
	}
	if r.WorkflowsCounted > int64(r.Accepted) {
		add("Temporal counts %d JobWorkflows started since the first submission for %d accepted jobs", r.WorkflowsCounted, r.Accepted)
	}
	s := r.Submit
	if s.ServerErr > 0 {
		add("submit: %d answers 5xx (%s)", s.ServerErr, strings.Join(s.Errors, "; "))
	}
	if s.NoAnswer > 0 {
		add("submit: %d requests got no answer (%s)", s.NoAnswer, strings.Join(s.Errors, "; "))
	}
	if s.ClientErr > 0 || s.Conflict > 0 {
		add("submit: %d answers 4xx other than 429 (%s)", s.ClientErr+s.Conflict, strings.Join(s.Errors, "; "))
	}
	if r.Accepted == 0 {
		add("no submission was accepted")
	}
	switch {
	case len(r.NotStarted) > 0:
		add("%d accepted jobs' workflows never started within the drain bound %s: %s", len(r.NotStarted), r.Drain, head(r.NotStarted))
	case r.LastStartedAt > r.StartBound:
		add("the last workflow started %s after the first submission, over the bound max(2 × predicted %s, %s) = %s",
			r.LastStartedAt.Round(time.Millisecond), r.Predicted.Round(time.Second), MinStartBound, r.StartBound.Round(time.Second))
	}
	r.Pass = len(r.Failures) == 0
}

// Render writes the burst report as text.
func (r *BurstReport) Render(w io.Writer) error {
	var b strings.Builder
	s := r.Submit
	fmt.Fprintf(&b, "gpugov load --burst: %d submissions as fast as the API takes them, %d in flight (closed loop); the sustained mix without cancels "+
		"(%.0f%% built to wait), run_seconds %g, pool %s, %d projects; label %s=%s\n",
		r.Jobs, r.Concurrency, 100*r.WaitShare, r.RunSeconds, r.Pool, r.Projects, RunLabel, r.Label)
	fmt.Fprintf(&b, "machine load average (1 min): %.2f at the start, %.2f at the end\n\n", r.LoadAvgStart, r.LoadAvgEnd)
	fmt.Fprintf(&b, "submissions: %d accepted (%d of them 202) in %s from the first send to the last answer: %.1f accepted/s\n",
		r.Accepted, r.Deferred, r.SendTime.Round(time.Millisecond), r.AcceptPerSecond)
	fmt.Fprintf(&b, "  requests %d: 2xx %d, 429 %d (sent again after %s), other 4xx %d, 5xx %d, no answer %d; latency p50 %.1f ms, p99 %.1f ms, max %.1f ms\n",
		s.Sent, s.OK, s.TooMany, retry429, s.ClientErr+s.Conflict, s.ServerErr, s.NoAnswer, s.P50ms, s.P99ms, s.Maxms)
	fmt.Fprintf(&b, "durable at answer time: %d of %d rows found by one query right after the last answer (%d missing)\n\n",
		r.Accepted-len(r.MissingAtAnswer), r.Accepted, len(r.MissingAtAnswer))

	fmt.Fprintf(&b, "floor %g lifecycles/s: predicted drain %d ÷ %g = %s; bound on all started max(2 × predicted, %s) = %s\n",
		r.FloorRate, r.Jobs, r.FloorRate, r.Predicted.Round(time.Second), MinStartBound, r.StartBound.Round(time.Second))
	if len(r.NotStarted) == 0 && r.Accepted > 0 {
		fmt.Fprintf(&b, "  all %d workflows started: the last %s after the first submission (%s after the last answer; %.2f × predicted), "+
			"seen by the poll at %s\n", r.Accepted, r.LastStartedAt.Round(time.Millisecond), r.LastStartedAfterAnswer.Round(time.Millisecond),
			ratio(r.LastStartedAt, r.Predicted), r.LastSeenAt.Round(time.Millisecond))
	} else {
		fmt.Fprintf(&b, "  %d of %d workflows never started within the drain bound %s\n", len(r.NotStarted), r.Accepted, r.Drain)
	}
	if r.AllSettled {
		fmt.Fprintf(&b, "  all settled, none pending but those built to wait, %s after the first submission (%.2f × predicted)\n", r.SettledAt.Round(100*time.Millisecond), ratio(r.SettledAt, r.Predicted))
	} else {
		fmt.Fprintf(&b, "  NOT all settled at the drain bound (%s after the first submission; %d pending not built to wait); reported, not failed\n",
			r.SettledAt.Round(time.Second), r.BacklogLeft)
	}
	fmt.Fprintf(&b, "one each: %d rows carry the label (%d not answered 2xx), %d IDs answered twice; Temporal counts %d JobWorkflows started since the first submission\n",
		r.LabelledRows, len(r.ExtraRows), r.DuplicateAnswers, r.WorkflowsCounted)
	fmt.Fprintf(&b, "final check (%s): lost %d (no row %d, no workflow %d); unsettled %d; workflow mismatches %d\n",
		r.VerifyTime.Round(time.Second), len(r.MissingRows)+len(r.MissingWorkflows), len(r.MissingRows), len(r.MissingWorkflows),
		len(r.Unsettled), len(r.WorkflowMismatch))
	fmt.Fprintf(&b, "  job states: %s\n  wait reasons of the pending: %s\n  workflows: %s\n\n", counts(r.States), counts(r.Reasons), counts(r.Workflows))

	fmt.Fprintf(&b, "serve's memory: peak RSS %.1f MiB, peak live heap %.1f MiB over %d samples; %d scheduling cycles, %.0f ms each on average\n",
		mib(float64(r.PeakRSSBytes)), mib(float64(r.PeakHeapLiveBytes)), len(r.Memory), r.Cycles, r.MeanCycleMillis)
	if err := renderSamples(&b, r.Memory, sampleStride(r.Memory)); err != nil {
		return err
	}
	b.WriteString("\n")
	renderVerdict(&b, r.Pass, r.Failures, "PASS: every 201 durable at answer time, every workflow started within the bound, nothing lost or duplicated, no 5xx")
	_, err := io.WriteString(w, b.String())
	return err
}

// ratio is a ÷ b (0 when b is 0).
func ratio(a, b time.Duration) float64 {
	if b == 0 {
		return 0
	}
	return float64(a) / float64(b)
}
