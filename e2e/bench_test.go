package e2e

import (
	"context"
	"fmt"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/gpugov/gpugov/api"
	"github.com/gpugov/gpugov/internal/queuereport"
	"github.com/gpugov/gpugov/internal/temporalx"
	"github.com/gpugov/gpugov/internal/trace/alibaba"
)

// Benchmark settings: a pool of 50 real 8-GPU G2 nodes (400 GPUs) so that
// capacity never delays a job; one-GPU jobs of 1 s of work at speed 1000
// (1 ms of real time), so that a lifecycle measures the service, not the job.
const (
	benchNodes    = 50
	benchSimSpeed = 1000
	benchRunS     = 1
	benchInFlight = 16 // concurrent submissions of the lifecycle benchmark
)

// BenchmarkService measures the service end to end on a dev server. Its
// sub-benchmarks share one environment (set up once, outside the timers):
//
//   - lifecycle: b.N jobs submitted through the API as fast as benchInFlight
//     clients go, timed until every one succeeded (submit → placed → run →
//     released), against b.N floor lifecycles on the same dev server
//     (benchLifecycle); reports floor/s, jobs/s and x-floor, their ratio.
//     Target x-floor ≥ 0.8.
//   - submit-latency-50rps: b.N submissions paced at 50 requests/s, each
//     timed from request to answer; reports p50-ms and p99-ms (nearest
//     rank). Target p99 ≤ 50 ms. submit-latency-5rps is the same at a rate
//     the dev server sustains on a small machine, for comparison.
//
// Run with a fixed count to get stable samples, e.g.
// go test ./e2e/ -run '^$' -bench Service -benchtime 300x
//
// GPUGOV_BENCH_TEMPORAL=cluster runs it on the Temporal server on PostgreSQL
// (temporaltest.StartCluster) instead of the dev server (dev, the default);
// `make bench-throughput BENCH_TEMPORAL=cluster`. There the server's CPU
// (temporal-cpu-ms) leaves out PostgreSQL's, which the dev server's in-process
// SQLite counts.
func BenchmarkService(b *testing.B) {
	dir := traceDir(b)
	nodes := traceNodes(b, dir, []nodePick{{"G2", 8, benchNodes}})
	backend := onDevServer
	switch v := os.Getenv("GPUGOV_BENCH_TEMPORAL"); v {
	case "", "dev":
	case "cluster":
		backend = onCluster
	default:
		b.Fatalf("GPUGOV_BENCH_TEMPORAL=%q: want dev or cluster", v)
	}
	e := startEnv(b, envOptions{pools: alibaba.Pools(nodes, alibaba.PoolOptions{}), simSpeed: benchSimSpeed, temporal: backend})
	var seq seqKeys
	b.Run("lifecycle", func(b *testing.B) { benchLifecycle(b, e, &seq) })
	for _, rps := range []int{50, 5} {
		b.Run(fmt.Sprintf("submit-latency-%drps", rps), func(b *testing.B) { benchSubmitLatency(b, e, &seq, rps) })
	}
}

// seqKeys hands out unique idempotency keys across benchmark rounds.
type seqKeys struct {
	mu sync.Mutex
	n  int
}

func (s *seqKeys) next() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.n++
	return fmt.Sprintf("bench-%d", s.n)
}

// benchSpec is a one-GPU simulated job of benchRunS seconds of work.
func benchSpec() *api.JobSpec {
	return &api.JobSpec{Project: "bench", Queue: "standard", RunSeconds: benchRunS,
		Resources: api.ResourceSpec{GPUs: 1, Pool: alibaba.DefaultPoolName}}
}

// benchLifecycle measures gpugov's lifecycles against the floor
// (floor_test.go) on the same dev server in the same run: b.N floor
// lifecycles and b.N gpugov jobs, in two alternating halves (floor, gpugov,
// floor, gpugov) so that a drift of the machine's load weighs on both. A
// gpugov lifecycle is a job submitted through the API by one of
// benchInFlight concurrent clients and timed until every job of the half
// succeeded and its workflow completed (submit → placed → run → released;
// the floor is timed to its workflows' completion too). It reports floor/s, jobs/s
// and their ratio x-floor (target ≥ 0.8); the CPU per lifecycle of the
// benchmark's process (serve and the floor's worker: self-cpu-ms/job,
// floor-self-cpu-ms/op) and of the dev server (temporal-cpu-ms/job,
// floor-temporal-cpu-ms/op) and the ratio of the floor's total to
// gpugov's (cpu-x-floor); what the jobs asked of Temporal: history events
// and workflow tasks per job workflow (events/job, wft/job), scheduler
// cycles and scheduler history events per job (cycles/job,
// sched-events/job); the store's decision and wait-event rows per job; and,
// with -v, the dev server's RPCs and persistence operations per lifecycle
// next to the floor's.
func benchLifecycle(b *testing.B, e *env, seq *seqKeys) {
	floor := startFloor(b, e.dev)
	floor.run(b, benchInFlight) // warm the floor's worker and task queues up
	clock := cpuClock{devPID: e.dev.PID()}
	var floorT, jobsT time.Duration
	var floorCPU, jobsCPU cpuSample
	var cost lifecycleCost
	floorOps, jobsOps := counterDelta{}, counterDelta{}
	b.ResetTimer()
	for half, n := range []int{b.N / 2, b.N - b.N/2} {
		if n == 0 {
			continue
		}
		m0, c0 := serverCounters(e.dev.MetricsURL), clock.sample()
		floorT += floor.run(b, n)
		c1 := clock.sample()
		floorCPU.add(c0, c1)
		b.StopTimer()
		m1 := serverCounters(e.dev.MetricsURL)
		floorOps.add(m0, m1)
		k0, h0 := schedulerCycles(b, e), schedulerEvents(b, e)
		b.StartTimer()
		c1 = clock.sample()
		d, ids := runLifecycles(b, e, seq, n)
		jobsT += d
		jobsCPU.add(c1, clock.sample())
		b.StopTimer()
		jobsOps.add(m1, serverCounters(e.dev.MetricsURL))
		cost.cycles += schedulerCycles(b, e) - k0
		if h := schedulerEvents(b, e); h >= h0 {
			cost.schedEvents += h - h0 // else it continued as new: not counted
			cost.schedCounted += n
		}
		cost.placed += n
		if half == 0 {
			countJobEvents(b, e, ids, 20, &cost)
			cost.storeJobs = len(ids)
			cost.decisions = e.queryInt(b, `SELECT count(*) FROM decisions WHERE job_id = ANY($1)`, ids)
			cost.waitEvents = e.queryInt(b, `SELECT count(*) FROM wait_events WHERE job_id = ANY($1)`, ids)
		}
		b.StartTimer()
	}
	b.StopTimer()
	floorRate := float64(b.N) / floorT.Seconds()
	jobsRate := float64(b.N) / jobsT.Seconds()
	b.ReportMetric(floorRate, "floor/s")
	b.ReportMetric(jobsRate, "jobs/s")
	b.ReportMetric(jobsRate/floorRate, "x-floor")
	perMs := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 / float64(b.N) }
	b.ReportMetric(perMs(floorCPU.self), "floor-self-cpu-ms/op")
	b.ReportMetric(perMs(jobsCPU.self), "self-cpu-ms/job")
	if floorCPU.dev > 0 {
		b.ReportMetric(perMs(floorCPU.dev), "floor-temporal-cpu-ms/op")
		b.ReportMetric(perMs(jobsCPU.dev), "temporal-cpu-ms/job")
		// The CPU ratio: less sensitive to the machine's other load than
		// the rates, which fall with the CPU left to the run.
		b.ReportMetric(float64(floorCPU.self+floorCPU.dev)/float64(jobsCPU.self+jobsCPU.dev), "cpu-x-floor")
	}
	cost.report(b)
	logCounters(b, floorOps, jobsOps, b.N)
}

// runLifecycles submits n jobs through benchInFlight concurrent clients
// and returns the time from the first submission until all succeeded, and
// the jobs' IDs.
func runLifecycles(b *testing.B, e *env, seq *seqKeys, n int) (time.Duration, []string) {
	b.Helper()
	ctx := context.Background()
	ids := make([]string, n)
	keys := make(chan int)
	var wg sync.WaitGroup
	var submitErr error
	var errOnce sync.Once
	began := time.Now()
	for range benchInFlight {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range keys {
				job, _, err := e.client.Submit(ctx, benchSpec(), seq.next())
				if err != nil {
					errOnce.Do(func() { submitErr = err })
					continue
				}
				ids[i] = job.ID
			}
		}()
	}
	for i := range n {
		keys <- i
	}
	close(keys)
	wg.Wait()
	if submitErr != nil {
		b.Fatalf("submit: %v", submitErr)
	}
	// Polled every 20 ms (waitFor's 200 ms would add up to 7 % to a half).
	deadline := time.Now().Add(10 * time.Minute)
	for {
		done := e.queryInt(b, `SELECT count(*) FROM jobs WHERE id = ANY($1) AND state = 'succeeded'`, ids)
		if done == n {
			break
		}
		if time.Now().After(deadline) {
			b.Fatalf("%d of %d benchmark jobs succeeded within 10 min", done, n)
		}
		time.Sleep(20 * time.Millisecond)
	}
	// The lifecycle ends with the job workflow's completion, as the floor's.
	for _, id := range ids {
		if err := e.dev.Client.GetWorkflow(ctx, temporalx.JobWorkflowID(id), "").Get(ctx, nil); err != nil {
			b.Fatalf("job workflow %s: %v", id, err)
		}
	}
	return time.Since(began), ids
}

// benchSubmitLatency submits b.N jobs at rps requests per second (open
// loop: a slow answer does not delay the next request) and reports the
// nearest-rank p50 and p99 latencies in milliseconds.
func benchSubmitLatency(b *testing.B, e *env, seq *seqKeys, rps int) {
	ctx := context.Background()
	lat := make([]float64, b.N)
	var wg sync.WaitGroup
	var failed sync.Once
	var submitErr error
	interval := time.Second / time.Duration(rps)
	b.ResetTimer()
	start := time.Now()
	for i := range b.N {
		if d := time.Until(start.Add(time.Duration(i) * interval)); d > 0 {
			time.Sleep(d)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			t0 := time.Now()
			_, _, err := e.client.Submit(ctx, benchSpec(), seq.next())
			lat[i] = float64(time.Since(t0).Microseconds()) / 1000
			if err != nil {
				failed.Do(func() { submitErr = err })
			}
		}()
	}
	wg.Wait()
	b.StopTimer()
	if submitErr != nil {
		b.Fatalf("submit: %v", submitErr)
	}
	slices.Sort(lat)
	p50, _ := queuereport.Percentile(lat, 50)
	p99, _ := queuereport.Percentile(lat, 99)
	b.ReportMetric(p50, "p50-ms")
	b.ReportMetric(p99, "p99-ms")
}
