// Package store is gpugov's PostgreSQL persistence through pgx/v5: inventory,
// queues, quotas, jobs, runs, allocations, wait events, scheduling cycles,
// preemptions, the audit log and decayed project usage, with the schema as
// embedded goose migrations.
//
// Invariant 1 of docs/design.md (no GPU granted beyond 1000 milli-GPU, whole GPUs
// exclusive) is enforced twice: ApplyCycle locks the GPU rows it grants in UUID
// order and refuses a placement that would exceed capacity, and the gpu_usage
// table, kept by a trigger on allocation_gpus, carries a CHECK that makes any
// over-grant fail its transaction whoever writes it.
//
// Lock order, followed by every method so that concurrent writers do not
// deadlock in the normal course: scheduling_cycles row, then jobs rows (in ID
// order within a statement), then gpus rows in UUID order, then gpu_usage rows
// (through the trigger). Two racing schedulers can still deadlock on job rows;
// PostgreSQL then aborts one, and inTx retries transactions that fail with a
// deadlock or serialisation error.
//
// Schema notes: identifiers use the "C" collation; job_queue mirrors the live
// jobs (submitted, waiting, placed, running) with the typed columns the
// scheduling snapshot reads, kept by a trigger on jobs; inventory_version
// moves on every real inventory change, so LoadSnapshot can reuse the
// inventory it read before.
//
// Idempotency: each mutating method says how a retry by a Temporal activity is
// absorbed; the short form is that results are keyed by cycle ID, allocation
// ID, run ID or (project, idempotency key), and repeated state changes are
// no-ops.
package store

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/gpugov/gpugov/internal/scheduling"
)

// ErrNotFound is returned (wrapped) when a job, run, allocation or preemption
// does not exist; test with errors.Is.
var ErrNotFound = errors.New("not found")

// ErrConflict is returned (wrapped) when a request contradicts the stored state,
// e.g. finishing a run on another job or cancelling a job that already succeeded.
var ErrConflict = errors.New("conflict with stored state")

// DefaultUsageHalfLife is the half-life of the decay applied to project GPU
// usage: 7 days, Slurm's default PriorityDecayHalfLife, and the same as
// scheduling.DefaultPolicy's fair-share half-life.
const DefaultUsageHalfLife = 7 * 24 * time.Hour

// maxTxAttempts bounds the retries of a transaction that failed with a
// deadlock or serialisation error.
const maxTxAttempts = 5

// Store is the PostgreSQL store. It is safe for concurrent use.
type Store struct {
	pool *pgxpool.Pool
	// usageHalfLifeNS is the half-life of project usage decay in
	// nanoseconds (SetUsageHalfLife); ≤ 0 means no decay.
	usageHalfLifeNS atomic.Int64
	// projectWeights are the policy's fair-share weights (SetProjectWeights),
	// the base of the queue report's project_target_share.
	projectWeights atomic.Pointer[map[string]float64]
	// simRunSpeedBits is math.Float64bits of the simulated executor's speed
	// (SetSimulatedRunSpeed); 0 means 1.
	simRunSpeedBits atomic.Uint64
	// evidenceWindowNS is the window over which LoadSnapshot counts each
	// recovery profile's resumes, in nanoseconds (SetEvidenceWindow); 0
	// means scheduling.DefaultEvidenceWindowSeconds.
	evidenceWindowNS atomic.Int64
	caches           snapshotCaches  // what LoadSnapshot reuses between calls, per scheduler shard
	waits            waitMemo        // the stored wait state each shard's last LoadSnapshot read, for its next ApplyCycle
	tracer           pgx.QueryTracer // set on the pool's connections at Open
}

// Option configures a Store at Open.
type Option func(*Store)

// WithQueryTracer traces every query of the pool with t (serve passes
// otelpgx's OpenTelemetry tracer, so SQL spans join the HTTP and Temporal
// traces); nil leaves queries untraced.
func WithQueryTracer(t pgx.QueryTracer) Option { return func(s *Store) { s.tracer = t } }

// SetUsageHalfLife sets the half-life with which FinishRun charges and
// LoadSnapshot decays project GPU-seconds: the policy's fair_share.half_life_s
// (docs/design.md §4), which serve applies at start and on every reload, so
// the usage the store keeps decays as the policy in force says and the
// planner's fair-share factor reads it so. A value ≤ 0 means no decay, as in
// scheduling.DecayUsage. A store starts with DefaultUsageHalfLife. Safe for
// concurrent use.
func (s *Store) SetUsageHalfLife(d time.Duration) { s.usageHalfLifeNS.Store(int64(d)) }

// SetSimulatedRunSpeed sets the speed of the simulated executor (serve's
// --sim-speed: seconds of job work per real second) so that LoadSnapshot
// gives a simulated job's RunningJob.RunSeconds in real seconds: its
// declared run_seconds divided by the speed, rounded up. The expected
// releases and next re-evaluation times the planner derives from them
// (docs/design.md §1, "What would change it") then read in wall-clock time
// under `make run`'s 600×. A job with a command runs on a node agent at its
// declared pace and is not scaled. A value ≤ 1 means no scaling (the
// default). Safe for concurrent use.
func (s *Store) SetSimulatedRunSpeed(speed float64) {
	s.simRunSpeedBits.Store(math.Float64bits(max(speed, 1)))
}

// SetEvidenceWindow sets the window over which LoadSnapshot counts each
// recovery profile's resumes into the snapshot's recovery evidence
// (scheduling.RecoveryEvidence.ProfileVerifiedResumes and
// ProfileFailedResumes): the policy's preemption.evidence_window_s, which
// serve applies at start and on every reload, so the record the
// preemption gate reads is the policy's (docs/design.md §5 "The evidence
// rule"). A value ≤ 0 means the default, 30 days. Safe for concurrent use.
func (s *Store) SetEvidenceWindow(d time.Duration) { s.evidenceWindowNS.Store(int64(max(d, 0))) }

// evidenceWindow is the window SetEvidenceWindow set, or the default.
func (s *Store) evidenceWindow() time.Duration {
	if d := time.Duration(s.evidenceWindowNS.Load()); d > 0 {
		return d
	}
	return time.Duration(scheduling.DefaultEvidenceWindowSeconds) * time.Second
}

// simulatedRunSpeed is the speed SetSimulatedRunSpeed set (≥ 1).
func (s *Store) simulatedRunSpeed() float64 {
	if b := s.simRunSpeedBits.Load(); b != 0 {
		return math.Float64frombits(b)
	}
	return 1
}

// SetProjectWeights sets the projects' fair-share weights the queue report
// measures project_target_share against: the policy's
// fair_share.project_weights, which serve applies at start and on every
// reload (nil: every project weighs 1). The map is copied. Safe for
// concurrent use.
func (s *Store) SetProjectWeights(w map[string]float64) {
	c := maps.Clone(w)
	s.projectWeights.Store(&c)
}

// reportProjectWeights returns the weights SetProjectWeights set (nil: none); read-only.
func (s *Store) reportProjectWeights() map[string]float64 {
	if p := s.projectWeights.Load(); p != nil {
		return *p
	}
	return nil
}

// usageHalfLifeSeconds returns the usage half-life in seconds (≤ 0: no decay).
func (s *Store) usageHalfLifeSeconds() float64 {
	return time.Duration(s.usageHalfLifeNS.Load()).Seconds()
}

// DefaultMaxConns is the connection pool's size when databaseURL sets no
// pool_max_conns. pgxpool's own default, max(4, GOMAXPROCS), is 4 on a
// 2-core machine: serve's HTTP requests (5 s store timeout each, the wait
// for a connection included), its scheduling cycles and its activities then
// queue for 4 connections, and `make load` at 50 submissions/s saw 503s from
// requests that timed out waiting for one (docs/design.md §8 "Sustained
// load"). 16 stays well under PostgreSQL's default max_connections (100);
// connections open only on demand (pgxpool's MinConns 0).
const DefaultMaxConns = 16

// Open connects a pgxpool to databaseURL (a postgres:// URL or key=value DSN)
// and pings it; the pool holds up to DefaultMaxConns connections unless the
// URL's pool_max_conns says otherwise. The schema is not migrated; call Migrate first. It returns an
// error naming the database when the URL is invalid or the server cannot be
// reached, and a *MissingDatabaseError when the server has no such database
// (Open never creates one: only `gpugov migrate` does, through EnsureDatabase).
func Open(ctx context.Context, databaseURL string, opts ...Option) (*Store, error) {
	cfg, err := pgxpool.ParseConfig(databaseURL)
	if err != nil {
		return nil, fmt.Errorf("store: open: parse database URL: %w", err)
	}
	if !strings.Contains(databaseURL, "pool_max_conns") {
		cfg.MaxConns = DefaultMaxConns
	}
	s := &Store{}
	s.usageHalfLifeNS.Store(int64(DefaultUsageHalfLife))
	for _, o := range opts {
		o(s)
	}
	if s.tracer != nil {
		cfg.ConnConfig.Tracer = s.tracer
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("store: open %s: %w", describe(cfg.ConnConfig), err)
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		if missing := asMissingDatabase(err, cfg.ConnConfig, databaseURL); missing != nil {
			return nil, missing
		}
		return nil, fmt.Errorf("store: open: cannot reach PostgreSQL at %s: %w", describe(cfg.ConnConfig), err)
	}
	s.pool = pool
	return s, nil
}

// describe names a connection target without its password.
func describe(c *pgx.ConnConfig) string {
	return fmt.Sprintf("%s:%d/%s (user %s)", c.Host, c.Port, c.Database, c.User)
}

// Close closes every connection of the pool.
func (s *Store) Close() { s.pool.Close() }

// Pool returns the underlying pgx pool, for tests and read-only reports that
// need SQL the Store does not offer.
func (s *Store) Pool() *pgxpool.Pool { return s.pool }

// inTx runs fn in one READ COMMITTED transaction and commits it. A deadlock
// (40P01) or serialisation failure (40001) rolls back and runs fn again, up to
// maxTxAttempts times, so fn must build its results from scratch on each call.
// Errors are wrapped with op.
func (s *Store) inTx(ctx context.Context, op string, fn func(pgx.Tx) error) error {
	var err error
	for attempt := 1; attempt <= maxTxAttempts; attempt++ {
		err = pgx.BeginFunc(ctx, s.pool, fn)
		if err == nil || !retryable(err) {
			break
		}
	}
	if err != nil {
		return fmt.Errorf("store: %s: %w", op, err)
	}
	return nil
}

// retryable reports whether err is a transient conflict between transactions.
func retryable(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && (pgErr.Code == "40P01" || pgErr.Code == "40001")
}
