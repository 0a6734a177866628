package service

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"math"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/exaring/otelpgx"
	"go.opentelemetry.io/contrib/instrumentation/github.com/gin-gonic/gin/otelgin"
	"go.opentelemetry.io/otel"
	"go.temporal.io/sdk/client"
	temporalotel "go.temporal.io/sdk/contrib/opentelemetry"
	"go.temporal.io/sdk/interceptor"
	"go.temporal.io/sdk/worker"

	"github.com/gpugov/gpugov/activities"
	"github.com/gpugov/gpugov/api"
	"github.com/gpugov/gpugov/api/console"
	"github.com/gpugov/gpugov/internal/crashpoint"
	"github.com/gpugov/gpugov/internal/executor"
	"github.com/gpugov/gpugov/internal/executor/process"
	"github.com/gpugov/gpugov/internal/policy"
	"github.com/gpugov/gpugov/internal/telemetry"
	"github.com/gpugov/gpugov/internal/temporalx"
	"github.com/gpugov/gpugov/store"
	"github.com/gpugov/gpugov/workflows"
)

// Service is a started gpugov server: store, Temporal client and workers,
// scheduler, HTTP API and background loops. Create it with Start; stop it
// with Close.
type Service struct {
	cfg       Config
	tel       *telemetry.Telemetry
	store     *store.Store
	instr     *instrumentedStore
	temporal  client.Client
	workflows *workflows.Client
	starter   *workflows.Starter // background workflow starts of the API's submissions
	httpSrv   *http.Server
	listener  net.Listener
	serveErr  chan error // the HTTP server's exit error, once

	govMetrics *telemetry.GovernanceMetrics // preemption and reclaim outcomes
	policy     *policy.Watcher              // Config.PolicyFile's; nil without one
	static     *policy.Policy               // the policy in force without a file
	// inForce is the policy in force once applyStartPolicy ran: the active
	// stored version (applyPolicy, refreshPolicy), with its hash and
	// scheduling view computed once.
	inForce atomic.Pointer[policyInForce]
	// policyMu serializes refreshPolicy and applyPolicy: a refresh that
	// loaded the active version just before a reload activated another
	// would otherwise store it over the reload's, and the cycle (and the
	// governance and notification activities reading currentPolicy) would
	// run with a version no longer active.
	policyMu sync.Mutex
	// refreshLoaded, when set (tests only), runs in refreshPolicy between
	// loading the changed active version and making it the policy in force.
	refreshLoaded func()
	// startDrill, when set (tests only), starts a drill's workflow instead
	// of workflows.Client.StartDrill.
	startDrill func(ctx context.Context, preemptionID, jobID, allocationID, runID string) error

	mu      sync.Mutex
	workers []worker.Worker // nil while stopped (StopWorkers)

	stopLoops context.CancelFunc
	loops     sync.WaitGroup
	closeOnce sync.Once
	closeErr  error
}

// Start brings the service up in dependency order: the policy file (when
// configured), telemetry, database (created if missing, migrated, opened),
// the inventory and then the policy (stored and activated as a version;
// its queues, quotas, pool stages and low-risk queues written), Temporal client with the
// OpenTelemetry tracing interceptor and gpugov's search attributes, the
// service and simulated-executor workers, the scheduler and reclaim scan
// workflows, the HTTP API, and the loops: reconciler, queue gauges,
// gpu_samples retention and policy file watcher. On any error it
// undoes what it started and returns the error naming the failed step.
func Start(ctx context.Context, cfg Config) (*Service, error) {
	if err := validate(cfg); err != nil {
		return nil, err
	}
	s := &Service{cfg: cfg.withDefaults(), serveErr: make(chan error, 1)}
	if err := s.start(ctx); err != nil {
		_ = s.Close(context.Background())
		return nil, err
	}
	return s, nil
}

// validate checks the required fields of cfg.
func validate(cfg Config) error {
	switch {
	case cfg.DatabaseURL == "":
		return errors.New("service: a database URL is required")
	case cfg.TemporalAddress == "":
		return errors.New("service: a Temporal address is required")
	case cfg.APIAddr == "":
		return errors.New("service: an API listen address is required")
	case (cfg.TLSCertFile == "") != (cfg.TLSKeyFile == ""):
		return errors.New("service: the TLS certificate and key (--tls-cert, --tls-key) go together: HTTPS needs both")
	case cfg.Tokens.Len() == 0:
		return errors.New("service: at least one API token is required")
	case cfg.GPUSampleRetention < 0:
		return fmt.Errorf("service: GPU sample retention (--gpu-sample-retention) is %s; want a positive duration", cfg.GPUSampleRetention)
	case cfg.DecisionRetention < 0:
		return fmt.Errorf("service: decision retention (--decision-retention) is %s; want a positive duration", cfg.DecisionRetention)
	}
	return nil
}

// start runs the steps of Start; Close undoes whatever was set.
func (s *Service) start(ctx context.Context) error {
	if err := s.loadPolicy(); err != nil {
		return err
	}
	if err := s.checkRetention(); err != nil {
		return err
	}
	var err error
	if s.tel, err = telemetry.Setup(ctx, ServiceName); err != nil {
		return fmt.Errorf("service: telemetry: %w", err)
	}
	// Setup installed its meter provider as the global one.
	if s.govMetrics, err = telemetry.NewGovernanceMetrics(otel.Meter("github.com/gpugov/gpugov")); err != nil {
		return fmt.Errorf("service: %w", err)
	}
	if err := s.openStore(ctx); err != nil {
		return err
	}
	if err := s.seed(ctx); err != nil {
		return err
	}
	if err := s.applyStartPolicy(ctx); err != nil {
		return err
	}
	if err := s.connectTemporal(ctx); err != nil {
		return err
	}
	if err := s.StartWorkers(); err != nil {
		return err
	}
	if err := s.startSchedulers(ctx, s.currentPolicy()); err != nil {
		return fmt.Errorf("service: %w", err)
	}
	if err := s.startReclaimScan(ctx); err != nil {
		return err
	}
	if err := s.startNotificationDispatch(ctx); err != nil {
		return err
	}
	if err := s.serveHTTP(); err != nil {
		return err
	}
	s.startLoops(ctx)
	s.cfg.Logger.Info("gpugov serving", "api", s.APIAddr(), "temporal", s.cfg.TemporalAddress,
		"cycle_interval", s.cfg.CycleInterval, "sim_speed", s.cfg.SimSpeed)
	return nil
}

// startLoops starts the background loops on a context that Close cancels:
// the reconciler, the queue gauges, the waiting-jobs gauge, the gpu_samples retention, the drill
// pass and, with a policy file, its watcher.
func (s *Service) startLoops(ctx context.Context) {
	loopCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	s.stopLoops = cancel
	s.loops.Add(5)
	go s.reconcileLoop(loopCtx)
	go s.reportLoop(loopCtx)
	go s.waitingLoop(loopCtx)
	go s.retentionLoop(loopCtx)
	go s.drillLoop(loopCtx)
	if w := s.policy; w != nil {
		s.loops.Add(1)
		go func() {
			defer s.loops.Done()
			w.Run(loopCtx)
		}()
	}
}

// openStore applies the pending migrations and opens the pool (a database
// that does not exist is a *store.MissingDatabaseError: serve never creates
// one, `gpugov migrate` does), whose queries are traced by otelpgx (spans go through the
// global tracer provider that telemetry installed).
func (s *Service) openStore(ctx context.Context) error {
	if err := store.Migrate(ctx, s.cfg.DatabaseURL); err != nil {
		return fmt.Errorf("service: %w", err)
	}
	st, err := store.Open(ctx, s.cfg.DatabaseURL, store.WithQueryTracer(otelpgx.NewTracer()))
	if err != nil {
		return fmt.Errorf("service: %w", err)
	}
	s.store = st
	// Simulated runs last run_seconds/SimSpeed of real time: the planner's
	// expected releases are dated so (docs/design.md §1).
	st.SetSimulatedRunSpeed(s.cfg.SimSpeed)
	s.instr = newInstrumentedStore(st, s.tel.Metrics, s.cfg.AfterCycleCommit, s.cfg.Logger)
	return nil
}

// seed upserts the configured inventory (the policy's queues and quotas
// follow in applyStartPolicy).
func (s *Service) seed(ctx context.Context) error {
	if len(s.cfg.Inventory) > 0 {
		if err := s.store.UpsertInventory(ctx, s.cfg.Inventory); err != nil {
			return fmt.Errorf("service: import inventory: %w", err)
		}
		for _, p := range s.cfg.Inventory {
			c := CountPool(p)
			s.cfg.Logger.Info("inventory imported", "pool", p.Name, "nodes", c.Nodes, "gpus", c.GPUs)
		}
	}
	return nil
}

// connectTemporal dials Temporal with the OpenTelemetry tracing interceptor
// (it also implements the worker interceptor, so workers created from the
// client trace workflows and activities) and registers the search attributes.
func (s *Service) connectTemporal(ctx context.Context) error {
	tracing, err := temporalotel.NewTracingInterceptor(temporalotel.TracerOptions{})
	if err != nil {
		return fmt.Errorf("service: temporal tracing interceptor: %w", err)
	}
	c, err := temporalx.Dial(ctx, temporalx.ClientOptions{
		HostPort: s.cfg.TemporalAddress, Namespace: s.cfg.TemporalNamespace, Logger: s.cfg.Logger,
		Interceptors: []interceptor.ClientInterceptor{tracing},
	})
	if err != nil {
		return fmt.Errorf("service: %w", err)
	}
	s.temporal = c
	if err := temporalx.RegisterSearchAttributes(ctx, c, s.cfg.TemporalNamespace); err != nil {
		return fmt.Errorf("service: %w", err)
	}
	s.workflows = workflows.NewClient(c, workflows.ClientOptions{
		JobInput:         workflows.JobInput{Executor: workflows.ExecutorSimulated},
		SearchAttributes: true,
		ShardOf:          s.shardOf,
		Shards:           s.shardNames,
	})
	return nil
}

// StartWorkers starts the service worker (workflows.RegisterServiceWorker on
// the instrumented store, polling temporalx.ServiceTaskQueue) and the
// simulated-executor worker (workflows.RegisterSimExecutorWorker, polling
// temporalx.SimExecutorTaskQueue, checkpoints recorded in the store). Start
// calls it; after StopWorkers it starts fresh workers, as a restarted process
// would. It is a no-op while workers run, and returns a worker's start error.
func (s *Service) StartWorkers() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.workers != nil {
		return nil
	}
	var icpt []interceptor.WorkerInterceptor
	if s.cfg.CrashPoint != nil {
		icpt = append(icpt, crashpoint.Interceptor(s.cfg.CrashPoint))
	}
	worker.SetStickyWorkflowCacheSize(s.cfg.WorkflowCacheSize) // before any worker of the process starts
	deps := activities.Deps{
		Store: s.instr, Temporal: s.temporal, JobStarter: s.workflows, Policy: s.schedulingPolicy, Governance: s.currentPolicy,
		Progress: activities.TemporalRunProgress{Client: s.temporal}, Metrics: s.govMetrics,
		CycleIntervalSeconds: s.schedulerInput().CycleIntervalSeconds, ShardOf: s.shardOf,
	}
	// Pollers scale with the backlog (the SDK's poller autoscaling, up to
	// 100 each): with the default two per kind, a burst of job workflow
	// tasks waited on the pollers' round trips (docs/design.md §8 "Sustained
	// load").
	svc := worker.New(s.temporal, temporalx.ServiceTaskQueue, worker.Options{Interceptors: icpt,
		WorkflowTaskPollerBehavior: worker.NewPollerBehaviorAutoscaling(worker.PollerBehaviorAutoscalingOptions{}),
		ActivityTaskPollerBehavior: worker.NewPollerBehaviorAutoscaling(worker.PollerBehaviorAutoscalingOptions{})})
	workflows.RegisterServiceWorker(svc, deps)
	// The scheduler's own queue (temporalx.SchedulerTaskQueue): its cycles
	// never wait behind job workflow tasks.
	sched := worker.New(s.temporal, temporalx.SchedulerTaskQueue, worker.Options{Interceptors: icpt})
	workflows.RegisterServiceWorker(sched, deps)
	// Heartbeats at least every process.NoticeInterval: a preemption's or
	// cancel's notice reaches a simulated run in ≤ 5 s, not the SDK's default
	// 0.8 × heartbeat timeout (24 s), which the victim's loss would count.
	sim := worker.New(s.temporal, temporalx.SimExecutorTaskQueue, worker.Options{MaxHeartbeatThrottleInterval: process.NoticeInterval, Interceptors: icpt,
		ActivityTaskPollerBehavior: worker.NewPollerBehaviorAutoscaling(worker.PollerBehaviorAutoscalingOptions{})})
	workflows.RegisterSimExecutorWorker(sim, &executor.SimulatedExecutor{
		Checkpoints: s.store, SpeedFactor: s.cfg.SimSpeed, HeartbeatInterval: s.cfg.SimHeartbeat,
	})
	all := []worker.Worker{svc, sched, sim}
	for i, w := range all {
		if err := w.Start(); err != nil {
			for _, started := range all[:i] {
				started.Stop()
			}
			return fmt.Errorf("service: start worker: %w", err)
		}
	}
	s.workers = all
	return nil
}

// StopWorkers stops both workers: they poll no more, and the activities they
// run are cancelled as by a process exit (the simulated executor's runs fail
// their attempt and resume from their heartbeat on the next worker). Failure
// drills and tests use it with StartWorkers.
func (s *Service) StopWorkers() {
	s.mu.Lock()
	ws := s.workers
	s.workers = nil
	s.mu.Unlock()
	for _, w := range ws {
		w.Stop()
	}
}

// startSchedulers starts the SchedulerWorkflow of every shard of p
// (policy.Policy.ShardNames: "default" and each shard `shards:` names), or
// finds it running (StartScheduler's use-existing start); the first error
// stops it. serve calls it at start, when a policy becomes the policy in
// force, and at each reconcile pass (after assigning the pools created
// since, store.SetPoolShards), so a shard a policy change adds gets its
// scheduler even when the first start failed. A shard a policy drops
// keeps its scheduler, whose cycles then load no pool (docs/design.md §4
// "Scheduler shards").
func (s *Service) startSchedulers(ctx context.Context, p *policy.Policy) error {
	for _, shard := range p.ShardNames() {
		in := s.schedulerInput()
		in.Shard = shard
		if _, err := workflows.StartScheduler(ctx, s.temporal, in); err != nil {
			return err
		}
	}
	return nil
}

// shardOf is the scheduler shard of pool under the policy in force.
func (s *Service) shardOf(pool string) string {
	if f := s.inForce.Load(); f != nil {
		if shard := f.poolShards[pool]; shard != "" {
			return shard
		}
	}
	return temporalx.DefaultShard
}

// shardNames are the shards of the policy in force.
func (s *Service) shardNames() []string { return s.currentPolicy().ShardNames() }

// schedulerInput is the scheduler workflow's input from the config.
func (s *Service) schedulerInput() *workflows.SchedulerInput {
	return &workflows.SchedulerInput{CycleIntervalSeconds: int64(math.Ceil(s.cfg.CycleInterval.Seconds())),
		TaskQueue: temporalx.SchedulerTaskQueue}
}

// The workflow client serve gives the API serves the experiment routes.
var _ api.ExperimentWorkflows = (*workflows.Client)(nil)

// serveHTTP listens on the API address and serves the API, and the web
// console under /ui/, in the background.
func (s *Service) serveHTTP() error {
	s.starter = workflows.NewStarter(s.workflows, workflows.StarterOptions{Logger: s.cfg.Logger})
	srv := api.New(api.StoreFrom(s.store), s.workflows, s.cfg.Tokens,
		api.WithMetricsHandler(s.tel.Handler()),
		api.WithMiddleware(otelgin.Middleware(ServiceName)),
		api.WithLogger(s.cfg.Logger),
		api.WithStartQueue(s.starter),
		api.WithGovernancePolicy(s.currentPolicy),
		api.WithDisputeRecorder(s.govMetrics),
		api.WithCycleInterval(s.cfg.CycleInterval),
		api.WithTokenLookup(api.StoreTokens(s.store)),
		api.WithLimits(s.cfg.APILimits))
	cons, err := console.New(srv, s.store, console.Options{TemporalUI: s.cfg.TemporalUI,
		Namespace: s.cfg.TemporalNamespace, Logger: s.cfg.Logger})
	if err != nil {
		return err
	}
	l, err := net.Listen("tcp", s.cfg.APIAddr)
	if err != nil {
		return fmt.Errorf("service: listen on %s: %w", s.cfg.APIAddr, err)
	}
	s.listener = l
	maxHeader := s.cfg.APILimits.MaxHeaderBytes
	if maxHeader <= 0 {
		maxHeader = api.DefaultMaxHeaderBytes
	}
	s.httpSrv = &http.Server{Handler: console.Mount(cons, srv.Handler()), ReadHeaderTimeout: APIReadHeaderTimeout, ReadTimeout: APIReadTimeout,
		WriteTimeout: APIWriteTimeout, IdleTimeout: APIIdleTimeout, MaxHeaderBytes: maxHeader}
	if s.cfg.TLSCertFile != "" {
		cert, err := tls.LoadX509KeyPair(s.cfg.TLSCertFile, s.cfg.TLSKeyFile)
		if err != nil {
			_ = l.Close()
			return fmt.Errorf("service: TLS certificate %s, key %s: %w", s.cfg.TLSCertFile, s.cfg.TLSKeyFile, err)
		}
		s.httpSrv.TLSConfig = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	}
	go func() {
		var err error
		if s.httpSrv.TLSConfig != nil {
			err = s.httpSrv.ServeTLS(l, "", "")
		} else {
			err = s.httpSrv.Serve(l)
		}
		if errors.Is(err, http.ErrServerClosed) {
			err = nil
		}
		s.serveErr <- err
	}()
	return nil
}

// reconcileLoop runs workflows.ReconcileJobWorkflows over the API's
// PendingJobs and workflows.ReconcileExperimentWorkflows over the
// experiments that hold their pools every ReconcileInterval until ctx
// ends; failures are logged and retried at the next pass.
func (s *Service) reconcileLoop(ctx context.Context) {
	defer s.loops.Done()
	t := time.NewTicker(s.cfg.ReconcileInterval)
	defer t.Stop()
	// The first pass runs at once: starts queued by a process that died
	// before making them are made now, not a whole interval later.
	for first := true; ; first = false {
		if !first {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
		res, err := workflows.ReconcileJobWorkflows(ctx, api.PendingJobs{Store: api.StoreFrom(s.store)}, s.workflows, s.workflows.Ledger())
		if err != nil && ctx.Err() == nil {
			s.cfg.Logger.Warn("reconcile job workflows", "checked", res.Checked, "failed", res.Failed, "err", err)
		}
		if n, err := workflows.ReconcileExperimentWorkflows(ctx, s.temporal, s.store.HoldingExperimentIDs); err != nil && ctx.Err() == nil {
			s.cfg.Logger.Warn("reconcile experiment workflows", "holding", n, "err", err)
		}
		// A pool created since the policy was applied joins its shard.
		if moved, err := s.store.SetPoolShards(ctx, s.currentPolicy().PoolShards()); err != nil && ctx.Err() == nil {
			s.cfg.Logger.Warn("pool shards", "err", err)
		} else if len(moved) > 0 {
			s.cfg.Logger.Info("pool shards changed", "pools", moved)
		}
		if err := s.startSchedulers(ctx, s.currentPolicy()); err != nil && ctx.Err() == nil {
			s.cfg.Logger.Warn("start shard schedulers", "err", err)
		}
	}
}

// APIAddr returns the address the API listens on, e.g. "127.0.0.1:8080".
func (s *Service) APIAddr() string { return s.listener.Addr().String() }

// Store returns the service's store.
func (s *Service) Store() *store.Store { return s.store }

// Temporal returns the service's Temporal client.
func (s *Service) Temporal() client.Client { return s.temporal }

// Close shuts down in reverse order: the HTTP server (in-flight requests
// finish within ShutdownTimeout), the loops (reconciler, queue gauges,
// policy file watcher), the workers, the Temporal
// client, the store and telemetry. It returns the joined errors; calling it
// again returns the same result.
func (s *Service) Close(ctx context.Context) error {
	s.closeOnce.Do(func() { s.closeErr = s.close(ctx) })
	return s.closeErr
}

func (s *Service) close(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.ShutdownTimeout)
	defer cancel()
	var errs []error
	if s.httpSrv != nil {
		errs = append(errs, s.httpSrv.Shutdown(ctx))
	} else if s.listener != nil {
		errs = append(errs, s.listener.Close())
	}
	if s.starter != nil {
		s.starter.Close() // queued workflow starts, before the Temporal client closes
	}
	if s.stopLoops != nil {
		s.stopLoops()
		s.loops.Wait()
	}
	s.StopWorkers()
	if s.temporal != nil {
		s.temporal.Close()
	}
	if s.store != nil {
		s.store.Close()
	}
	if s.tel != nil {
		errs = append(errs, s.tel.Shutdown(ctx))
	}
	return errors.Join(errs...)
}

// Run starts the service, serves until ctx is done (SIGINT/SIGTERM in
// `gpugov serve`) or the HTTP server fails, then closes it gracefully. It
// returns Start's error, the server's failure, or Close's error.
func Run(ctx context.Context, cfg Config) error {
	s, err := Start(ctx, cfg)
	if err != nil {
		return err
	}
	var serveErr error
	select {
	case <-ctx.Done():
		s.cfg.Logger.Info("gpugov shutting down")
	case serveErr = <-s.serveErr:
		s.cfg.Logger.Error("HTTP server stopped", "err", serveErr)
	}
	return errors.Join(serveErr, s.Close(context.WithoutCancel(ctx)))
}
