package store

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/gpugov/gpugov/internal/scheduling"
	"github.com/gpugov/gpugov/internal/vocab"
)

// LoadSnapshot reads everything scheduling.Plan needs at now, in one
// read-only REPEATABLE READ transaction so that every table is seen at the
// same instant: inventory, active allocations, running jobs (placed or
// running, with their allocation, run start, current-run checkpoint and
// recent preemptions), pending jobs (submitted or waiting, with the victims of
// preemptions in progress for them), quotas, queues and project usage; each
// job's recovery evidence carries its recovery profile and that profile's
// record over the evidence window ending at now (SetEvidenceWindow).
//
// Order: pools, nodes and queues by name, GPUs by device index, running jobs
// and allocations by job ID, pending jobs by submit time then ID, quotas by
// project then pool, usage by project.
//
// Speed (BenchmarkLoadSnapshot): the queries are pipelined in one round trip
// and read narrow, typed rows — live jobs from job_queue (kept by triggers on
// jobs), pending ones with their stored wait state (reason, explanation digest
// and explained_at, mirrored there by migration 00340), allocations by ID
// with their run — so no JSON is decoded but checkpoints; with JIT
// compilation off (noJIT), which cost more than it saved on these statements. What cannot change is read once: the inventory is reused until
// inventory_version moves, and each live job's ID, project, queue, tier,
// request and submit time are cached, keyed by job_queue.seq, from the load
// that first sees the job until it finishes (they are immutable after
// submission, except the request, which AmendJob changes together with the
// job's seq, so the next load reads it again); and each active allocation's
// grant (pool, node, CPU, host memory, borrowing, GPU shares) is cached by
// allocation ID, read (with its GPU shares inline) only by the load that first
// sees it active: migration 00350 refuses any update of those columns, so the
// cache is right whoever writes, and which allocations are active is read
// every load. Calls are serialised per Store, which keeps that cache simple, so a
// call waits for any load in progress: only the scheduler (and tools and
// tests) should call it; GET /v1/quotas reads LoadQuotaAccounting instead. The returned snapshot is the
// caller's own, except that request GPU-model slices, request label maps,
// allocation GPU-share slices and node label maps are shared with the cache: treat them as read-only
// (scheduling.Plan does).
//
// Usage is each project's stored decayed GPU-seconds decayed to now, plus the
// decayed GPU-seconds of its running allocations so far (same formula as
// FinishRun), so fair share sees long runs before they end. ProjectUsage.Share
// and Snapshot.ProtectionWindows come from configuration, not the store, and
// are left zero. Snapshot.InventoryVersion is the inventory_version the
// pools were read at, which moves with every change of a pool, node, node
// label or GPU row, so a scheduling.Planner may reuse its capacity index
// while it stays. Errors are wrapped with "load snapshot".
func (s *Store) LoadSnapshot(ctx context.Context, now time.Time) (*scheduling.Snapshot, error) {
	return s.LoadShardSnapshot(ctx, "", now)
}

// LoadShardSnapshot is LoadSnapshot restricted to the pools of scheduler
// shard shard (pools.scheduler_shard, SetPoolShards), read in the same
// transaction as the rest: their inventory, active allocations, running and
// pending jobs (by the job's pool) and quotas; queues, recovery evidence and
// project usage stay global, as fair share is (docs/design.md §3 step 2,
// "Scheduler shards"). "" means every pool (LoadSnapshot). Each shard has
// a cache and a wait memo of its own, so loads of different shards run in
// parallel and hand their memo only to their own shard's ApplyShardCycle;
// loads of one shard are serialised.
func (s *Store) LoadShardSnapshot(ctx context.Context, shard string, now time.Time) (*scheduling.Snapshot, error) {
	cache := s.caches.of(shard)
	cache.mu.Lock()
	defer cache.mu.Unlock()
	l := &snapshotLoader{cache: cache}
	err := pgx.BeginTxFunc(ctx, s.pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly},
		func(tx pgx.Tx) error {
			l.reset()
			l.shard = shard
			l.simSpeed = s.simulatedRunSpeed()
			l.now, l.evidenceFrom = now, now.Add(-s.evidenceWindow())
			if err := noJIT(ctx, tx); err != nil {
				return err
			}
			if err := runQueries(ctx, tx, l.queries()); err != nil {
				return err
			}
			if err := l.loadMissingAllocs(ctx, tx); err != nil {
				return err
			}
			return l.loadMissingStatic(ctx, tx)
		})
	if err != nil {
		return nil, fmt.Errorf("store: load snapshot: %w", err)
	}
	snap, err := l.assemble()
	if err != nil {
		return nil, fmt.Errorf("store: load snapshot: %w", err)
	}
	snap.Usage = s.usageAt(l.usage, snap.Running, now)
	waits := make(map[string]storedWait, len(snap.Pending))
	for i := range snap.Pending {
		pj := &snap.Pending[i]
		pj.StoredReason = l.pendingWait[i].reason
		waits[pj.ID] = l.pendingWait[i]
	}
	s.setWaitMemo(shard, now, waits)
	l.saveScratch()
	return snap, nil
}

// snapshotCaches holds one snapshotCache per scheduler shard ("" for
// LoadSnapshot's every pool).
type snapshotCaches struct {
	mu      sync.Mutex
	byShard map[string]*snapshotCache
}

// of returns the shard's cache, created on first use.
func (c *snapshotCaches) of(shard string) *snapshotCache {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.byShard == nil {
		c.byShard = map[string]*snapshotCache{}
	}
	sc := c.byShard[shard]
	if sc == nil {
		sc = &snapshotCache{}
		c.byShard[shard] = sc
	}
	return sc
}

// snapshotCache is what LoadSnapshot keeps between calls; guarded by mu,
// which each call holds throughout.
type snapshotCache struct {
	mu sync.Mutex
	// inventory and its inventory_version; version 0 means none cached.
	inventory        []scheduling.Pool
	inventoryVersion int64
	// jobs holds the immutable part of every job live at the last load;
	// generation marks the entries seen by the current load.
	jobs map[int64]*jobStatic // by job_queue.seq
	// allocs holds the grant of every allocation active at the last load
	// (fixed once granted: migration 00350); seen as for jobs.
	allocs     map[string]*allocStatic // by allocation ID
	generation uint64
	lastCounts rowCounts
	scratch    loadScratch
}

// MaxRunSeconds bounds a job spec's run_seconds: ten years (10 × 31,536,000
// s), far beyond any real job, yet small enough that the value fits a bigint
// and a time.Duration (about 292 years) with room to add to a timestamp. The
// API refuses larger values (422 on run_seconds); the snapshot clamps rows
// stored before that rule so one bad row cannot stop every scheduling cycle
// (docs/design.md "job spec bounds").
const MaxRunSeconds = vocab.MaxRunSeconds

// maxRunSecondsSQL is MaxRunSeconds as an SQL literal.
var maxRunSecondsSQL = strconv.Itoa(MaxRunSeconds)

// jobStatic is the part of a job that never changes after submission, but
// for the request AmendJob replaces (it gives the job a new seq, so its old
// entry is pruned and the new one loaded).
type jobStatic struct {
	id, project string
	queue       string
	tier        vocab.Tier
	request     scheduling.ResourceRequest
	submitTime  time.Time
	profile     string // the job's recovery profile (jobs.recovery.profile)
	runSeconds  int64  // the spec's run_seconds, rounded up (0: none declared)
	simulated   bool   // no command: the simulated executor runs it (at SetSimulatedRunSpeed's pace)
	seen        uint64 // generation of the last load that saw the job live
}

// allocStatic is the part of an allocation fixed at its grant (every field
// of scheduling.Allocation but JobID, which the load fills in); migration
// 00350 refuses updates of its columns, so the cached copy stays right
// whoever writes. GPUs is shared by every snapshot that holds the
// allocation: read-only.
type allocStatic struct {
	grant scheduling.Allocation
	seen  uint64 // generation of the last load that saw the allocation active
}

// realRunSeconds is the job's declared run time in real seconds: a
// simulated job's divided by the simulated executor's speed, rounded up
// (Store.SetSimulatedRunSpeed); 0 stays 0 (none declared).
func (st *jobStatic) realRunSeconds(simSpeed float64) int64 {
	if !st.simulated || simSpeed <= 1 || st.runSeconds <= 0 {
		return st.runSeconds
	}
	return int64(math.Ceil(float64(st.runSeconds) / simSpeed))
}

// snapshotLoader collects the rows of one load. Rows are scanned straight
// into the snapshot's slices, with what assemble needs to finish them kept in
// parallel slices, so each row is copied once.
//
// Unlike the rest of the package (rows.go), these scans are positional: read
// by name (pgx.RowToStructByName into db-tagged row structs), the
// allocation, pending and static-column rows cost the client measurably more
// CPU per load — BenchmarkLoadSnapshot, 7 interleaved runs on a shared
// 2-core machine: median 58.7 client-ms/op by name against 44.5 positional —
// because pgx joins the row's column names into a cache key and builds the
// scan targets by reflection for every row, 18,000 rows per load here. Keep
// each select list and its Scan in the same order.
type snapshotLoader struct {
	cache *snapshotCache
	// shard is the scheduler shard loaded; "" means every pool.
	shard string
	// shardPools is the set of the shard's pools (nil when shard is "").
	shardPools map[string]bool
	// simSpeed is Store.simulatedRunSpeed at the load (≥ 1).
	simSpeed float64
	// now is the load's instant; evidenceFrom the start of the evidence
	// window (Store.SetEvidenceWindow) the profiles' records cover.
	now, evidenceFrom time.Time
	// evidence is each recovery profile's record in the window: verified,
	// then failed or wrong-step resumes.
	evidence map[string][2]int
	inv      inventoryLoader
	version  int64

	allocs []scheduling.Allocation // ordered by job ID

	running           []scheduling.RunningJob // StartedAt: current run's start, or the grant time before it starts
	runningAlloc      []int                   // index of each running job's allocation in allocs
	runningSeq        []int64
	runningStatic     []*jobStatic
	runningCheckpoint [][]byte               // current run's last checkpoint document
	preempted         map[string][]time.Time // running job → times it was preempted

	pending           []scheduling.PendingJob
	pendingSeq        []int64
	pendingStatic     []*jobStatic
	pendingCheckpoint [][]byte
	pendingWait       []storedWait         // each pending job's stored wait state (job_queue's mirror of jobs')
	inProgress        map[string][]string  // pending job → victims being preempted for it
	noticeAt          map[string]time.Time // pending job → earliest notice (or start) of those preemptions
	released          map[string]time.Time // pending job → latest release of a victim for it in its current wait

	quotas  []scheduling.Quota
	queues  []scheduling.Queue
	usage   []scheduling.ProjectUsage
	missing []int64 // job_queue.seq of live jobs not in the cache
	// allocMissing is the index in allocs of each allocation not in the
	// cache, whose grant loadMissingAllocs reads.
	allocMissing []int
	allocRow     *allocRow
	pendingRow   *pendingRow
}

// storedWait is a pending job's stored wait state as a snapshot read it:
// its reason (jobs.reason), and the digest (jobs.explanation_digest) and
// instant (jobs.explained_at) of its stored explanation, read from their
// mirror in job_queue with the job's other columns (migration 00340).
type storedWait struct {
	reason      vocab.WaitReason
	hasDigest   bool
	digest      [32]byte
	explainedAt time.Time // zero: none
}

// current reports whether the stored explanation says what digest says and
// is younger than ExplanationRefreshInterval(jobID, rank) at at
// (explanationCurrent).
func (m *storedWait) current(jobID string, rank int, digest []byte, at time.Time) bool {
	return m.hasDigest && !m.explainedAt.IsZero() &&
		explanationCurrent(jobID, rank, m.digest[:], &m.explainedAt, digest, at)
}

// waitMemo hands the stored wait state a shard's LoadShardSnapshot read to
// the next ApplyShardCycle of the same shard and Store (docs/design.md §8,
// "The whole cycle at scale"); shards never see each other's.
type waitMemo struct {
	mu      sync.Mutex
	byShard map[string]waitMemoEntry
}

// waitMemoEntry is one shard's memo.
type waitMemoEntry struct {
	at    time.Time // the load's instant
	byJob map[string]storedWait
}

// setWaitMemo keeps byJob, read by a load of shard at at, for the shard's
// next ApplyShardCycle.
func (s *Store) setWaitMemo(shard string, at time.Time, byJob map[string]storedWait) {
	s.waits.mu.Lock()
	defer s.waits.mu.Unlock()
	if s.waits.byShard == nil {
		s.waits.byShard = map[string]waitMemoEntry{}
	}
	s.waits.byShard[shard] = waitMemoEntry{at: at, byJob: byJob}
}

// takeWaitMemo returns the stored wait state the last LoadSnapshot read
// when that load was at now (the cycle's instant: the scheduler loads and
// applies a cycle at one instant), else nil; once: the next call returns
// nil until another load. An ApplyCycle uses it
// only to skip the waiting jobs whose explanation is current; what it shows
// changed is read again under the cycle's transaction, so a state a
// concurrent writer changed since the load is at worst written one cycle
// late (that writer, placing or requeuing a job, clears the digest, which
// the next load reads).
func (s *Store) takeWaitMemo(shard string, now time.Time) map[string]storedWait {
	s.waits.mu.Lock()
	defer s.waits.mu.Unlock()
	e, ok := s.waits.byShard[shard]
	delete(s.waits.byShard, shard)
	if !ok || !e.at.Equal(now) {
		return nil
	}
	return e.byJob
}

// reset prepares the loader for one load, sizing its slices from the previous
// load's row counts, and starts a cache generation.
func (l *snapshotLoader) reset() {
	c := l.cache
	n := c.lastCounts
	*l = snapshotLoader{cache: c, shard: l.shard, preempted: map[string][]time.Time{}, inProgress: map[string][]string{},
		evidence: map[string][2]int{},
		noticeAt: map[string]time.Time{}, released: map[string]time.Time{},
		allocs:  reuse(c.scratch.allocs, n.allocs),
		running: reuse(c.scratch.running, n.running), runningStatic: reuse(c.scratch.runningStatic, n.running),
		runningCheckpoint: reuse(c.scratch.runningCheckpoint, n.running), runningAlloc: reuse(c.scratch.runningAlloc, n.running),
		runningSeq: reuse(c.scratch.runningSeq, n.running), pendingSeq: reuse(c.scratch.pendingSeq, n.pending),
		pending: make([]scheduling.PendingJob, 0, n.pending), pendingStatic: reuse(c.scratch.pendingStatic, n.pending),
		pendingCheckpoint: reuse(c.scratch.pendingCheckpoint, n.pending), pendingWait: reuse(c.scratch.pendingWait, n.pending)}
	c.scratch = loadScratch{}
	c.generation++
	if c.jobs == nil {
		c.jobs = map[int64]*jobStatic{}
	}
	if c.allocs == nil {
		c.allocs = map[string]*allocStatic{}
	}
}

// reuse returns buf emptied, or a new slice with capacity n when buf is nil.
func reuse[T any](buf []T, n int) []T {
	if buf == nil {
		return make([]T, 0, n)
	}
	return buf[:0]
}

// loadScratch holds the loader's slices that no snapshot keeps (assemble
// copies allocations and running jobs out sorted; the rest are read within
// the load), kept by the cache so the next load reuses them rather than
// allocating and clearing a few MB each cycle (docs/design.md §8, "The whole
// cycle at scale"). A load takes them at reset and gives them back when it
// has finished with them (saveScratch).
type loadScratch struct {
	allocs            []scheduling.Allocation
	running           []scheduling.RunningJob
	runningAlloc      []int
	runningSeq        []int64
	runningStatic     []*jobStatic
	runningCheckpoint [][]byte
	pendingSeq        []int64
	pendingStatic     []*jobStatic
	pendingCheckpoint [][]byte
	pendingWait       []storedWait
}

// saveScratch gives the loader's scratch slices back to the cache.
func (l *snapshotLoader) saveScratch() {
	l.cache.scratch = loadScratch{allocs: l.allocs, running: l.running, runningAlloc: l.runningAlloc,
		runningSeq: l.runningSeq, runningStatic: l.runningStatic, runningCheckpoint: l.runningCheckpoint,
		pendingSeq: l.pendingSeq, pendingStatic: l.pendingStatic, pendingCheckpoint: l.pendingCheckpoint,
		pendingWait: l.pendingWait}
}

// rowCounts are a load's row counts, the capacity hints of the next one.
type rowCounts struct{ allocs, running, pending int }

// recoveryCols holds job_queue's recovery columns (rec_checkpointable,
// rec_interval_s, rec_verified_resumes, rec_resume_downgraded).
type recoveryCols struct {
	checkpointable bool
	interval       int64
	resumes        int32
	downgraded     bool
}

func (c *recoveryCols) recovery() scheduling.RecoveryEvidence {
	return scheduling.RecoveryEvidence{Checkpointable: c.checkpointable, CheckpointIntervalSeconds: c.interval,
		VerifiedResumes: int(c.resumes), ResumeDowngraded: c.downgraded}
}

// lookup returns the cached static part of a live job (by job_queue.seq) and
// marks it seen, or records the job as missing.
func (l *snapshotLoader) lookup(seq int64) *jobStatic {
	st := l.cache.jobs[seq]
	if st == nil {
		l.missing = append(l.missing, seq)
		return nil
	}
	st.seen = l.cache.generation
	return st
}

func (l *snapshotLoader) queries() []rowQuery {
	// The inventory queries return no rows when the cached version is current.
	var qs []rowQuery
	qs = append(qs, rowQuery{sql: `SELECT version FROM inventory_version`, fn: func(rows pgx.Rows) error {
		return rows.Scan(&l.version)
	}})
	for _, q := range l.inv.queries() {
		q.sql += ` WHERE (SELECT version FROM inventory_version) IS DISTINCT FROM $1`
		q.args = []any{l.cache.inventoryVersion}
		qs = append(qs, q)
	}
	// shardPred restricts a pool column to the shard's pools; it uses the
	// query's next parameter (shardArgs). Nothing when every pool is loaded.
	// A pool with no pools row (a job asking for a pool no inventory has,
	// which waits with pool_unavailable) is in DefaultShard, as serve's
	// shardOf and the job workflow's scheduler say; shardResultTx applies
	// the same rule. When the default shard holds every pool (no `shards:`,
	// the one scheduler), the uncorrelated NOT EXISTS, evaluated once per
	// query, is true and the per-row tests are never made.
	shardPred := func(col string, n int) string {
		if l.shard == "" {
			return ""
		}
		return fmt.Sprintf(` AND (($%[2]d = '`+DefaultShard+`' AND NOT EXISTS (SELECT 1 FROM pools WHERE scheduler_shard <> $%[2]d))
			OR %[1]s IN (SELECT name FROM pools WHERE scheduler_shard = $%[2]d)
			OR ($%[2]d = '`+DefaultShard+`' AND NOT EXISTS (SELECT 1 FROM pools p WHERE p.name = %[1]s)))`, col, n)
	}
	shardArgs := func(args ...any) []any {
		if l.shard == "" {
			return args
		}
		return append(args, l.shard)
	}
	if l.shard != "" {
		l.shardPools = map[string]bool{}
		qs = append(qs, rowQuery{sql: `SELECT name FROM pools WHERE scheduler_shard = $1`, args: []any{l.shard},
			fn: func(rows pgx.Rows) error {
				var name string
				err := rows.Scan(&name)
				l.shardPools[name] = true
				return err
			}})
	}
	return append(qs,
		// One row per active allocation, with its job's queue row when the
		// job is placed or running (the two always go together through this
		// package's writes) and its current run. The grant's columns come
		// from the cache, or from loadMissingAllocs for the allocations it
		// lacks.
		rowQuery{sql: `
			SELECT CASE WHEN q.state IN ('placed', 'running') THEN '' ELSE a.job_id END, a.id,
				coalesce(r.started_at, a.granted_at), r.last_checkpoint,
				coalesce(q.state IN ('placed', 'running'), false), coalesce(q.seq, 0), coalesce(q.protected, false),
				coalesce(q.rec_checkpointable, false), coalesce(q.rec_interval_s, 0), coalesce(q.rec_verified_resumes, 0),
				coalesce(q.rec_resume_downgraded, false)
			FROM allocations a
			LEFT JOIN job_queue q ON q.job_id = a.job_id
			LEFT JOIN runs r ON r.id = a.run_id
			WHERE a.released_at IS NULL` + shardPred("a.pool", 1), args: shardArgs(), fn: l.scanAllocation},
		// Preempted runs of the jobs holding GPUs (the anti-thrash gate) and
		// of the pending ones (a job at the limit may not borrow).
		rowQuery{sql: `
			SELECT r.job_id, r.ended_at FROM runs r
			WHERE r.outcome = 'preempted'
				AND (EXISTS (SELECT 1 FROM allocations a WHERE a.job_id = r.job_id AND a.released_at IS NULL)
					OR EXISTS (SELECT 1 FROM job_queue q WHERE q.job_id = r.job_id AND q.state IN ('submitted', 'waiting')))
			ORDER BY r.ended_at`, fn: func(rows pgx.Rows) error {
			var id string
			var at time.Time
			err := rows.Scan(&id, &at)
			l.preempted[id] = append(l.preempted[id], at.UTC())
			return err
		}},
		rowQuery{sql: `
			SELECT seq, protected, held, waiting_since, accrued_aging_s, aging_since, prereq_triples,
				rec_checkpointable, rec_interval_s, rec_verified_resumes, rec_resume_downgraded, last_checkpoint,
				coalesce(reason, ''), explanation_digest, coalesce(explained_at, '-infinity')
			FROM job_queue WHERE state IN ('submitted', 'waiting')` + shardPred("req_pool", 1) + ` ORDER BY submit_time, job_id`,
			args: shardArgs(), fn: l.scanPending},
		// Drills (for_job_id NULL) serve no pending job.
		rowQuery{sql: `SELECT for_job_id, victim_job_id, coalesce(notified_at, started_at) FROM preemptions
			WHERE ended_at IS NULL AND for_job_id IS NOT NULL ORDER BY victim_job_id`,
			fn: func(rows pgx.Rows) error {
				var forJob, victim string
				var notice time.Time
				err := rows.Scan(&forJob, &victim, &notice)
				l.inProgress[forJob] = append(l.inProgress[forJob], victim)
				if old, ok := l.noticeAt[forJob]; !ok || notice.Before(old) {
					l.noticeAt[forJob] = notice.UTC()
				}
				return err
			}},
		// Victims released for a pending job during its current wait: a
		// lender keeps its claim on its lent quota until it is placed
		// (docs/design.md §5).
		rowQuery{sql: `
			SELECT p.for_job_id, max(p.ended_at) FROM preemptions p
			JOIN job_queue q ON q.job_id = p.for_job_id AND q.state IN ('submitted', 'waiting')
			WHERE p.state = 'released' AND p.ended_at >= q.waiting_since
			GROUP BY p.for_job_id`,
			fn: func(rows pgx.Rows) error {
				var forJob string
				var at time.Time
				err := rows.Scan(&forJob, &at)
				l.released[forJob] = at.UTC()
				return err
			}},
		// Every recovery profile's record in the evidence window
		// (docs/design.md §5 "The evidence rule"): an index-only scan of
		// resume_evidence_at_idx over the window.
		rowQuery{sql: `
			SELECT profile, count(*) FILTER (WHERE outcome = 'verified'), count(*) FILTER (WHERE outcome <> 'verified')
			FROM resume_evidence WHERE at > $1 AND at <= $2 GROUP BY profile`, args: []any{l.evidenceFrom, l.now},
			fn: func(rows pgx.Rows) error {
				var profile string
				var verified, failed int64
				err := rows.Scan(&profile, &verified, &failed)
				l.evidence[profile] = [2]int{int(verified), int(failed)}
				return err
			}},
		quotasQuery(&l.quotas),
		queuesQuery(&l.queues),
		rowQuery{sql: `SELECT project, decayed_gpu_seconds, as_of FROM project_usage`, fn: func(rows pgx.Rows) error {
			var u scheduling.ProjectUsage
			err := rows.Scan(&u.Project, &u.DecayedGPUSeconds, &u.AsOf)
			l.usage = append(l.usage, u)
			return err
		}},
	)
}

// digestTarget scans a bytea explanation digest straight into a
// storedWait, without the copy a []byte target allocates per row; NULL or
// a value of another length leaves hasDigest false.
type digestTarget struct{ w *storedWait }

// ScanBytes implements pgtype.BytesScanner; v is only valid during the call.
func (t digestTarget) ScanBytes(v []byte) error {
	if v != nil && len(v) == len(t.w.digest) {
		t.w.hasDigest = true
		copy(t.w.digest[:], v)
	}
	return nil
}

// allocRow and pendingRow are the scan targets of one allocation or pending
// row, kept by the loader and reused for every row (their targets lists
// built once a load), so that a row's scan allocates nothing of its own but
// what it keeps.
type allocRow struct {
	a          scheduling.Allocation
	cached     *allocStatic
	startedAt  time.Time
	checkpoint []byte
	running    bool
	seq        int64
	protected  bool
	c          recoveryCols
	targets    []any
}

type pendingRow struct {
	pj          scheduling.PendingJob
	w           storedWait
	seq         int64
	agingSince  pgtype.Timestamptz
	triples     []string
	checkpoint  []byte
	c           recoveryCols
	explainedAt pgtype.Timestamptz
	targets     []any
}

func (l *snapshotLoader) scanAllocation(rows pgx.Rows) error {
	r := l.allocRow
	if r == nil {
		r = &allocRow{}
		// The job ID of a running job comes from the cache (assemble), so
		// the query sends it only for the others.
		r.targets = []any{&r.a.JobID, allocIDTarget{l.cache, &r.cached, &r.a.ID},
			&r.startedAt, &r.checkpoint, &r.running, &r.seq, &r.protected,
			&r.c.checkpointable, &r.c.interval, &r.c.resumes, &r.c.downgraded}
		l.allocRow = r
	}
	r.a, r.cached, r.checkpoint = scheduling.Allocation{}, nil, nil
	if err := rows.Scan(r.targets...); err != nil {
		return err
	}
	a := r.a
	if r.cached != nil {
		r.cached.seen = l.cache.generation
		a = r.cached.grant
		a.JobID = r.a.JobID
	} else {
		l.allocMissing = append(l.allocMissing, len(l.allocs))
	}
	l.allocs = append(l.allocs, a)
	// A placed or running job always has an active allocation and the other
	// way round; an allocation whose job is in another state is listed but
	// gets no running job.
	if !r.running {
		return nil
	}
	l.running = append(l.running, scheduling.RunningJob{StartedAt: r.startedAt.UTC(), Recovery: r.c.recovery(), Protected: r.protected})
	l.runningAlloc = append(l.runningAlloc, len(l.allocs)-1)
	l.runningSeq = append(l.runningSeq, r.seq)
	l.runningStatic = append(l.runningStatic, l.lookup(r.seq))
	l.runningCheckpoint = append(l.runningCheckpoint, r.checkpoint)
	return nil
}

func (l *snapshotLoader) scanPending(rows pgx.Rows) error {
	r := l.pendingRow
	if r == nil {
		r = &pendingRow{}
		pj := &r.pj
		r.targets = []any{&r.seq, &pj.Protected, &pj.Held, &pj.WaitingSince, &pj.AccruedAgingS, &r.agingSince, &r.triples,
			&r.c.checkpointable, &r.c.interval, &r.c.resumes, &r.c.downgraded, &r.checkpoint,
			&r.w.reason, digestTarget{&r.w}, &r.explainedAt}
		l.pendingRow = r
	}
	r.pj, r.w, r.triples, r.checkpoint = scheduling.PendingJob{}, storedWait{}, r.triples[:0], nil
	r.agingSince, r.explainedAt = pgtype.Timestamptz{}, pgtype.Timestamptz{}
	if err := rows.Scan(r.targets...); err != nil {
		return err
	}
	pj, w := r.pj, r.w
	if r.explainedAt.Valid && r.explainedAt.InfinityModifier == pgtype.Finite {
		w.explainedAt = r.explainedAt.Time
	}
	pj.Recovery, pj.WaitingSince, pj.RequestVersion = r.c.recovery(), pj.WaitingSince.UTC(), r.seq
	// A NULL aging_since is a paused clock (accounting.AgingClock): the job's
	// current reason earns no aging.
	if r.agingSince.Valid {
		pj.AgingSince = r.agingSince.Time.UTC()
	} else {
		pj.AgingPaused = true
	}
	if triples := r.triples; len(triples) >= 3 {
		pj.Prerequisites = make([]scheduling.Prerequisite, 0, len(triples)/3)
		for i := 0; i+2 < len(triples); i += 3 {
			pj.Prerequisites = append(pj.Prerequisites,
				scheduling.Prerequisite{Name: triples[i], Ready: triples[i+1] == "true", Message: triples[i+2]})
		}
	}
	l.pending = append(l.pending, pj)
	l.pendingWait = append(l.pendingWait, w)
	l.pendingSeq = append(l.pendingSeq, r.seq)
	l.pendingStatic = append(l.pendingStatic, l.lookup(r.seq))
	l.pendingCheckpoint = append(l.pendingCheckpoint, r.checkpoint)
	return nil
}

// requestColumns is the select list of job_queue's request columns;
// requestCols scans it.
const requestColumns = `req_gpus, req_gpu_milli, req_gpu_memory_mib, req_gpu_models, req_pool,
	req_topology, req_cpu_milli, req_memory_mib, req_labels, req_node_selector`

// requestCols holds the scan targets of requestColumns.
type requestCols struct {
	gpus, milli      int32
	gpuMem, cpu, mem int64
	models, labels   []string // labels as key, value pairs
	selector         []string // node selector as key, value pairs
	pool, topology   string
}

func (c *requestCols) targets() []any {
	return []any{&c.gpus, &c.milli, &c.gpuMem, &c.models, &c.pool, &c.topology, &c.cpu, &c.mem, &c.labels, &c.selector}
}

func (c *requestCols) request() scheduling.ResourceRequest {
	r := scheduling.ResourceRequest{GPUs: int(c.gpus), GPUMilli: int(c.milli), GPUMemoryMiB: c.gpuMem, GPUModels: c.models,
		Pool: c.pool, Topology: scheduling.Topology(c.topology), CPUMilli: c.cpu, MemoryMiB: c.mem}
	r.Labels = pairMap(c.labels)
	r.NodeSelector = pairMap(c.selector)
	return r
}

// pairMap turns key, value pairs into a map; nil when there are none.
func pairMap(pairs []string) map[string]string {
	if len(pairs) < 2 {
		return nil
	}
	m := make(map[string]string, len(pairs)/2)
	for i := 0; i+1 < len(pairs); i += 2 {
		m[pairs[i]] = pairs[i+1]
	}
	return m
}

// tiers maps stored tier names to tiers.
var tiers = func() map[string]vocab.Tier {
	m := map[string]vocab.Tier{}
	for _, t := range vocab.Tiers {
		m[t.String()] = t
	}
	return m
}()

// allocIDTarget scans an allocation ID: the cached grant when the cache
// has it (no string allocated for the ID), else the ID itself.
type allocIDTarget struct {
	cache  *snapshotCache
	cached **allocStatic
	id     *string
}

// ScanBytes implements pgtype.BytesScanner; v is only valid during the call.
func (t allocIDTarget) ScanBytes(v []byte) error {
	if st := t.cache.allocs[string(v)]; st != nil {
		*t.cached = st
		return nil
	}
	*t.id = string(v)
	return nil
}

// loadMissingAllocs reads, in the snapshot's transaction, the grant of the
// active allocations the cache lacks (all of them on the first load, then
// those granted since the previous load), adds it to the cache and fills
// in their snapshot rows.
func (l *snapshotLoader) loadMissingAllocs(ctx context.Context, tx pgx.Tx) error {
	if len(l.allocMissing) == 0 {
		return nil
	}
	ids := make([]string, len(l.allocMissing))
	at := make(map[string]int, len(l.allocMissing))
	for i, k := range l.allocMissing {
		ids[i] = l.allocs[k].ID
		at[ids[i]] = k
	}
	err := forEachRow(ctx, tx, `SELECT id, pool, node, cpu_milli, memory_mib, borrowed, gpu_uuids, gpu_milli
		FROM allocations WHERE id = ANY($1)`, []any{ids}, func(rows pgx.Rows) error {
		var g scheduling.Allocation
		var uuids []string
		var milli []int32
		if err := rows.Scan(&g.ID, &g.Pool, &g.Node, &g.CPUMilli, &g.MemoryMiB, &g.Borrowed, &uuids, &milli); err != nil {
			return err
		}
		if len(uuids) != len(milli) {
			return fmt.Errorf("allocation %s: %d GPUs but %d shares", g.ID, len(uuids), len(milli))
		}
		g.GPUs = make([]scheduling.GPUShare, len(uuids))
		for i := range uuids {
			g.GPUs[i] = scheduling.GPUShare{UUID: uuids[i], Milli: int(milli[i])}
		}
		k, ok := at[g.ID]
		if !ok {
			return fmt.Errorf("allocation %s: not asked for", g.ID)
		}
		delete(at, g.ID)
		l.cache.allocs[g.ID] = &allocStatic{grant: g, seen: l.cache.generation}
		jobID := l.allocs[k].JobID
		l.allocs[k] = g
		l.allocs[k].JobID = jobID
		return nil
	})
	if err != nil {
		return err
	}
	if len(at) > 0 {
		return fmt.Errorf("allocations %v: grant not found", slices.Sorted(maps.Keys(at)))
	}
	return nil
}

// loadMissingStatic reads, in the snapshot's transaction, the static part of
// the live jobs the cache lacks (all of them on the first load, then the jobs
// submitted since the previous load) and adds it to the cache.
func (l *snapshotLoader) loadMissingStatic(ctx context.Context, tx pgx.Tx) error {
	if len(l.missing) == 0 {
		return nil
	}
	return forEachRow(ctx, tx, `SELECT q.seq, q.job_id, q.project, q.queue, q.tier, q.submit_time,
		least(greatest(coalesce(ceil((j.spec->>'run_seconds')::float8), 0), 0), `+maxRunSecondsSQL+`)::bigint, NOT (j.spec ? 'command'),
		coalesce(j.recovery->>'profile', ''), `+requestColumns+`
		FROM job_queue q JOIN jobs j ON j.id = q.job_id WHERE q.seq = ANY($1)`, []any{l.missing}, func(rows pgx.Rows) error {
		var seq int64
		var tier string
		st := &jobStatic{seen: l.cache.generation}
		var c requestCols
		if err := rows.Scan(append([]any{&seq, &st.id, &st.project, &st.queue, &tier, &st.submitTime, &st.runSeconds, &st.simulated,
			&st.profile}, c.targets()...)...); err != nil {
			return err
		}
		var ok bool
		if st.tier, ok = tiers[tier]; !ok {
			return fmt.Errorf("job %s: unknown tier %q", st.id, tier)
		}
		st.request, st.submitTime = c.request(), st.submitTime.UTC()
		l.cache.jobs[seq] = st
		return nil
	})
}

// assemble fills in the static parts and checkpoints, links preemptions and
// drops finished jobs from the cache.
func (l *snapshotLoader) assemble() (*scheduling.Snapshot, error) {
	l.cache.lastCounts = rowCounts{len(l.allocs), len(l.running), len(l.pending)}
	snap := &scheduling.Snapshot{Quotas: l.quotas, Queues: l.queues}
	if l.version != l.cache.inventoryVersion {
		l.cache.inventory, l.cache.inventoryVersion = l.inv.pools(), l.version
	}
	snap.Pools = clonePools(l.cache.inventory)
	if l.shardPools != nil {
		// The cached inventory is every pool's (keyed by inventory_version,
		// which a shard change moves too); the shard's are kept.
		snap.Pools = slices.DeleteFunc(snap.Pools, func(p scheduling.Pool) bool { return !l.shardPools[p.Name] })
		snap.Quotas = slices.DeleteFunc(snap.Quotas, func(q scheduling.Quota) bool { return !l.shardPools[q.Pool] })
	}
	snap.InventoryVersion = l.version // the version snap.Pools was read at (scheduling.Planner)

	for i := range l.running {
		rj := &l.running[i]
		st := l.staticOf(l.runningStatic[i], l.runningSeq[i])
		if st == nil {
			return nil, fmt.Errorf("running job with queue seq %d: static columns not loaded", l.runningSeq[i])
		}
		a := &l.allocs[l.runningAlloc[i]]
		a.JobID = st.id
		rj.ID, rj.Project, rj.Queue, rj.Tier, rj.Request, rj.Allocation = st.id, st.project, st.queue, st.tier, st.request, *a
		cp, err := decodeCheckpoint(l.runningCheckpoint[i])
		if err != nil {
			return nil, fmt.Errorf("job %s: %w", rj.ID, err)
		}
		rj.Recovery.LastCheckpoint, rj.RecentPreemptions, rj.RunSeconds = cp, l.preempted[rj.ID], st.realRunSeconds(l.simSpeed)
		l.profileRecord(&rj.Recovery, st)
	}

	for i := range l.pending {
		pj := &l.pending[i]
		st := l.staticOf(l.pendingStatic[i], l.pendingSeq[i])
		if st == nil {
			return nil, fmt.Errorf("pending job with queue seq %d: static columns not loaded", l.pendingSeq[i])
		}
		pj.ID, pj.Project, pj.Queue, pj.Tier, pj.Request, pj.SubmitTime = st.id, st.project, st.queue, st.tier, st.request, st.submitTime
		cp, err := decodeCheckpoint(l.pendingCheckpoint[i])
		if err != nil {
			return nil, fmt.Errorf("job %s: %w", pj.ID, err)
		}
		pj.Recovery.LastCheckpoint, pj.PreemptionInProgress = cp, l.inProgress[pj.ID]
		l.profileRecord(&pj.Recovery, st)
		pj.PreemptionNoticeAt, pj.VictimsReleasedAt, pj.RecentPreemptions = l.noticeAt[pj.ID], l.released[pj.ID], l.preempted[pj.ID]
	}
	// Sorting here rather than in SQL keeps the wide allocation rows out of
	// the server's sort; the running jobs' IDs come from the cache anyway.
	snap.Allocations = sortedCopy(l.allocs, func(a, b *scheduling.Allocation) int { return cmpString(a.JobID, b.JobID) })
	snap.Running = sortedCopy(l.running, func(a, b *scheduling.RunningJob) int { return cmpString(a.ID, b.ID) })
	snap.Pending = l.pending // in submit order from job_queue_pending_order
	l.pruneCache()
	return snap, nil
}

// profileRecord gives a job's recovery evidence its profile and the
// profile's record in the evidence window.
func (l *snapshotLoader) profileRecord(r *scheduling.RecoveryEvidence, st *jobStatic) {
	r.Profile = st.profile
	rec := l.evidence[st.profile]
	r.ProfileVerifiedResumes, r.ProfileFailedResumes = rec[0], rec[1]
}

// sortedCopy returns xs sorted by cmp. It sorts a permutation and copies each
// element once, which beats swapping the large snapshot structs around.
func sortedCopy[T any](xs []T, cmp func(a, b *T) int) []T {
	perm := make([]int32, len(xs))
	for i := range perm {
		perm[i] = int32(i)
	}
	slices.SortFunc(perm, func(a, b int32) int { return cmp(&xs[a], &xs[b]) })
	out := make([]T, len(xs))
	for i, j := range perm {
		out[i] = xs[j]
	}
	return out
}

// staticOf returns st, or the entry loadMissingStatic added for seq.
func (l *snapshotLoader) staticOf(st *jobStatic, seq int64) *jobStatic {
	if st != nil {
		return st
	}
	return l.cache.jobs[seq]
}

// pruneCache drops the jobs and allocations this load did not see live; it
// only walks a map when it holds an eighth (and 64) more entries than there
// are live ones.
func (l *snapshotLoader) pruneCache() {
	// Entries of finished jobs and released allocations are never read
	// again (seqs and allocation IDs are not reused), so they may stay a
	// while: a sweep of every entry each load, when a few runs ended, cost
	// more than the memory they hold.
	if n := len(l.allocs); len(l.cache.allocs) > n+n/8+64 {
		for id, st := range l.cache.allocs {
			if st.seen != l.cache.generation {
				delete(l.cache.allocs, id)
			}
		}
	}
	if n := len(l.running) + len(l.pending); len(l.cache.jobs) > n+n/8+64 {
		for id, st := range l.cache.jobs {
			if st.seen != l.cache.generation {
				delete(l.cache.jobs, id)
			}
		}
	}
}

// clonePools copies the pool, node and GPU slices so that callers may modify
// their snapshot without touching the cached inventory.
func clonePools(pools []scheduling.Pool) []scheduling.Pool {
	out := slices.Clone(pools)
	for i := range out {
		out[i].Nodes = slices.Clone(out[i].Nodes)
		for j := range out[i].Nodes {
			out[i].Nodes[j].GPUs = slices.Clone(out[i].Nodes[j].GPUs)
		}
	}
	return out
}

// decodeCheckpoint decodes a checkpoint document; nil gives nil.
func decodeCheckpoint(raw []byte) (*scheduling.Checkpoint, error) {
	if raw == nil {
		return nil, nil
	}
	var cd checkpointDoc
	if err := json.Unmarshal(raw, &cd); err != nil {
		return nil, fmt.Errorf("decode checkpoint: %w", err)
	}
	return cd.checkpoint(), nil
}

// usageAt returns each project's decayed GPU-seconds at now, ordered by
// project: the stored total decayed from its as_of, plus the running
// allocations' usage so far.
func (s *Store) usageAt(stored []scheduling.ProjectUsage, running []scheduling.RunningJob, now time.Time) []scheduling.ProjectUsage {
	h := s.usageHalfLifeSeconds()
	index := make(map[string]int, len(stored))
	var out []scheduling.ProjectUsage
	for _, u := range stored {
		u.DecayedGPUSeconds = scheduling.DecayUsage(u.DecayedGPUSeconds, u.AsOf, now, h)
		u.AsOf = now
		index[u.Project] = len(out)
		out = append(out, u)
	}
	for _, rj := range running {
		d := now.Sub(rj.StartedAt).Seconds()
		if d <= 0 {
			continue
		}
		milli := 0
		for _, g := range rj.Allocation.GPUs {
			milli += g.Milli
		}
		i, ok := index[rj.Project]
		if !ok {
			i = len(out)
			index[rj.Project] = i
			out = append(out, scheduling.ProjectUsage{Project: rj.Project, AsOf: now})
		}
		out[i].DecayedGPUSeconds += scheduling.AccrueUsage(float64(milli)/scheduling.MilliPerGPU, d, h)
	}
	slices.SortFunc(out, func(a, b scheduling.ProjectUsage) int { return cmpString(a.Project, b.Project) })
	return out
}
