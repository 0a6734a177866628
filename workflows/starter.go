package workflows

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/gpugov/gpugov/internal/temporalx"
)

// Defaults of StarterOptions.
const (
	// DefaultStartWorkers is how many workflow starts run at once. Each is one
	// Temporal RPC, of a few milliseconds on an idle server but of 100 ms and
	// more on a busy one: with four, 50 submissions/s under the sustained-load
	// test left hundreds of committed jobs without a workflow when a cycle
	// placed them (their placement was then released; now SignalPlacements
	// starts such a workflow with its placement, docs/design.md §3 step 2
	// "Wait"); sixteen keep up at 160/s with 100 ms starts.
	DefaultStartWorkers = 16
	// DefaultStartQueue is how many committed submissions may wait for their
	// workflow start before a submission starts its own in the request.
	DefaultStartQueue = 1024
	// DefaultStartTimeout bounds one background start and its scheduler
	// wake-up.
	DefaultStartTimeout = 10 * time.Second
)

// JobStarter starts job workflows and wakes the scheduler; *Client
// implements it. StartJob must be idempotent (see Client.StartJob).
type JobStarter interface {
	StartJob(ctx context.Context, jobID string, attrs temporalx.JobAttributes) error
	NotifySubmitted(ctx context.Context, jobID string) error
}

// StarterOptions configures NewStarter; zero fields take the defaults.
type StarterOptions struct {
	Workers int           // goroutines starting workflows; ≤ 0: DefaultStartWorkers
	Depth   int           // queued starts at most; ≤ 0: DefaultStartQueue
	Timeout time.Duration // per start; ≤ 0: DefaultStartTimeout
	Logger  *slog.Logger  // failed starts and wake-ups; nil: slog.Default()
}

// Starter starts the workflows of committed jobs off the request path: the
// API (api.WithStartQueue) answers POST /v1/jobs 201 as soon as the job's row
// is committed and offers its start here. This is the transactional-outbox
// shape Armada's submit API has (the submission is durable before the
// scheduler sees it): a submission's latency is then that of PostgreSQL, not
// of the Temporal server, which is busy running every job's workflow. The
// durability invariant (docs/design.md) still holds: the row is committed
// before the answer, and a start that fails (or is lost with the process) is
// made by ReconcileJobWorkflows, which serve runs at start and every 30 s.
// Create it with NewStarter; Close drains it.
type Starter struct {
	wf      JobStarter
	timeout time.Duration
	log     *slog.Logger
	queue   chan startRequest

	mu     sync.Mutex // guards closed against a send on the closed queue
	closed bool
	wg     sync.WaitGroup
}

// startRequest is one committed job whose workflow is to be started.
type startRequest struct {
	jobID string
	attrs temporalx.JobAttributes
}

// NewStarter starts o.Workers goroutines that start the offered jobs'
// workflows through wf, each followed by a scheduler wake-up.
func NewStarter(wf JobStarter, o StarterOptions) *Starter {
	if o.Workers <= 0 {
		o.Workers = DefaultStartWorkers
	}
	if o.Depth <= 0 {
		o.Depth = DefaultStartQueue
	}
	if o.Timeout <= 0 {
		o.Timeout = DefaultStartTimeout
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	s := &Starter{wf: wf, timeout: o.Timeout, log: o.Logger, queue: make(chan startRequest, o.Depth)}
	for range o.Workers {
		s.wg.Add(1)
		go s.work()
	}
	return s
}

// Offer queues the start of jobID's workflow and reports whether it was
// queued; false means the queue is full or closed, and the caller starts the
// workflow itself (back-pressure).
func (s *Starter) Offer(jobID string, attrs temporalx.JobAttributes) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	select {
	case s.queue <- startRequest{jobID: jobID, attrs: attrs}:
		return true
	default:
		return false
	}
}

// work starts the queued workflows; a failed start is logged and left to the
// reconciler. A started one wakes the scheduler (coalesced by the client).
func (s *Starter) work() {
	defer s.wg.Done()
	for r := range s.queue {
		ctx, cancel := context.WithTimeout(context.Background(), s.timeout)
		if err := s.wf.StartJob(ctx, r.jobID, r.attrs); err != nil {
			s.log.Warn("workflows: job stored, workflow start deferred to the reconciler", "job", r.jobID, "err", err)
		} else if err := s.wf.NotifySubmitted(ctx, r.jobID); err != nil {
			s.log.Warn("workflows: scheduler not signalled; its timer will pick the change up", "job", r.jobID, "err", err)
		}
		cancel()
	}
}

// Close stops taking offers and waits until the queued starts are done; call
// it after the HTTP server stopped taking requests and before the Temporal
// client closes. Calling it again does nothing more.
func (s *Starter) Close() {
	s.mu.Lock()
	if !s.closed {
		s.closed = true
		close(s.queue)
	}
	s.mu.Unlock()
	s.wg.Wait()
}
