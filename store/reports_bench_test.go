package store_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/gpugov/gpugov/internal/queuereport"
	"github.com/gpugov/gpugov/internal/scheduling"
	"github.com/gpugov/gpugov/internal/vocab"
	"github.com/gpugov/gpugov/store"
	"github.com/gpugov/gpugov/store/storetest"
)

// BenchmarkReport1M measures the queue service report of the API (the
// default grouping, queue × tier × job type × pool) on a database of
// 1,000,000 jobs and 5,000,000 wait events: 30 days of history in 8 pools and
// 16 queues, made like queuereport's BenchmarkCompute data (see
// reportBenchData). Target: ≤ 2 s per report, however long the window.
//
// The report is read at one minute before the history's end, so that a
// window ending then has a live tail of 59 minutes (what a report at "now"
// computes from the records: the database clock minus 15 minutes bounds the
// stored summaries, rounded down to the hour). Sub-benchmarks:
//
//   - summaries/24h, summaries/7d, summaries/30d: store.QueueReport with its
//     summaries stored (one untimed call first), the windows ending then and
//     starting 24 hours, 7 days or 30 days (the whole history: 1,000,000
//     jobs and 5,000,000 wait events) before;
//   - summaries/cold-30d: the same 30-day report after dropping every stored
//     summary, so that it computes and stores 30 days of them first (the cost
//     of a first long report after migrating a large history);
//   - records/24h, records/7d, records/30d: the report computed from every
//     record of the window (LoadReportInput + queuereport.Compute), the
//     path of reports grouped by project and of the store before summaries.
//
// Besides wall time they report this process's CPU time and, for records/,
// the load and compute parts and the rows read. Bulk loading (COPY) is not
// timed. With GPUGOV_BENCH_EXPLAIN=1 it logs EXPLAIN (ANALYZE, BUFFERS) of
// the report's queries (reportExplain).
//
// It needs GPUGOV_BENCH_LARGE=1 (the load takes minutes and about 3 GB of
// database; GPUGOV_BENCH_REPORT_DB keeps it between runs) and is skipped with
// -short.
func BenchmarkReport1M(b *testing.B) {
	if testing.Short() {
		b.Skip("-short: the 1M-job report benchmark bulk-loads for minutes")
	}
	if os.Getenv("GPUGOV_BENCH_LARGE") != "1" {
		b.Skip("set GPUGOV_BENCH_LARGE=1 to bulk-load 1,000,000 jobs and 5,000,000 wait events")
	}
	ctx := context.Background()
	data := reportBenchData(1_000_000, 5_000_000)
	url := reportBenchDatabase(ctx, b, data)
	s, err := store.Open(ctx, url)
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	now := data.now.Add(-time.Minute)
	windows := []struct {
		name string
		from time.Time
	}{{"24h", now.Add(-24 * time.Hour)}, {"7d", now.Add(-7 * 24 * time.Hour)}, {"30d", data.now.Add(-30 * 24 * time.Hour)}}
	b.Run("summaries/cold-30d", func(b *testing.B) {
		opts := queuereport.Options{Window: queuereport.Window{From: windows[2].from, To: now}, Now: now}
		for b.Loop() {
			b.StopTimer()
			if _, err := s.Pool().Exec(ctx, `DELETE FROM report_summaries`); err != nil {
				b.Fatal(err)
			}
			b.StartTimer()
			if _, err := s.QueueReport(ctx, opts, ""); err != nil {
				b.Fatal(err)
			}
		}
	})
	for _, w := range windows {
		b.Run("summaries/"+w.name, func(b *testing.B) {
			opts := queuereport.Options{Window: queuereport.Window{From: w.from, To: now}, Now: now}
			if _, err := s.QueueReport(ctx, opts, ""); err != nil { // stores what the window's summaries lack
				b.Fatal(err)
			}
			if os.Getenv("GPUGOV_BENCH_EXPLAIN") == "1" {
				reportExplain(ctx, b, s, opts.Window.From, now)
			}
			cpu0 := reportProcessCPU(b)
			b.ResetTimer()
			var r queuereport.Report
			for b.Loop() {
				if r, err = s.QueueReport(ctx, opts, ""); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			if r.Total.Jobs == 0 || r.Total.StarvingJobs == 0 {
				b.Fatalf("report without jobs or starving jobs: %+v", r.Total)
			}
			b.ReportMetric(float64((reportProcessCPU(b)-cpu0).Milliseconds())/float64(b.N), "client-cpu-ms/op")
			b.ReportMetric(float64(r.Total.Jobs), "jobs")
		})
	}
	for _, w := range windows {
		b.Run("records/"+w.name, func(b *testing.B) {
			window := queuereport.Window{From: w.from, To: now}
			opts := queuereport.Options{Window: window, Now: now}
			var load, compute time.Duration
			var in *queuereport.Input
			cpu0 := reportProcessCPU(b)
			b.ResetTimer()
			for b.Loop() {
				t0 := time.Now()
				if in, err = s.LoadReportInput(ctx, window, now); err != nil {
					b.Fatal(err)
				}
				t1 := time.Now()
				r, err := queuereport.Compute(*in, opts)
				if err != nil {
					b.Fatal(err)
				}
				load, compute = load+t1.Sub(t0), compute+time.Since(t1)
				if r.Total.Jobs == 0 {
					b.Fatal("empty report")
				}
			}
			b.StopTimer()
			n := float64(b.N)
			b.ReportMetric(float64(load.Milliseconds())/n, "load-ms/op")
			b.ReportMetric(float64(compute.Milliseconds())/n, "compute-ms/op")
			b.ReportMetric(float64((reportProcessCPU(b)-cpu0).Milliseconds())/n, "client-cpu-ms/op")
			b.ReportMetric(float64(len(in.Jobs)), "jobs")
			b.ReportMetric(float64(len(in.WaitEvents)), "events")
		})
	}
}

// reportExplain logs EXPLAIN (ANALYZE, BUFFERS) of the queries of a report
// over [from, now): the stored summaries it reads, and the records of its
// live tail (the hour the summaries end in, to now), as QueueReport runs them.
func reportExplain(ctx context.Context, b *testing.B, s *store.Store, from, now time.Time) {
	tail := now.Truncate(time.Hour)
	for _, q := range store.ReportExplainQueries(from, tail, now) {
		rows, err := s.Pool().Query(ctx, "EXPLAIN (ANALYZE, BUFFERS) "+q.SQL, q.Args...)
		if err != nil {
			b.Fatal(err)
		}
		var plan []string
		for rows.Next() {
			var line string
			if err := rows.Scan(&line); err != nil {
				b.Fatal(err)
			}
			plan = append(plan, line)
		}
		rows.Close()
		b.Logf("%s:\n%s", q.What, strings.Join(plan, "\n"))
	}
}

// reportBenchDatabase returns the URL of a database holding data: a fresh
// one (dropped after the benchmark) or, when GPUGOV_BENCH_REPORT_DB names a
// database URL, that database, migrated and loaded only if it holds no job
// yet, so that repeated runs skip the minutes of bulk loading. The reused
// database is never dropped; it must hold nothing but this data.
func reportBenchDatabase(ctx context.Context, b *testing.B, data *reportBench) string {
	url := os.Getenv("GPUGOV_BENCH_REPORT_DB")
	if url == "" {
		url = storetest.NewDatabase(b)
		if err := data.copyInto(ctx, url); err != nil {
			b.Fatal(err)
		}
		return url
	}
	if err := store.Migrate(ctx, url); err != nil {
		b.Fatal(err)
	}
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close(ctx)
	var jobs int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM jobs`).Scan(&jobs); err != nil {
		b.Fatal(err)
	}
	switch {
	case jobs == 0:
		if err := data.copyInto(ctx, url); err != nil {
			b.Fatal(err)
		}
	case jobs != len(data.jobs):
		b.Fatalf("GPUGOV_BENCH_REPORT_DB holds %d jobs, not this benchmark's %d", jobs, len(data.jobs))
	}
	return url
}

// reportProcessCPU returns this process's user + system CPU time.
func reportProcessCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// benchJob, benchRun and benchEvent are the generated rows, kept compact
// (times in µs since the Unix epoch, 0 for NULL) so that 5 M events fit in
// little memory before COPY.
type benchJob struct {
	submit, waitingSince, end int64
	queue, pool, project      int16
	jobType                   int8
	shape                     int8
	models                    bool // the request names its pool's model
	state                     string
}

type benchRun struct {
	job        int32
	start, end int64
	node       int32 // node index within the job's pool
}

type benchEvent struct {
	job        int32
	reason     int8
	start, end int64
}

// reportBench is one generated history.
type reportBench struct {
	now    time.Time
	jobs   []benchJob
	runs   []benchRun
	events []benchEvent
}

var (
	benchPools      = []string{"g2-a", "g2-b", "g2-c", "t4", "v100m32", "g3", "p100", "g2-d"}
	benchPoolModels = []string{"G2", "G2", "G2", "T4", "V100M32", "G3", "P100", "G2"}
	benchJobTypes   = []string{"training", "inference", "notebook", "batch"}
)

// benchNodesPerPool × 8 GPUs per node make the inventory (6,400 GPUs).
const benchNodesPerPool = 100

// reportBenchShapes are request shapes (GPUs, milli-GPU per GPU) with weights
// after the Alibaba cluster-trace-gpu-v2023 pod list, as in queuereport's
// benchmark.
var reportBenchShapes = []struct{ gpus, milli, weight int }{
	{1, 1000, 3911}, {0, 0, 1088}, {1, 810, 1078}, {1, 470, 750}, {1, 320, 328}, {1, 650, 253},
	{1, 230, 140}, {1, 460, 128}, {1, 590, 75}, {1, 160, 74}, {1, 550, 72}, {1, 220, 62},
	{1, 370, 47}, {8, 1000, 44}, {1, 110, 24}, {1, 480, 19}, {2, 1000, 16}, {4, 1000, 15},
}

// reportBenchData generates nJobs jobs over 30 days with about nEvents wait
// events (3 to 7 splitting each initial wait), like queuereport's
// makeBenchData: exponential waits by tier, 1 % of waits 1–3 days, 1 in 30
// jobs cancelled while waiting, 12 % of started jobs requeued once and 3 %
// twice, runs of 3 h mean. Rows are generated in submit order, so the tables'
// physical order follows time, as a live system's does.
func reportBenchData(nJobs, nEvents int) *reportBench {
	rng := rand.New(rand.NewPCG(42, 42))
	const day = 24 * time.Hour
	start := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	d := &reportBench{now: start.Add(30 * day), jobs: make([]benchJob, 0, nJobs),
		runs: make([]benchRun, 0, nJobs*6/5), events: make([]benchEvent, 0, nEvents)}
	now := d.now.UnixMicro()
	meanWait := [4]float64{3600, 1200, 300, 60} // seconds, by vocab.Tier (experiment first)
	totalWeight := 0
	for _, s := range reportBenchShapes {
		totalWeight += s.weight
	}
	shape := func() int8 {
		w := rng.IntN(totalWeight)
		for i, s := range reportBenchShapes {
			if w < s.weight {
				return int8(i)
			}
			w -= s.weight
		}
		return 0
	}
	exp := func(mean float64) int64 { return int64(rng.ExpFloat64() * mean * 1e6) }
	gap := float64(30*day/time.Second) / float64(nJobs)
	submit := start.UnixMicro()
	eventsLeft := nEvents
	for i := 0; i < nJobs; i++ {
		submit += exp(gap)
		q := rng.IntN(16)
		j := benchJob{submit: submit, waitingSince: submit, queue: int16(q), pool: int16(rng.IntN(len(benchPools))),
			project: int16(rng.IntN(200)), jobType: int8(rng.IntN(len(benchJobTypes))), shape: shape(), state: "succeeded"}
		j.models = rng.IntN(5) == 0
		wait := exp(meanWait[vocab.Tiers[q%4]])
		if rng.IntN(100) == 0 {
			wait = int64(1+rng.IntN(3)) * int64(day/time.Microsecond) // a starving job
		}
		waitEnd := submit + wait
		k := min(3+rng.IntN(5), eventsLeft)
		eventsLeft -= k
		for e := 0; e < k; e++ {
			ev := benchEvent{job: int32(i), reason: int8(rng.IntN(len(vocab.WaitReasons))), start: submit + wait*int64(e)/int64(k)}
			if e < k-1 || waitEnd < now {
				ev.end = submit + wait*int64(e+1)/int64(k)
			}
			d.events = append(d.events, ev)
		}
		switch {
		case waitEnd >= now:
			j.state = "waiting"
		case rng.IntN(30) == 0:
			j.state, j.end = "cancelled", waitEnd
		default:
			d.addRuns(&j, int32(i), waitEnd, now, rng, exp)
		}
		d.jobs = append(d.jobs, j)
	}
	return d
}

// addRuns adds a started job's runs: one, or two or three after requeues.
func (d *reportBench) addRuns(j *benchJob, job int32, runStart, now int64, rng *rand.Rand, exp func(float64) int64) {
	nRuns := 1
	if r := rng.IntN(100); r < 12 {
		nRuns = 2
	} else if r < 15 {
		nRuns = 3
	}
	for r := 0; r < nRuns; r++ {
		end := runStart + exp(3*3600)
		run := benchRun{job: job, start: runStart, node: int32(rng.IntN(benchNodesPerPool))}
		if end >= now {
			d.runs = append(d.runs, run)
			j.state = "running"
			return
		}
		run.end = end
		d.runs = append(d.runs, run)
		if r == nRuns-1 {
			j.end = end
			return
		}
		runStart = end + exp(600) // requeued after a preemption
		j.waitingSince = end
		if runStart >= now {
			j.state = "waiting"
			return
		}
	}
}

// Row IDs sort like the rows' times, as the store's ULIDs do.
func benchJobID(i int32) string { return fmt.Sprintf("j-%026d", i) }
func benchAllocID(i int) string { return fmt.Sprintf("a-%026d", i) }
func benchRunID(i int) string   { return fmt.Sprintf("r-%026d", i) }
func benchGPU(pool, node, g int) string {
	return fmt.Sprintf("GPU-%s-%04d-%d", benchPools[pool], node, g)
}

// copyInto writes the inventory, queues and history into the database at
// url with COPY. Triggers and foreign keys are skipped (session_replication_role
// replica): the rows are consistent by construction and job_queue, which
// only the scheduler reads, is left empty. It ends with VACUUM ANALYZE, as
// autovacuum would have run on tables of this age.
func (d *reportBench) copyInto(ctx context.Context, url string) error {
	s, err := store.Open(ctx, url)
	if err != nil {
		return err
	}
	defer s.Close()
	if err := s.UpsertInventory(ctx, benchInventory()); err != nil {
		return err
	}
	if err := s.UpsertQueues(ctx, benchQueues()); err != nil {
		return err
	}
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, `SET session_replication_role = replica`); err != nil {
		return err
	}
	for _, t := range d.tables() {
		if _, err := conn.CopyFrom(ctx, pgx.Identifier{t.name}, t.columns, t.rows); err != nil {
			return fmt.Errorf("copy %s: %w", t.name, err)
		}
	}
	_, err = conn.Exec(ctx, `VACUUM ANALYZE`)
	return err
}

type benchTable struct {
	name    string
	columns []string
	rows    pgx.CopyFromSource
}

// tables lists the COPY of each table, parents first.
func (d *reportBench) tables() []benchTable {
	return []benchTable{
		{"jobs", []string{"id", "project", "queue", "tier", "request", "state", "submit_time", "waiting_since", "updated_at", "ended_at"}, d.jobRows()},
		{"allocations", []string{"id", "job_id", "run_id", "pool", "node", "granted_at", "released_at"}, d.allocationRows()},
		{"allocation_gpus", []string{"allocation_id", "gpu_uuid", "ord", "milli", "active"}, d.allocationGPURows()},
		{"runs", []string{"id", "job_id", "run_number", "allocation_id", "started_at", "ended_at", "outcome"}, d.runRows()},
		{"wait_events", []string{"job_id", "reason", "started_at", "ended_at"}, d.eventRows()},
	}
}

// micros returns t µs as a time, or nil for 0 (NULL).
func micros(t int64) any {
	if t == 0 {
		return nil
	}
	return time.UnixMicro(t).UTC()
}

func (d *reportBench) jobRows() pgx.CopyFromSource {
	i := 0
	return pgx.CopyFromFunc(func() ([]any, error) {
		if i == len(d.jobs) {
			return nil, nil
		}
		j := &d.jobs[i]
		s := reportBenchShapes[j.shape]
		req := fmt.Sprintf(`{"gpus":%d,"pool":%q,"labels":{"job_type":%q}`, s.gpus, benchPools[j.pool], benchJobTypes[j.jobType])
		if s.milli > 0 && s.milli < 1000 {
			req += fmt.Sprintf(`,"gpu_milli":%d`, s.milli)
		}
		if j.models {
			req += fmt.Sprintf(`,"gpu_models":[%q]`, benchPoolModels[j.pool])
		}
		updated := j.end
		if updated == 0 {
			updated = j.waitingSince
		}
		row := []any{benchJobID(int32(i)), fmt.Sprintf("proj-%03d", j.project), fmt.Sprintf("q%02d", j.queue),
			vocab.Tiers[j.queue%4].String(), req + "}", j.state, micros(j.submit), micros(j.waitingSince),
			micros(updated), micros(j.end)}
		i++
		return row, nil
	})
}

// runOutcome is the outcome of run k of a job: the last one ends the job,
// earlier ones were preempted.
func (d *reportBench) runOutcome(k int) any {
	r := d.runs[k]
	switch {
	case r.end == 0:
		return nil
	case k+1 < len(d.runs) && d.runs[k+1].job == r.job:
		return "preempted"
	case d.jobs[r.job].state == "succeeded":
		return "succeeded"
	}
	return "preempted" // requeued, not restarted yet
}

func (d *reportBench) allocationRows() pgx.CopyFromSource {
	k := 0
	return pgx.CopyFromFunc(func() ([]any, error) {
		if k == len(d.runs) {
			return nil, nil
		}
		r := d.runs[k]
		pool := benchPools[d.jobs[r.job].pool]
		row := []any{benchAllocID(k), benchJobID(r.job), benchRunID(k), pool, fmt.Sprintf("%s-n%04d", pool, r.node),
			micros(r.start), micros(r.end)}
		k++
		return row, nil
	})
}

func (d *reportBench) allocationGPURows() pgx.CopyFromSource {
	k, g := 0, 0
	return pgx.CopyFromFunc(func() ([]any, error) {
		for k < len(d.runs) {
			r := d.runs[k]
			s := reportBenchShapes[d.jobs[r.job].shape]
			if g < s.gpus {
				milli := s.milli
				row := []any{benchAllocID(k), benchGPU(int(d.jobs[r.job].pool), int(r.node), g), int16(g), int32(milli), r.end == 0}
				g++
				return row, nil
			}
			k, g = k+1, 0
		}
		return nil, nil
	})
}

func (d *reportBench) runRows() pgx.CopyFromSource {
	k := 0
	number := int32(0)
	return pgx.CopyFromFunc(func() ([]any, error) {
		if k == len(d.runs) {
			return nil, nil
		}
		r := d.runs[k]
		if k > 0 && d.runs[k-1].job == r.job {
			number++
		} else {
			number = 1
		}
		row := []any{benchRunID(k), benchJobID(r.job), number, benchAllocID(k), micros(r.start), micros(r.end), d.runOutcome(k)}
		k++
		return row, nil
	})
}

func (d *reportBench) eventRows() pgx.CopyFromSource {
	k := 0
	return pgx.CopyFromFunc(func() ([]any, error) {
		if k == len(d.events) {
			return nil, nil
		}
		e := d.events[k]
		row := []any{benchJobID(e.job), string(vocab.WaitReasons[e.reason]), micros(e.start), micros(e.end)}
		k++
		return row, nil
	})
}

// benchInventory is benchNodesPerPool nodes of 8 GPUs in each bench pool.
func benchInventory() []scheduling.Pool {
	var pools []scheduling.Pool
	for p, name := range benchPools {
		pool := scheduling.Pool{Name: name, Available: true, Stage: vocab.StageObserve}
		for n := range benchNodesPerPool {
			node := scheduling.Node{Name: fmt.Sprintf("%s-n%04d", name, n), Schedulable: true}
			for g := range 8 {
				node.GPUs = append(node.GPUs, scheduling.GPU{UUID: benchGPU(p, n, g), Model: benchPoolModels[p],
					MemoryMiB: 81920, NVLinkDomain: "nv0", Healthy: true})
			}
			pool.Nodes = append(pool.Nodes, node)
		}
		pools = append(pools, pool)
	}
	return pools
}

// benchQueues are q00…q15; queue q has tier Tiers[q%4].
func benchQueues() []scheduling.Queue {
	var qs []scheduling.Queue
	for q := range 16 {
		qs = append(qs, scheduling.Queue{Name: fmt.Sprintf("q%02d", q), Tier: vocab.Tiers[q%4],
			ServiceShare: float64(1 + q%4), MaxWait: time.Duration(1+q%4) * 30 * time.Minute})
	}
	return qs
}
