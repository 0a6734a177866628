// Package service wires gpugov's server process together: the PostgreSQL
// store (migrated at start), the Temporal client with OpenTelemetry tracing,
// the service worker (every workflow and the store-backed activities), the
// simulated-executor worker, the scheduler workflow, the HTTP API with
// Prometheus metrics, and the periodic reconciler of job workflows
// (docs/design.md invariant 3), with preemption and reclaim governance (their
// workflows and activities, the reclaim scan) under one policy file
// (internal/policy), watched and hot-reloaded, each version stored.
// `gpugov serve` is a thin command over Run; the
// end-to-end tests start the same components in-process with Start.
//
// Scheduling metrics (placements, cycle duration, job waits, the waiting
// gauge) are recorded by a decorator of the store the activities use (see
// instrumentedStore), because the activities offer no metrics hooks; so are
// the wait-reason transitions by reason. The queue gauges (longest wait,
// starving jobs) are recomputed periodically from the queue service report.
// Node agents' GPU utilisation samples older than Config.GPUSampleRetention
// are deleted hourly (retention.go).
package service

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/gpugov/gpugov/api"
	"github.com/gpugov/gpugov/internal/crashpoint"
	"github.com/gpugov/gpugov/internal/policy"
	"github.com/gpugov/gpugov/internal/scheduling"
	"github.com/gpugov/gpugov/replay"
	"github.com/gpugov/gpugov/store"
)

// Defaults of Config.
const (
	// DefaultCycleInterval is the scheduler's longest time between cycles
	// when no signal wakes it (workflows.SchedulerInput's own default).
	DefaultCycleInterval = 5 * time.Second
	// DefaultSimSpeed is the simulated executor's speed: seconds of job work
	// per real second. It is the replay's default speed, so that a replay
	// compresses runs exactly as much as arrivals: a day of trace passes in 144 s.
	DefaultSimSpeed = replay.DefaultSpeed
	// DefaultReconcileInterval is how often pending jobs' workflows are
	// (idempotently) started again, for submissions answered 202.
	DefaultReconcileInterval = 30 * time.Second
	// DefaultShutdownTimeout bounds the graceful shutdown of HTTP and workers.
	DefaultShutdownTimeout = 10 * time.Second
	// DefaultReportInterval is how often the queue gauges (longest wait,
	// starving jobs) are recomputed from the queue service report.
	DefaultReportInterval = 5 * time.Minute
	// DefaultWaitingGaugeInterval is how often every replica reads the
	// gpugov_waiting_jobs gauge from the database besides after each cycle it
	// applies: 15 s, Prometheus' usual scrape interval (deploy/prometheus),
	// so that a replica that ran no recent cycle is at most one scrape behind.
	DefaultWaitingGaugeInterval = 15 * time.Second
	// DefaultDrillInterval is how often the governance loop's drill pass
	// runs (automatic drills of trial pools, drill workflows started again).
	DefaultDrillInterval = 30 * time.Second
	// DefaultWorkflowCacheSize: 2,048 cached workflow executions. Each
	// waiting JobWorkflow held costs serve about 50 KiB (measured by the
	// sustained-load test: RSS grew 570 MiB over 8,700 live job workflows
	// with the SDK's default of 10,000), so the cache bounds serve's memory
	// near 100 MiB whatever the backlog; a job waits most of its life, so an
	// evicted one costs one replay of a short history when it is placed.
	DefaultWorkflowCacheSize = 2048
	// DefaultSimHeartbeat is the simulated executor's real time between heartbeats.
	DefaultSimHeartbeat = time.Second
	// ServiceName is the OpenTelemetry service name and the otelgin server name.
	ServiceName = "gpugov"
)

// The API server's connection timeouts (net/http.Server's fields). A client
// that sends its header or body too slowly, or keeps an idle connection, is
// cut off instead of holding a connection and a goroutine for good.
const (
	// APIReadHeaderTimeout bounds reading a request's header.
	APIReadHeaderTimeout = 10 * time.Second
	// APIReadTimeout bounds reading a whole request, body included (at
	// most api.DefaultMaxBodyBytes, 1 MiB, unless serve's limit is raised:
	// 60 s allows a client as slow as 17 KiB/s).
	APIReadTimeout = time.Minute
	// APIWriteTimeout bounds a request from the end of its header to its
	// answer written: the longest handler is a report, whose PostgreSQL work
	// api.ReportTimeout (5 min) bounds, plus a minute to write it. No route
	// streams or long-polls.
	APIWriteTimeout = api.ReportTimeout + time.Minute
	// APIIdleTimeout is how long a keep-alive connection may wait for its
	// next request.
	APIIdleTimeout = 2 * time.Minute
)

// Config is what Start needs. Zero values take the defaults named per field.
type Config struct {
	// DatabaseURL is the PostgreSQL URL; the database is created when missing
	// and migrated at start. Required.
	DatabaseURL string
	// TemporalAddress is the Temporal frontend host:port. Required.
	TemporalAddress string
	// TemporalNamespace is the Temporal namespace; "" means "default".
	TemporalNamespace string
	// APIAddr is the HTTP listen address; a ":0" port picks a free one (see
	// Service.APIAddr). Required.
	APIAddr string
	// Tokens are the API's bearer tokens of the token file. Required (at
	// least one). The tokens `gpugov token create` stored in PostgreSQL
	// (api_tokens) are accepted too (api.WithTokenLookup).
	Tokens api.Tokens
	// APILimits are the API's request body and header limits and per-token
	// rate limits; zero fields take api's defaults (api.Limits).
	APILimits api.Limits
	// TLSCertFile and TLSKeyFile, both set, make the API serve HTTPS with
	// that PEM certificate (chain) and key; both empty serve plain HTTP.
	// Setting one only is an error.
	TLSCertFile, TLSKeyFile string
	// TemporalUI is the Temporal UI's base URL the web console (/ui/, package
	// api/console) links workflows to, e.g. http://127.0.0.1:8233; "" leaves
	// the links out.
	TemporalUI string

	// PolicyFile is the policy file (internal/policy: scheduling rules,
	// queues, quotas, pool stages, protection windows, preemption and
	// reclaim). It must load at start; it is re-read whenever it changes
	// (the last good version stays in force when a change does not load).
	// Each version loaded is stored (content-hashed, immutable) and
	// activated, with an audit entry, and its queues, quotas, pool stages
	// and low-risk queues are written to the store. Its simulation section
	// is ignored. "" means Policy.
	PolicyFile string
	// Policy is the policy in force when PolicyFile is "", stored and
	// applied at start like a file's (tests that run the service and the
	// simulator under one policy built in code set it); nil means
	// policy.Default(), which names no queue, stage or quota, so the stored
	// ones are kept (default queues are created in an empty store). Setting
	// both is an error.
	Policy *policy.Policy
	// Inventory, when not empty, is upserted at start (pools listed replace
	// their stored nodes and GPUs; other pools are kept).
	Inventory []scheduling.Pool

	// CycleInterval is the scheduler's timer; 0 means DefaultCycleInterval.
	// It applies when the scheduler workflow is started, not to one already running.
	CycleInterval time.Duration
	// SimSpeed is the simulated executor's seconds of work per real second;
	// ≤ 0 means DefaultSimSpeed.
	SimSpeed float64
	// SimHeartbeat is the simulated executor's heartbeat interval; 0 means DefaultSimHeartbeat.
	SimHeartbeat time.Duration
	// WorkflowCacheSize bounds the workflow executions the process's workers
	// keep in memory between their tasks (the Temporal SDK's sticky cache,
	// worker.SetStickyWorkflowCacheSize, process-wide); 0 means
	// DefaultWorkflowCacheSize. An evicted execution is replayed from its
	// history at its next task.
	WorkflowCacheSize int
	// ReconcileInterval is the reconciler's period; 0 means DefaultReconcileInterval.
	ReconcileInterval time.Duration
	// ReportInterval is the queue gauges' period; 0 means DefaultReportInterval.
	ReportInterval time.Duration
	// WaitingGaugeInterval is the waiting-jobs gauge's period besides the
	// cycles; 0 means DefaultWaitingGaugeInterval.
	WaitingGaugeInterval time.Duration
	// DrillInterval is the period of the governance loop's drill pass
	// (docs/design.md §5 "Resume drills"); 0 means DefaultDrillInterval.
	DrillInterval time.Duration
	// ShutdownTimeout bounds Close's graceful steps; 0 means DefaultShutdownTimeout.
	ShutdownTimeout time.Duration
	// GPUSampleRetention is how long gpu_samples rows (node agents'
	// utilisation samples) are kept; 0 means DefaultGPUSampleRetention. Start
	// refuses one shorter than the reclaim observation window.
	GPUSampleRetention time.Duration
	// DecisionRetention is how long decisions rows (what each scheduling
	// cycle did per job; the last scheduling action reads them) are kept; 0
	// means DefaultDecisionRetention.
	DecisionRetention time.Duration
	// RetentionInterval is the period of the gpu_samples and decisions
	// retention pass; 0 means DefaultRetentionInterval.
	RetentionInterval time.Duration

	// Logger receives the service's logs; nil means slog.Default().
	Logger *slog.Logger
	// AfterCycleCommit, when set, is called after each scheduling cycle's
	// transaction has committed and before the cycle activity answers. A
	// non-nil error is returned to the activity as if its worker had died
	// after the commit: Temporal retries the cycle, which the store replays.
	// Failure drills and tests use it; production leaves it nil.
	AfterCycleCommit func(ctx context.Context, out *store.CycleOutcome) error
	// CrashPoint, when set, is the crash-test hook of both workers
	// (internal/crashpoint, docs/design.md §7 "Crash points"): the named
	// activity blocks before its body or after its effect, for a test to
	// SIGKILL the process there. `gpugov serve` sets it from
	// GPUGOV_CRASHPOINT; production leaves it nil.
	CrashPoint *crashpoint.Point
}

// DefaultQueues are the queues created when neither the policy nor the
// store has any: policy.DefaultQueues (one per tier, named after it, as the
// trace replay routes jobs), internal/simulation's queues too, so that a
// replay and a simulation run under the same queues.
func DefaultQueues() []scheduling.Queue {
	qs, err := policy.SchedulingQueues(policy.DefaultQueues())
	if err != nil {
		panic(fmt.Sprintf("service: default queues: %v", err)) // policy.DefaultQueues names known tiers
	}
	return qs
}

// withDefaults returns c with its zero values replaced by the defaults.
func (c Config) withDefaults() Config {
	if c.CycleInterval <= 0 {
		c.CycleInterval = DefaultCycleInterval
	}
	if c.SimSpeed <= 0 {
		c.SimSpeed = DefaultSimSpeed
	}
	if c.SimHeartbeat <= 0 {
		c.SimHeartbeat = DefaultSimHeartbeat
	}
	if c.WorkflowCacheSize <= 0 {
		c.WorkflowCacheSize = DefaultWorkflowCacheSize
	}
	if c.ReconcileInterval <= 0 {
		c.ReconcileInterval = DefaultReconcileInterval
	}
	if c.ReportInterval <= 0 {
		c.ReportInterval = DefaultReportInterval
	}
	if c.WaitingGaugeInterval <= 0 {
		c.WaitingGaugeInterval = DefaultWaitingGaugeInterval
	}
	if c.DrillInterval <= 0 {
		c.DrillInterval = DefaultDrillInterval
	}
	if c.ShutdownTimeout <= 0 {
		c.ShutdownTimeout = DefaultShutdownTimeout
	}
	if c.GPUSampleRetention == 0 {
		c.GPUSampleRetention = DefaultGPUSampleRetention
	}
	if c.DecisionRetention == 0 {
		c.DecisionRetention = DefaultDecisionRetention
	}
	if c.RetentionInterval <= 0 {
		c.RetentionInterval = DefaultRetentionInterval
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}
