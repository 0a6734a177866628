// Package api is gpugov's HTTP API (gin): job submission with idempotency
// keys, job state with the current wait reason and the scheduler's
// explanation, wait events, cancel/hold/release, queues, inventory, health and
// readiness, metrics and a hand-written OpenAPI 3.1 document (openapi.json).
//
// Every /v1 route except the OpenAPI document needs a bearer token (see
// Tokens, WithTokenLookup); which roles may call a route is routeAccess
// (access.go). A submitter sees and changes only its own project's jobs,
// preemptions, reclaims and reports; an agent acts for its own node;
// operators and admins see all. Denials are audited (denials.go). Every route
// has body and header limits and every token a rate limit (Limits). Errors are JSON {"error": {"code", "message", "field"}}.
//
// Durability (docs/design.md invariant 3): POST /v1/jobs answers only after the
// job row is committed. With a StartQueue (WithStartQueue, as serve runs it)
// it answers 201 at once and the JobWorkflow is started in the background;
// without one, or when the queue is full, the request starts the workflow
// itself and answers 201 once it started, or 202 with a note when the start
// fails. Either way a job whose start failed stays pending and the reconciler
// (workflows.ReconcileJobWorkflows over PendingJobs, run periodically by
// serve) starts its workflow later; StartJob is idempotent, so the client may
// also just retry with the same key.
// When PostgreSQL cannot be reached it answers 503 store_unavailable and never
// a 2xx.
//
// Audit: cancel, hold, release, prerequisite changes, amendments, quota
// changes and quota requests and their decisions, completions, reclaim
// decisions and disputes are audited by the store with the token's name as
// actor; the submit entry is written by store.CreateJob in the job's
// transaction, with the project as actor. GET /v1/audit reads the log
// (operators and admins).
package api

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"reflect"
	"strings"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/gpugov/gpugov/internal/policy"
	"github.com/gpugov/gpugov/internal/scheduling"
	"github.com/gpugov/gpugov/internal/temporalx"
	"github.com/gpugov/gpugov/store"
)

// Store is the part of *store.Store the API uses (see store's method docs for
// their errors). StoreFrom adapts a *store.Store.
type Store interface {
	CreateJob(ctx context.Context, nj *store.NewJob) (*store.Job, bool, error)
	GetJob(ctx context.Context, id string) (*store.Job, error)
	ListJobs(ctx context.Context, f store.JobFilter) ([]store.Job, string, error)
	JobWaitEvents(ctx context.Context, jobID string) ([]store.WaitEvent, error)
	LastDecision(ctx context.Context, job *store.Job) (*store.LastDecision, error)
	LastRun(ctx context.Context, jobID string) (*store.RunSummary, error)
	SetHold(ctx context.Context, jobID string, held bool, actor, reason string) (changed bool, err error)
	CancelJob(ctx context.Context, jobID, actor, reason string) error
	SetPrerequisite(ctx context.Context, jobID, name string, ready bool, message, actor string) (bool, error)
	AmendJob(ctx context.Context, jobID string, req scheduling.ResourceRequest, actor, reason string) (bool, error)
	ListQueues(ctx context.Context) ([]scheduling.Queue, error)
	GetInventory(ctx context.Context) ([]scheduling.Pool, error)
	// Ping checks that PostgreSQL answers; /readyz uses it.
	Ping(ctx context.Context) error
}

// pgStore adds Ping to *store.Store, which offers the pool but no Ping method.
type pgStore struct{ *store.Store }

// Ping round-trips to PostgreSQL through the store's pool.
func (s pgStore) Ping(ctx context.Context) error { return s.Pool().Ping(ctx) }

// StoreFrom returns s as the API's Store.
func StoreFrom(s *store.Store) Store { return pgStore{s} }

// Workflows is what the API asks of Temporal. The serve command passes
// workflows.Client; the interface keeps the Temporal client out of handlers.
type Workflows interface {
	// StartJob starts the job's JobWorkflow; calling it again for the same job
	// must succeed without starting a second one.
	StartJob(ctx context.Context, jobID string, attrs temporalx.JobAttributes) error
	// CancelJob tells the job's workflow to stop the job, starting the
	// workflow (with attrs) when it was never started; actor and reason are
	// who cancelled and why.
	CancelJob(ctx context.Context, jobID string, attrs temporalx.JobAttributes, actor, reason string) error
	// NotifySubmitted asks the scheduler for a scheduling cycle now because
	// the job was submitted, or its hold, a prerequisite or its request changed.
	NotifySubmitted(ctx context.Context, jobID string) error
}

// StartQueue starts committed jobs' workflows off the request path
// (workflows.Starter implements it).
type StartQueue interface {
	// Offer queues the start of jobID's workflow and reports whether it was
	// queued; false means the request starts the workflow itself.
	Offer(jobID string, attrs temporalx.JobAttributes) bool
}

// Timeouts of the calls a request makes.
const (
	DefaultStoreTimeout = 5 * time.Second  // PostgreSQL calls of one request (WithStoreTimeout changes it)
	WorkflowTimeout     = 10 * time.Second // Temporal calls of one request
)

// Option configures a Server.
type Option func(*Server)

// WithMetricsHandler mounts h (the Prometheus handler) at GET /metrics.
func WithMetricsHandler(h http.Handler) Option { return func(s *Server) { s.metrics = h } }

// WithMiddleware adds gin middleware (e.g. otelgin) before every route,
// after panic recovery.
func WithMiddleware(m ...gin.HandlerFunc) Option {
	return func(s *Server) { s.middleware = append(s.middleware, m...) }
}

// WithLogger sets the logger for failures the client does not see in detail
// (5xx causes, workflow calls that failed after a commit). Default slog.Default().
func WithLogger(l *slog.Logger) Option { return func(s *Server) { s.log = l } }

// WithStartQueue makes POST /v1/jobs answer 201 as soon as a new job's row is
// committed and hand its workflow start to q. When q refuses (full or
// closed) the request starts the workflow itself, with the synchronous
// answers (201, or 202 when the start fails). A repeated Idempotency-Key
// always starts its workflow in the request, so a client's retry confirms the
// start. Whoever built q drains it on shutdown (workflows.Starter.Close),
// after the HTTP server stopped taking requests.
func WithStartQueue(q StartQueue) Option { return func(s *Server) { s.startQueue = q } }

// WithStoreTimeout bounds the PostgreSQL calls of one request (default
// DefaultStoreTimeout), so an unresponsive database gives a 503, not a hang.
func WithStoreTimeout(d time.Duration) Option { return func(s *Server) { s.storeTimeout = d } }

// Server is the HTTP API. Create it with New; serve Handler().
type Server struct {
	store        Store
	workflows    Workflows
	tokens       Tokens
	metrics      http.Handler
	middleware   []gin.HandlerFunc
	log          *slog.Logger
	storeTimeout time.Duration
	now          func() time.Time
	engine       *gin.Engine
	startQueue   StartQueue            // WithStartQueue's; nil starts every workflow in the request
	policy       func() *policy.Policy // WithGovernancePolicy's; nil: policy.Default()
	disputes     DisputeRecorder       // WithDisputeRecorder's; nil records nothing
	// cycleInterval is the scheduler's cycle interval (WithCycleInterval),
	// the shortest experiment window.
	cycleInterval time.Duration
	tokenLookup   TokenLookup    // WithTokenLookup's; nil: the token file's tokens only
	limits        Limits         // WithLimits', with defaults
	limiter       *tokenLimiter  // per-token rate limits
	guesses       *guessLimiter  // unknown-token guesses per client address, checked before the store lookup
	denials       *denialAuditor // coalesces the access_denied audit entries
}

// New builds the API on st and wf with the given tokens. gin runs in release
// mode unless GIN_MODE says otherwise.
func New(st Store, wf Workflows, tokens Tokens, opts ...Option) *Server {
	s := &Server{
		store: st, workflows: wf, tokens: tokens, log: slog.Default(),
		storeTimeout: DefaultStoreTimeout, now: time.Now, cycleInterval: DefaultCycleInterval,
	}
	for _, o := range opts {
		o(s)
	}
	s.limits = s.limits.withDefaults()
	s.limiter = newTokenLimiter(s.limits, s.now)
	s.guesses = newGuessLimiter(s.limits, s.now)
	s.denials = newDenialAuditor()
	if os.Getenv(gin.EnvGinMode) == "" {
		gin.SetMode(gin.ReleaseMode)
	}
	s.engine = s.routes()
	return s
}

// Handler returns the http.Handler serving the API.
func (s *Server) Handler() http.Handler { return s.engine }

// routes builds the gin engine with every route of openapi.json.
func (s *Server) routes() *gin.Engine {
	e := gin.New()
	e.HandleMethodNotAllowed = true
	e.Use(gin.CustomRecovery(func(c *gin.Context, rec any) {
		s.log.Error("api: panic", "path", c.FullPath(), "panic", rec)
		c.AbortWithStatusJSON(http.StatusInternalServerError, ErrorResponse{Error: ErrorBody{Code: CodeInternal, Message: "internal error"}})
	}))
	e.Use(s.middleware...)
	e.Use(s.logServerErrors)
	e.Use(s.limitRequest)
	e.Use(rejectNUL)
	e.NoRoute(func(c *gin.Context) {
		writeError(c, newError(http.StatusNotFound, CodeNotFound, "", "no route %s %s", c.Request.Method, c.Request.URL.Path))
	})
	e.NoMethod(func(c *gin.Context) {
		writeError(c, newError(http.StatusMethodNotAllowed, CodeMethodNotAllowed, "", "method %s not allowed on %s", c.Request.Method, c.Request.URL.Path))
	})

	e.GET("/healthz", s.healthz)
	e.GET("/readyz", s.readyz)
	if s.metrics != nil {
		e.GET("/metrics", gin.WrapH(s.metrics))
	}
	e.GET("/v1/openapi.json", serveOpenAPI)

	v1 := e.Group("/v1", s.auditDenials, s.authenticate, s.authorize, checkQuery, checkBody)
	v1.POST("/jobs", s.submitJob)
	v1.GET("/jobs", s.listJobs)
	v1.GET("/jobs/:id", s.getJob)
	v1.PATCH("/jobs/:id", s.amendJob)
	v1.PUT(strings.TrimPrefix(routePrerequisite, "/v1"), s.setPrerequisite)
	v1.GET("/jobs/:id/events", s.jobEvents)
	v1.POST("/jobs/:id/cancel", s.cancelJob)
	v1.POST("/jobs/:id/hold", s.holdJob)
	v1.POST("/jobs/:id/release", s.releaseJob)
	v1.GET("/queues", s.listQueues)
	v1.GET("/inventory", s.inventory)
	s.nodeRoutes(v1)
	s.governanceRoutes(v1)
	s.evidenceRoutes(v1)
	v1.GET("/notifications", s.listNotifications)
	s.quotaRoutes(v1)
	s.policyRoutes(v1)
	s.readinessRoutes(v1)
	s.reportRoutes(v1)
	s.experimentRoutes(v1)
	return e
}

// logServerErrors logs the causes that writeError attached to 5xx answers.
func (s *Server) logServerErrors(c *gin.Context) {
	c.Next()
	if c.Writer.Status() < 500 {
		return
	}
	for _, err := range c.Errors {
		s.log.Error("api: request failed", "method", c.Request.Method, "path", c.FullPath(),
			"status", c.Writer.Status(), "err", err.Err)
	}
}

// implements returns v (the server's store or workflows) as the optional
// interface T, or answers 500 and records the wiring bug with its cause
// (logged by the error middleware).
func implements[T any](c *gin.Context, v any) (T, bool) {
	t, ok := v.(T)
	if !ok {
		writeError(c, newError(http.StatusInternalServerError, CodeInternal, "", "internal error"))
		_ = c.Error(fmt.Errorf("api: %T does not implement %s", v, reflect.TypeFor[T]().Name()))
	}
	return t, ok
}

// storeCtx bounds a request's PostgreSQL calls.
func (s *Server) storeCtx(c *gin.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(c.Request.Context(), s.storeTimeout)
}

// workflowCtx bounds a request's Temporal calls. It is detached from the
// request's cancellation: once a job is committed, a client hanging up must
// not stop its workflow from being started.
func (s *Server) workflowCtx(c *gin.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(c.Request.Context()), WorkflowTimeout)
}

// healthz answers 200 while the process serves HTTP; it checks nothing else.
func (s *Server) healthz(c *gin.Context) { c.JSON(http.StatusOK, Health{Status: "ok"}) }

// readyz answers 200 when PostgreSQL answers a ping, else 503 store_unavailable.
func (s *Server) readyz(c *gin.Context) {
	ctx, cancel := s.storeCtx(c)
	defer cancel()
	if err := s.store.Ping(ctx); err != nil {
		s.log.Warn("api: not ready", "err", err)
		c.AbortWithStatusJSON(http.StatusServiceUnavailable, ErrorResponse{Error: ErrorBody{
			Code: CodeStoreUnavailable, Message: "PostgreSQL does not answer a ping (the cause is in the server log)",
		}})
		return
	}
	c.JSON(http.StatusOK, Health{Status: "ready"})
}
