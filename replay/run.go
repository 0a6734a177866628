package replay

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/gpugov/gpugov/api"
	apiclient "github.com/gpugov/gpugov/api/client"
	"github.com/gpugov/gpugov/internal/vocab"
)

// Defaults of Config.
const (
	// DefaultWait is how long, after the last submission and cancellation, the
	// replay waits for the jobs to settle (every one ended, or waiting with a
	// reason and unchanged for SettleTime) before reporting anyway.
	DefaultWait = 3 * time.Minute
	// DefaultConcurrency bounds the submissions in flight.
	DefaultConcurrency = 16
	// DefaultPollInterval is the time between two looks at the live jobs. It
	// is short because a look is how the replay sees a job that was placed
	// without ever waiting for a reason (see Result.StartsEstimated).
	DefaultPollInterval = 200 * time.Millisecond
	// DefaultProgressInterval is the time between two progress lines.
	DefaultProgressInterval = 5 * time.Second
	// DefaultSettleTime is how long every remaining job must wait, unchanged,
	// for the replay to take the jobs as settled: twice serve's default cycle
	// interval, so that at least one timer-driven cycle has looked at them.
	DefaultSettleTime = 10 * time.Second
)

// Submission retries: a 5xx, 429 or no answer is retried with the same
// Idempotency-Key, which makes the retry safe.
const (
	maxSubmitAttempts = 8
	firstRetryDelay   = 200 * time.Millisecond
	maxRetryDelay     = 5 * time.Second
)

// liveStates are the job states of a job that has not ended.
var liveStates = []vocab.JobState{vocab.JobSubmitted, vocab.JobWaiting, vocab.JobPlaced, vocab.JobRunning}

// Config is what Run needs.
type Config struct {
	// Client calls the API; its token must be an operator's or an admin's,
	// because the replay submits for every project and cancels their jobs.
	Client *apiclient.Client
	// Submissions, ordered by SubmitAt (as Build returns them).
	Submissions []Submission
	// Speed is the compression the submissions were built with; the report
	// scales the trace's own waits by it. ≤ 0 means DefaultSpeed.
	Speed float64
	// Pool is the pool the jobs ask for; Run checks that the API has it.
	Pool string
	// Wait bounds the wait for the jobs to settle; 0 means DefaultWait.
	Wait time.Duration
	// SettleTime is how long the remaining jobs must wait unchanged to count
	// as settled; 0 means DefaultSettleTime.
	SettleTime time.Duration
	// Concurrency bounds submissions in flight; 0 means DefaultConcurrency.
	Concurrency int
	// PollInterval is the time between looks at live jobs; 0 means DefaultPollInterval.
	PollInterval time.Duration
	// ProgressInterval is the time between progress lines; 0 means DefaultProgressInterval.
	ProgressInterval time.Duration
	// Progress receives progress lines; nil means none.
	Progress io.Writer
	// TemporalUI is the Temporal UI's base URL (http://127.0.0.1:8233) the
	// report links the preemption workflows to; "" leaves the links out.
	TemporalUI string
}

// withDefaults returns c with its zero values replaced by the defaults.
func (c Config) withDefaults() Config {
	if c.Speed <= 0 {
		c.Speed = DefaultSpeed
	}
	if c.Wait <= 0 {
		c.Wait = DefaultWait
	}
	if c.SettleTime <= 0 {
		c.SettleTime = DefaultSettleTime
	}
	if c.Concurrency <= 0 {
		c.Concurrency = DefaultConcurrency
	}
	if c.PollInterval <= 0 {
		c.PollInterval = DefaultPollInterval
	}
	if c.ProgressInterval <= 0 {
		c.ProgressInterval = DefaultProgressInterval
	}
	if c.Progress == nil {
		c.Progress = io.Discard
	}
	return c
}

// Run replays the submissions against the API and returns the result with
// its queue report. It first checks that the API has the pool and a queue for
// every tier used; then submits each job at its time (retrying 5xx answers
// with the same key), cancels never-scheduled pods at their deletion time,
// looks at the live jobs every PollInterval (a progress line every
// ProgressInterval), waits for the jobs to settle (every one ended, or waiting
// with a reason and unchanged for SettleTime) or Wait to pass, and reads
// every job and its wait events back for the report.
//
// It returns an error when the API is unreachable or lacks the pool or a
// queue, when the token may not submit (401/403), or when reading the jobs
// back fails; a rejected submission (4xx) is recorded in the result instead.
func Run(ctx context.Context, cfg Config) (*Result, error) {
	cfg = cfg.withDefaults()
	if err := preflight(ctx, cfg); err != nil {
		return nil, err
	}
	ctx, abort := context.WithCancelCause(ctx)
	defer abort(nil)
	r := &runner{cfg: cfg, start: time.Now(), tr: newTracker(len(cfg.Submissions), cfg.SettleTime)}
	stopPoll := make(chan struct{})
	pollDone := make(chan struct{})
	go r.pollLoop(ctx, stopPoll, pollDone)
	r.dispatch(ctx, abort)
	timedOut := r.settle(ctx)
	close(stopPoll)
	<-pollDone
	if err := context.Cause(ctx); err != nil {
		return nil, err
	}
	return r.result(ctx, timedOut)
}

// preflight checks that the pool and every queue the submissions name exist.
func preflight(ctx context.Context, cfg Config) error {
	qs, err := cfg.Client.Queues(ctx)
	if err != nil {
		return fmt.Errorf("read the queues: %w", err)
	}
	have := map[string]bool{}
	for _, q := range qs.Queues {
		have[q.Name] = true
	}
	var missing []string
	for _, s := range cfg.Submissions {
		if !have[s.Spec.Queue] && !slices.Contains(missing, s.Spec.Queue) {
			missing = append(missing, s.Spec.Queue)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("the API has no queue %s; the replay routes pods to the queue named after their tier "+
			"(gpugov inventory import creates one per tier when there is none)", strings.Join(missing, ", "))
	}
	if cfg.Pool == "" {
		return nil
	}
	inv, err := cfg.Client.Inventory(ctx)
	if err != nil {
		return fmt.Errorf("read the inventory: %w", err)
	}
	for _, p := range inv.Pools {
		if p.Name == cfg.Pool {
			return nil
		}
	}
	return fmt.Errorf("the API has no pool %q; import the trace's nodes first (gpugov inventory import NODES.csv --pool %s)",
		cfg.Pool, cfg.Pool)
}

// runner is one replay in progress.
type runner struct {
	cfg     Config
	start   time.Time
	tr      *tracker
	cancels sync.WaitGroup // cancellations scheduled and not yet sent
}

// dispatch submits every submission at its time through Concurrency workers
// and returns when all submissions and their cancellations are done (or ctx ends).
func (r *runner) dispatch(ctx context.Context, abort context.CancelCauseFunc) {
	queue := make(chan *Submission)
	var workers sync.WaitGroup
	for range r.cfg.Concurrency {
		workers.Add(1)
		go func() {
			defer workers.Done()
			for s := range queue {
				r.submit(ctx, s, abort)
			}
		}()
	}
	for i := range r.cfg.Submissions {
		s := &r.cfg.Submissions[i]
		if !sleepUntil(ctx, r.start.Add(s.SubmitAt)) {
			break
		}
		select {
		case queue <- s:
		case <-ctx.Done():
		}
	}
	close(queue)
	workers.Wait()
	r.cancels.Wait()
	r.tr.markDispatched()
}

// submit submits one job; a 401 or 403 aborts the replay (the token cannot
// submit for other projects), another refusal is recorded.
func (r *runner) submit(ctx context.Context, s *Submission, abort context.CancelCauseFunc) {
	if ctx.Err() != nil {
		return
	}
	job, err := r.submitWithRetry(ctx, s)
	if err != nil {
		if ae, ok := apiclient.AsError(err); ok && (ae.Status == http.StatusUnauthorized || ae.Status == http.StatusForbidden) {
			abort(fmt.Errorf("submit %s: %w (the replay submits for every project: use an operator or admin token)", s.Key, err))
			return
		}
		if ctx.Err() == nil {
			r.tr.reject(s, err)
		}
		return
	}
	r.tr.submitted(s, job)
	if s.CancelAt > 0 {
		r.cancels.Add(1)
		go r.cancelLater(ctx, s, job.ID)
	}
}

// submitWithRetry posts the job, retrying answers that say "try again".
func (r *runner) submitWithRetry(ctx context.Context, s *Submission) (*api.Job, error) {
	delay := firstRetryDelay
	for attempt := 1; ; attempt++ {
		job, status, err := r.cfg.Client.Submit(ctx, &s.Spec, s.Key)
		if err == nil {
			return job, nil
		}
		retry := status == 0 || status == http.StatusTooManyRequests || status >= 500
		if !retry || attempt == maxSubmitAttempts || ctx.Err() != nil {
			return nil, err
		}
		if !sleepUntil(ctx, time.Now().Add(delay)) {
			return nil, ctx.Err()
		}
		delay = min(2*delay, maxRetryDelay)
	}
}

// cancelLater cancels the job at the pod's trace deletion time. A job that
// already ended (409) needs nothing; other failures are counted.
func (r *runner) cancelLater(ctx context.Context, s *Submission, jobID string) {
	defer r.cancels.Done()
	if !sleepUntil(ctx, r.start.Add(s.CancelAt)) {
		return
	}
	_, err := r.cfg.Client.Cancel(ctx, jobID, "the trace deleted this pod without scheduling it")
	if ae, ok := apiclient.AsError(err); ok && ae.Status == http.StatusConflict {
		return
	}
	r.tr.cancelled(err)
}

// settle waits until the tracker reports the jobs settled, or Wait passes,
// and reports whether it gave up waiting.
func (r *runner) settle(ctx context.Context) (timedOut bool) {
	deadline := time.Now().Add(r.cfg.Wait)
	for {
		if r.tr.isSettled() {
			return false
		}
		if time.Now().After(deadline) {
			return true
		}
		if !sleepUntil(ctx, time.Now().Add(r.cfg.PollInterval)) {
			return false
		}
	}
}

// pollLoop looks at the live jobs every PollInterval until stop or ctx ends,
// and writes a progress line every ProgressInterval.
func (r *runner) pollLoop(ctx context.Context, stop <-chan struct{}, done chan<- struct{}) {
	defer close(done)
	tick := time.NewTicker(r.cfg.PollInterval)
	defer tick.Stop()
	lastProgress := time.Now()
	var pollErr error
	for {
		select {
		case <-ctx.Done():
			return
		case <-stop:
			r.printProgress(pollErr)
			return
		case <-tick.C:
		}
		live, err := r.pollLive(ctx)
		if err == nil {
			r.tr.observe(live, time.Now())
		}
		pollErr = err
		if time.Since(lastProgress) >= r.cfg.ProgressInterval {
			r.printProgress(pollErr)
			lastProgress = time.Now()
		}
	}
}

// pollLive lists every job in a live state.
func (r *runner) pollLive(ctx context.Context) ([]api.Job, error) {
	var out []api.Job
	for _, state := range liveStates {
		jobs, err := listAll(ctx, r.cfg.Client, apiclient.ListOptions{State: string(state)})
		if err != nil {
			return nil, err
		}
		out = append(out, jobs...)
	}
	return out, nil
}

// listAll pages through GET /v1/jobs with o.
func listAll(ctx context.Context, c *apiclient.Client, o apiclient.ListOptions) ([]api.Job, error) {
	o.Limit = 1000
	var out []api.Job
	for {
		page, err := c.ListJobs(ctx, o)
		if err != nil {
			return nil, err
		}
		out = append(out, page.Jobs...)
		if page.NextCursor == "" {
			return out, nil
		}
		o.Cursor = page.NextCursor
	}
}

// printProgress writes one progress line, with the last look's error if any.
func (r *runner) printProgress(pollErr error) {
	p := r.tr.progress()
	line := fmt.Sprintf("replay %6.1fs  submitted %d/%d  waiting %d (no cycle yet %d)  placed %d  running %d  ended %d",
		time.Since(r.start).Seconds(), p.submitted, len(r.cfg.Submissions), p.waiting, p.unseen, p.placed, p.running, p.ended)
	if p.rejected > 0 {
		line += fmt.Sprintf("  rejected %d", p.rejected)
	}
	if pollErr != nil {
		line += "  (look failed: " + pollErr.Error() + ")"
	}
	fmt.Fprintln(r.cfg.Progress, line)
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

// errNoJob marks a submission whose job the final read did not find.
var errNoJob = errors.New("job not returned by GET /v1/jobs")
