package api

import (
	"context"
	"log/slog"
	"sync"
	"time"
)

// Defaults of WithAsyncStarts.
const (
	// DefaultStartWorkers is how many workflow starts run at once. Each is one
	// Temporal RPC of a few milliseconds; four keep up with hundreds of
	// submissions per second without crowding the Temporal server.
	DefaultStartWorkers = 4
	// DefaultStartQueue is how many committed submissions may wait for their
	// workflow start before a submission starts its own in the request.
	DefaultStartQueue = 1024
)

// WithAsyncStarts makes POST /v1/jobs answer 201 as soon as the job's row is
// committed and start its workflow in the background, through workers
// goroutines fed by a queue of depth submissions (≤ 0: the defaults). This is
// the transactional-outbox shape Armada's submit API has (the submission is
// durable before the scheduler sees it): a submission's latency is then that
// of PostgreSQL, not of the Temporal server, which is busy running every
// job's workflow. DESIGN invariant 3 still holds: the row is committed before
// the answer, and a start that fails (or is lost with the process) is made by
// the reconciler (ReconcileJobWorkflows), which serve runs at start and
// every 30 s. When the queue is full the request starts the workflow itself
// (back-pressure), with the synchronous answers (201, or 202 when the start
// fails). Without this option every start is synchronous. Call Server.Close
// to drain the queue on shutdown.
func WithAsyncStarts(workers, depth int) Option {
	return func(s *Server) {
		if workers <= 0 {
			workers = DefaultStartWorkers
		}
		if depth <= 0 {
			depth = DefaultStartQueue
		}
		s.startWorkers, s.startQueue = workers, depth
	}
}

// startRequest is one committed job whose workflow is to be started.
type startRequest struct {
	jobID string
	attrs JobAttributes
}

// workflowStarter starts job workflows off the request path.
type workflowStarter struct {
	wf      Workflows
	timeout time.Duration
	log     *slog.Logger
	queue   chan startRequest

	mu     sync.Mutex // guards closed against a send on the closed queue
	closed bool
	wg     sync.WaitGroup
}

func newWorkflowStarter(s *Server, workers, depth int) *workflowStarter {
	ws := &workflowStarter{
		wf: s.workflows, timeout: s.workflowTimeout, log: s.log,
		queue: make(chan startRequest, depth),
	}
	for range workers {
		ws.wg.Add(1)
		go ws.work()
	}
	return ws
}

// offer queues r and reports whether it was queued; false means the queue is
// full or closed, and the caller starts the workflow itself.
func (ws *workflowStarter) offer(r startRequest) bool {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	if ws.closed {
		return false
	}
	select {
	case ws.queue <- r:
		return true
	default:
		return false
	}
}

// work starts the queued workflows; a failed start is logged and left to the
// reconciler. A started one wakes the scheduler (coalesced by the adapter).
func (ws *workflowStarter) work() {
	defer ws.wg.Done()
	for r := range ws.queue {
		ctx, cancel := context.WithTimeout(context.Background(), ws.timeout)
		if err := ws.wf.StartJob(ctx, r.jobID, r.attrs); err != nil {
			ws.log.Warn("api: job stored, workflow start deferred to the reconciler", "job", r.jobID, "err", err)
		} else if err := ws.wf.NotifySubmitted(ctx, r.jobID); err != nil {
			ws.log.Warn("api: scheduler not signalled; its timer will pick the change up", "job", r.jobID, "err", err)
		}
		cancel()
	}
}

// close stops taking requests and waits until the queued starts are done.
func (ws *workflowStarter) close() {
	ws.mu.Lock()
	if !ws.closed {
		ws.closed = true
		close(ws.queue)
	}
	ws.mu.Unlock()
	ws.wg.Wait()
}

// Close drains the background workflow starts of WithAsyncStarts (a no-op
// without it); call it after the HTTP server stopped taking requests.
func (s *Server) Close() {
	if s.starter != nil {
		s.starter.close()
	}
}
