package store

import (
	"cmp"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/gpugov/gpugov/internal/queuereport"
	"github.com/gpugov/gpugov/internal/vocab"
)

// JobTypeLabel is the request label (scheduling.ResourceRequest.Labels) whose
// value is a job's type in the queue service report (queuereport.Job.JobType,
// e.g. training, inference, notebook). Jobs without it have the empty type.
const JobTypeLabel = "job_type"

// The report's queries. $1 is the window start, $2 the end of its observed
// part (min(to, now)). A job belongs to the report when it was submitted
// before $2 and had not ended before $1 (jobs.ended_at, migration 00060):
// its span report_job_span(submit_time, ended_at) overlaps [$1, $2), which
// the GiST index jobs_span_idx (migration 00080) answers for any window,
// past or recent. Every run of such a job is read, because its requeue waits
// are the gaps between runs even when they began before the window. With a
// project, $3 limits the jobs (and so their runs and wait events) to it.
const (
	reportJobCond        = `report_job_span(submit_time, ended_at) && tstzrange($1, $2, '[)')`
	reportJobProjectCond = reportJobCond + ` AND project = $3`

	// The columns of a report job; the job type label is the last parameter.
	reportJobsSelect = `
		SELECT id, project, queue, tier, state, submit_time, ended_at,
			coalesce(request->>'pool', ''), coalesce((request->>'gpus')::int4, 0),
			coalesce((request->>'gpu_milli')::int4, 0), request->>'gpu_models',
			coalesce(request->'labels'->>%s::text, '')
		FROM jobs
		WHERE %s`

	// Every run of the report's jobs. The semi-join hashes only the jobs'
	// IDs (a long window) or probes runs by job (a short one).
	reportRunsSelect = `
		SELECT job_id, started_at, ended_at
		FROM runs
		WHERE job_id IN (SELECT id FROM jobs WHERE %s)`

	// Wait events of the report's jobs that overlap [$1, $2), or touch its
	// start: an event ending exactly at $1 adds no time but may be a job's
	// latest reason. Probing wait_events_job_idx by job keeps a past window
	// from reading every event that ended after its start.
	reportWaitEventsSelect = `
		SELECT job_id, reason, started_at, ended_at
		FROM wait_events
		WHERE job_id IN (SELECT id FROM jobs WHERE %s)
			AND started_at < $2 AND (ended_at IS NULL OR ended_at >= $1)`

	// Allocations released in [$1, $2): their pool, node and job.
	reportReleasesSQL = `
		SELECT released_at, pool, node, job_id
		FROM allocations
		WHERE released_at >= $1 AND released_at < $2`

	// The distinct GPU models of each node, sorted and joined by modelSep.
	reportNodeModelsSQL = `
		SELECT node, string_agg(DISTINCT model, E'\x1f' ORDER BY model)
		FROM gpus GROUP BY node`

	reportTargetsSQL = `SELECT name, service_share, max_wait_s, min_share, max_share FROM queues`

	// Each pool's usable GPUs (healthy, on schedulable nodes), the base of
	// the queues' pool shares as Plan counts it; float8 for the binary read.
	reportCapacitySQL = `
		SELECT n.pool, count(*)::float8
		FROM gpus g JOIN nodes n ON n.name = g.node
		WHERE g.healthy AND n.schedulable
		GROUP BY n.pool ORDER BY n.pool`
)

// reportQueries returns the jobs, runs and wait-event queries with their
// arguments for a window ending at end, limited to project unless it is "".
func reportQueries(from, end time.Time, project string) (jobs, runs, events string, args, jobArgs []any) {
	cond, args := reportJobCond, []any{from, end}
	if project != "" {
		cond, args = reportJobProjectCond, append(args, project)
	}
	label := fmt.Sprintf("$%d", len(args)+1)
	jobArgs = append(slices.Clone(args), JobTypeLabel)
	return fmt.Sprintf(reportJobsSelect, label, cond), fmt.Sprintf(reportRunsSelect, cond),
		fmt.Sprintf(reportWaitEventsSelect, cond), args, jobArgs
}

// modelSep separates GPU models in reportNodeModelsSQL's string_agg; model
// names are NVML product names and never contain the ASCII unit separator.
const modelSep = "\x1f"

// reportSessionSQL tunes the report's transaction: the memory to hash a
// million job IDs (the runs' semi-join) without spilling batches to disk
// (the server default of 4 MB is sized for many small concurrent queries),
// no JIT compilation, which the planner's cost of a long window's
// million-row plans triggers and which costs more (seconds of LLVM
// optimisation) than it saves on these simple expressions, and the random
// page cost of cached data: a short window's rows are recent and in memory,
// so probing the runs of 40,000 jobs by index beats a sequential scan of every
// run ever recorded, which the default cost of 4 (a disk seek) prefers.
const reportSessionSQL = `SET LOCAL work_mem = '256MB'; SET LOCAL jit = off; SET LOCAL random_page_cost = 1.1`

// reportQueryOptions make every report query use the extended protocol with
// binary results, whatever DefaultQueryExecMode the pool was configured
// with: the row decoders read PostgreSQL's binary formats directly, which is
// what lets millions of rows be read without a Scan call per value.
var reportQueryOptions = []any{pgx.QueryExecModeCacheDescribe, pgx.QueryResultFormats{pgx.BinaryFormatCode}}

// MaxReportWindow bounds the window LoadReportInput reads: 90 days, so that
// one request cannot make the store read the whole history.
const MaxReportWindow = vocab.MaxReportWindowSeconds * time.Second

// LoadReportInput reads the records of the queue service report
// (queuereport.Compute) over window as observed at now, in one read-only
// REPEATABLE READ transaction so that jobs, runs, wait events and releases are
// seen at one instant:
//
//   - Jobs: submitted before end = min(window.To, now) and not ended before
//     window.From; JobType is the request label JobTypeLabel; State the stored
//     state; End is jobs.ended_at, raised to the end of the job's last run
//     where clocks disagree; CancelledWhileWaiting is set for a cancelled job
//     that ended after its last run (or never ran).
//   - Runs: every run of those jobs (requeue waits before the window need
//     them). GPUMilli is the job's request, GPUs × milli-GPU per GPU, which is
//     what Plan places and ApplyCycle grants. A run left open by a finished
//     job is closed at the job's end.
//   - WaitEvents: those overlapping [window.From, end), or ending at its start.
//   - Releases: allocations released in [window.From, end), with their pool,
//     their job's request in milli-GPU and, as the models freed, the distinct
//     sorted models of their node's GPUs (GPU servers carry one model; a node
//     no longer in the inventory gives none, which matches every job).
//   - Targets: every queue's service share, wait objective, min_share and max_share.
//   - Capacity: each pool's usable GPUs now (healthy, on schedulable
//     nodes), the base of the queues' pool shares.
//   - ProjectWeights: the fair-share weights SetProjectWeights set.
//
// Queries (plans measured by BenchmarkReport1M): jobs through the GiST index
// jobs_span_idx (their span overlaps the window); their runs and wait events
// by nested loops probing runs and wait_events_job_idx by job; releases by
// allocations_released_at_idx. A window covering most of the history turns
// each into a sequential scan and the semi-joins into hash joins on job IDs,
// which reportSessionSQL keeps in memory. Long windows are what QueueReport's
// stored summaries avoid reading.
//
// Runs and wait events are grouped by job in the order of Jobs, which is what
// Compute matches fastest. Errors: an empty or inverted window, one longer
// than MaxReportWindow, now before window.From, a stored tier or wait reason
// Compute would reject, or database errors, wrapped with "load report input".
func (s *Store) LoadReportInput(ctx context.Context, window queuereport.Window, now time.Time) (*queuereport.Input, error) {
	return s.LoadProjectReportInput(ctx, window, now, "")
}

// LoadProjectReportInput is LoadReportInput limited to project's jobs (all
// projects when project is ""): the project's jobs, their runs and wait
// events — what filtering the whole input by project keeps (api's report
// tests check that) — read without the other projects' rows. Releases,
// queue targets and pool capacity name no job and are read whole; the
// project weights are SetProjectWeights'.
func (s *Store) LoadProjectReportInput(ctx context.Context, window queuereport.Window, now time.Time, project string) (*queuereport.Input, error) {
	if err := checkReportWindow(window, now); err != nil {
		return nil, fmt.Errorf("store: load report input: %w", err)
	}
	var in *queuereport.Input
	err := pgx.BeginTxFunc(ctx, s.pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly},
		func(tx pgx.Tx) error {
			var err error
			in, err = loadReportInput(ctx, tx, window.From, reportEnd(window, now), project)
			return err
		})
	if err != nil {
		return nil, fmt.Errorf("store: load report input: %w", err)
	}
	in.ProjectWeights = s.reportProjectWeights()
	return in, nil
}

// reportEnd is min(window.To, now), the end of the window's observed part.
func reportEnd(window queuereport.Window, now time.Time) time.Time {
	if now.Before(window.To) {
		return now
	}
	return window.To
}

// loadReportInput reads the records of [from, end) in tx (see
// LoadReportInput), limited to project unless it is "".
func loadReportInput(ctx context.Context, tx pgx.Tx, from, end time.Time, project string) (*queuereport.Input, error) {
	l := newReportLoader(from, end)
	if err := l.load(ctx, tx, project); err != nil {
		return nil, err
	}
	return l.assemble(), nil
}

// checkReportWindow rejects windows LoadReportInput does not read, with a
// *ValidationError (ErrInvalid).
func checkReportWindow(w queuereport.Window, now time.Time) error {
	switch {
	case w.From.IsZero():
		return invalidf("window.from", "window: from and to are required")
	case w.To.IsZero():
		return invalidf("window.to", "window: from and to are required")
	case !w.To.After(w.From):
		return invalidf("window.to", "window: to (%s) must be after from (%s)", w.To.Format(time.RFC3339), w.From.Format(time.RFC3339))
	case w.To.Sub(w.From) > MaxReportWindow:
		return invalidf("window.from", "window: %s is longer than the %s limit", w.To.Sub(w.From), MaxReportWindow)
	case now.Before(w.From):
		return invalidf("window.from", "now (%s) is before window.from (%s)", now.Format(time.RFC3339), w.From.Format(time.RFC3339))
	}
	return nil
}

// reportLoader accumulates the rows of one LoadReportInput call.
type reportLoader struct {
	from, end time.Time
	jobs      []queuereport.Job
	jobIdx    map[string]int32
	runs      []loadedRun
	events    []loadedEvent
	releases  []queuereport.Release
	targets   []queuereport.QueueTarget
	capacity  []queuereport.PoolCapacity // pools' usable GPUs (reportCapacitySQL)
	strs      map[string]string          // interned project, queue, pool, job type and state values
	models    map[string][]string        // interned request model lists by their raw JSON text
	nodes     map[string][]string        // the models of each node's GPUs
	times     timeSlab
}

// loadedRun and loadedEvent are records tied to their job's index in jobs,
// with times in microseconds since the Unix epoch (PostgreSQL's resolution)
// and noMicros for NULL. They hold no pointers, so millions of them cost the
// garbage collector nothing until assemble builds the Input.
type loadedRun struct {
	job        int32
	start, end int64 // end is noMicros while running
}

type loadedEvent struct {
	job        int32
	reason     uint8 // index in vocab.RecordedReasons
	start, end int64 // end is noMicros while open
}

// noMicros stands for a NULL time in loadedRun and loadedEvent.
const noMicros = math.MinInt64

func newReportLoader(from, end time.Time) *reportLoader {
	return &reportLoader{from: from, end: end, jobIdx: map[string]int32{}, strs: map[string]string{},
		models: map[string][]string{}, nodes: map[string][]string{}}
}

// load runs the report queries; jobs come first because the other rows are
// tied to them by ID.
func (l *reportLoader) load(ctx context.Context, tx pgx.Tx, project string) error {
	if _, err := tx.Exec(ctx, reportSessionSQL); err != nil {
		return err
	}
	jobsSQL, runsSQL, eventsSQL, args, jobArgs := reportQueries(l.from, l.end, project)
	steps := []struct {
		what string
		sql  string
		args []any
		row  func([][]byte) error
	}{
		{"jobs", jobsSQL, jobArgs, l.jobRow},
		{"runs", runsSQL, args, l.runRow},
		{"GPU models", reportNodeModelsSQL, nil, l.nodeModelsRow},
		{"releases", reportReleasesSQL, []any{l.from, l.end}, l.releaseRow},
		{"wait events", eventsSQL, args, l.eventRow},
		{"queues", reportTargetsSQL, nil, l.targetRow},
		{"pool capacity", reportCapacitySQL, nil, l.capacityRow},
	}
	for _, st := range steps {
		if err := queryRaw(ctx, tx, st.sql, st.args, st.row); err != nil {
			return fmt.Errorf("read %s: %w", st.what, err)
		}
	}
	return nil
}

// queryRaw runs sql with binary results and calls row with each row's raw
// values (nil for NULL), which are valid only during the call.
func queryRaw(ctx context.Context, tx pgx.Tx, sql string, args []any, row func([][]byte) error) error {
	rows, err := tx.Query(ctx, sql, append(slices.Clone(reportQueryOptions), args...)...)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		if err := row(rows.RawValues()); err != nil {
			return err
		}
	}
	return rows.Err()
}

// jobRow reads one row of reportJobsSQL.
func (l *reportLoader) jobRow(v [][]byte) error {
	id := string(v[0])
	tier, err := vocab.ParseTier(string(v[3]))
	if err != nil {
		return fmt.Errorf("job %s: %w", id, err)
	}
	submit, err := binaryTime(v[5])
	if err != nil {
		return fmt.Errorf("job %s: submit_time: %w", id, err)
	}
	j := queuereport.Job{
		ID: id, Project: l.intern(v[1]), Queue: l.intern(v[2]), Tier: tier, State: l.intern(v[4]),
		SubmitTime: submit, Pool: l.intern(v[7]), JobType: l.intern(v[11]),
		Request: queuereport.Request{GPUs: int(binaryInt32(v[8])), GPUMilli: int(binaryInt32(v[9]))},
	}
	if v[6] != nil {
		if j.End, err = l.times.ptr(v[6]); err != nil {
			return fmt.Errorf("job %s: ended_at: %w", id, err)
		}
	}
	j.Cancelled = j.State == string(vocab.JobCancelled)
	if v[10] != nil {
		if j.Request.Models, err = l.modelList(v[10]); err != nil {
			return fmt.Errorf("job %s: request.gpu_models: %w", id, err)
		}
	}
	l.jobIdx[id] = int32(len(l.jobs))
	l.jobs = append(l.jobs, j)
	return nil
}

// runRow reads one row of reportRunsSQL.
func (l *reportLoader) runRow(v [][]byte) error {
	j, ok := l.jobIdx[string(v[0])] // a map lookup does not copy the bytes
	if !ok {
		return fmt.Errorf("run of job %s, which the jobs query did not return", v[0])
	}
	r := loadedRun{job: j, end: noMicros}
	var err error
	if r.start, err = binaryMicros(v[1]); err != nil {
		return fmt.Errorf("run of job %s: started_at: %w", l.jobs[j].ID, err)
	}
	if v[2] != nil {
		if r.end, err = binaryMicros(v[2]); err != nil {
			return fmt.Errorf("run of job %s: ended_at: %w", l.jobs[j].ID, err)
		}
	}
	l.runs = append(l.runs, r)
	return nil
}

// nodeModelsRow reads one row of reportNodeModelsSQL.
func (l *reportLoader) nodeModelsRow(v [][]byte) error {
	if v[1] != nil {
		l.nodes[string(v[0])] = strings.Split(string(v[1]), modelSep)
	}
	return nil
}

// releaseRow reads one row of reportReleasesSQL. The GPUs freed are taken to
// be of the models of the allocation's node (GPU servers carry one model),
// none when the node has left the inventory; their milli-GPU is the job's
// request, which is what Plan places.
func (l *reportLoader) releaseRow(v [][]byte) error {
	at, err := binaryTime(v[0])
	if err != nil {
		return fmt.Errorf("release: released_at: %w", err)
	}
	rel := queuereport.Release{At: at, Pool: l.intern(v[1]), Models: l.nodes[string(v[2])]}
	if j, ok := l.jobIdx[string(v[3])]; ok {
		rel.GPUMilli = l.jobs[j].Request.DemandMilli()
	}
	l.releases = append(l.releases, rel)
	return nil
}

// eventRow reads one row of reportWaitEventsSQL.
func (l *reportLoader) eventRow(v [][]byte) error {
	j, ok := l.jobIdx[string(v[0])]
	if !ok {
		return nil // only with clocks that disagree: an event closed after its job's end
	}
	reason, ok := waitReason(v[1])
	if !ok {
		return fmt.Errorf("wait event of job %s: unknown reason %q", l.jobs[j].ID, v[1])
	}
	e := loadedEvent{job: j, reason: reason, end: noMicros}
	var err error
	if e.start, err = binaryMicros(v[2]); err != nil {
		return fmt.Errorf("wait event of job %s: started_at: %w", l.jobs[j].ID, err)
	}
	if v[3] != nil {
		if e.end, err = binaryMicros(v[3]); err != nil {
			return fmt.Errorf("wait event of job %s: ended_at: %w", l.jobs[j].ID, err)
		}
	}
	l.events = append(l.events, e)
	return nil
}

// targetRow reads one queue of reportTargetsSQL. The objective is rounded to
// the nanosecond as queuereport.QueueTarget's JSON form is.
func (l *reportLoader) targetRow(v [][]byte) error {
	l.targets = append(l.targets, queuereport.QueueTarget{
		Queue: string(v[0]), ServiceShare: binaryFloat64(v[1]),
		MaxWait:  time.Duration(math.Round(binaryFloat64(v[2]) * float64(time.Second))),
		MinShare: binaryFloat64(v[3]), MaxShare: binaryFloat64(v[4]),
	})
	return nil
}

// capacityRow reads one pool of reportCapacitySQL.
func (l *reportLoader) capacityRow(v [][]byte) error {
	l.capacity = append(l.capacity, queuereport.PoolCapacity{Pool: string(v[0]), GPUs: binaryFloat64(v[1])})
	return nil
}

// intern returns b as a string shared by every equal value: a report has
// millions of rows but few distinct projects, queues, pools and states.
func (l *reportLoader) intern(b []byte) string {
	if s, ok := l.strs[string(b)]; ok {
		return s
	}
	s := string(b)
	l.strs[s] = s
	return s
}

// modelList decodes a request's gpu_models (a JSON array of strings), shared
// by every job with the same text.
func (l *reportLoader) modelList(raw []byte) ([]string, error) {
	if m, ok := l.models[string(raw)]; ok {
		return m, nil
	}
	var m []string
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, err
	}
	if len(m) == 0 {
		m = nil
	}
	l.models[string(raw)] = m
	return m, nil
}

// waitReason returns the index in vocab.RecordedReasons of the reason spelled b;
// false for a reason the store never writes.
func waitReason(b []byte) (uint8, bool) {
	for i, r := range vocab.RecordedReasons {
		if string(r) == string(b) {
			return uint8(i), true
		}
	}
	return 0, false
}

// assemble links runs and events to their jobs and returns the input: runs
// and events grouped by job in the order of Jobs, runs by start.
func (l *reportLoader) assemble() *queuereport.Input {
	in := &queuereport.Input{Jobs: l.jobs, Targets: l.targets, Releases: l.releases, Capacity: l.capacity}
	if in.Releases == nil {
		in.Releases = []queuereport.Release{}
	}
	runs, runOff := groupByJob(len(l.jobs), l.runs, func(r *loadedRun) int32 { return r.job })
	in.Runs = make([]queuereport.Run, 0, len(runs))
	for j := range l.jobs {
		rs := runs[runOff[j]:runOff[j+1]]
		if len(rs) > 1 {
			slices.SortFunc(rs, func(a, b loadedRun) int { return cmp.Compare(a.start, b.start) })
		}
		in.Runs = l.appendJobRuns(in.Runs, &in.Jobs[j], rs)
	}
	events, _ := groupByJob(len(l.jobs), l.events, func(e *loadedEvent) int32 { return e.job })
	in.WaitEvents = make([]queuereport.WaitEvent, len(events))
	for i, e := range events {
		w := queuereport.WaitEvent{JobID: l.jobs[e.job].ID, Reason: vocab.RecordedReasons[e.reason], Start: microsTime(e.start)}
		if e.end != noMicros {
			w.End = l.times.put(microsTime(e.end))
		}
		in.WaitEvents[i] = w
	}
	return in
}

// appendJobRuns appends job j's runs (sorted by start) and sets the job's
// FirstStart, End and CancelledWhileWaiting from them.
func (l *reportLoader) appendJobRuns(out []queuereport.Run, j *queuereport.Job, rs []loadedRun) []queuereport.Run {
	if len(rs) == 0 {
		j.CancelledWhileWaiting = j.Cancelled && j.End != nil
		return out
	}
	jobEnd := int64(noMicros)
	if j.End != nil {
		jobEnd = j.End.UnixMicro()
	}
	j.FirstStart = l.times.put(microsTime(rs[0].start))
	milli := j.Request.DemandMilli() // what Plan places and ApplyCycle grants for the request
	last := &rs[len(rs)-1]
	if last.end == noMicros && jobEnd != noMicros {
		last.end = max(jobEnd, last.start) // a finished job's run left open: it ended with the job
	}
	for _, r := range rs {
		run := queuereport.Run{JobID: j.ID, Start: microsTime(r.start), GPUMilli: milli}
		if r.end != noMicros {
			run.End = l.times.put(microsTime(r.end))
		}
		out = append(out, run)
	}
	if jobEnd != noMicros && jobEnd < last.end {
		j.End, jobEnd = out[len(out)-1].End, last.end // the job cannot have ended before its last run did
	}
	j.CancelledWhileWaiting = j.Cancelled && jobEnd != noMicros && last.end != noMicros && jobEnd > last.end
	return out
}

// groupByJob returns recs ordered stably by their job index (a counting
// sort) and the offsets: job j's records are sorted[off[j]:off[j+1]].
func groupByJob[T any](jobs int, recs []T, job func(*T) int32) (sorted []T, off []int32) {
	off = make([]int32, jobs+1)
	for i := range recs {
		off[job(&recs[i])+1]++
	}
	for j := 1; j <= jobs; j++ {
		off[j] += off[j-1]
	}
	sorted = make([]T, len(recs))
	fill := slices.Clone(off[:jobs])
	for i := range recs {
		j := job(&recs[i])
		sorted[fill[j]] = recs[i]
		fill[j]++
	}
	return sorted, off
}

// pgEpochMicros is 2000-01-01T00:00:00Z, PostgreSQL's timestamp epoch, in
// microseconds since the Unix epoch.
const pgEpochMicros = 946_684_800_000_000

// binaryMicros decodes a timestamptz in PostgreSQL's binary format
// (microseconds since 2000-01-01 UTC as a big-endian int64) into
// microseconds since the Unix epoch. It returns an error for ±infinity and
// for a value of the wrong size.
func binaryMicros(b []byte) (int64, error) {
	if len(b) != 8 {
		return 0, fmt.Errorf("timestamptz of %d bytes", len(b))
	}
	us := int64(binary.BigEndian.Uint64(b))
	if us == math.MaxInt64 || us == math.MinInt64 {
		return 0, fmt.Errorf("infinite timestamp")
	}
	return us + pgEpochMicros, nil
}

// binaryTime decodes a binary timestamptz as a UTC time (see binaryMicros).
func binaryTime(b []byte) (time.Time, error) {
	us, err := binaryMicros(b)
	if err != nil {
		return time.Time{}, err
	}
	return microsTime(us), nil
}

// microsTime is the UTC time us microseconds after the Unix epoch.
func microsTime(us int64) time.Time { return time.UnixMicro(us).UTC() }

// binaryInt32 and binaryFloat64 decode int4 and float8 in
// PostgreSQL's binary format (big-endian); the queries never return NULL for them.
func binaryInt32(b []byte) int32     { return int32(binary.BigEndian.Uint32(b)) }
func binaryFloat64(b []byte) float64 { return math.Float64frombits(binary.BigEndian.Uint64(b)) }

// timeSlab hands out *time.Time from large blocks, so that millions of
// optional times cost a few allocations instead of one each.
type timeSlab struct{ block []time.Time }

const timeSlabSize = 1 << 14

// put returns a pointer to a copy of t.
func (s *timeSlab) put(t time.Time) *time.Time {
	if len(s.block) == cap(s.block) {
		s.block = make([]time.Time, 0, timeSlabSize)
	}
	s.block = append(s.block, t)
	return &s.block[len(s.block)-1]
}

// ptr decodes a binary timestamptz into the slab.
func (s *timeSlab) ptr(b []byte) (*time.Time, error) {
	t, err := binaryTime(b)
	if err != nil {
		return nil, err
	}
	return s.put(t), nil
}
