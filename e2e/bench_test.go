package e2e

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/gpugov/gpugov/api"
	"github.com/gpugov/gpugov/internal/queuereport"
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
//     released); reports jobs/s. Target ≥ 50/s.
//   - submit-latency-50rps: b.N submissions paced at 50 requests/s, each
//     timed from request to answer; reports p50-ms and p99-ms (nearest
//     rank). Target p99 ≤ 50 ms. submit-latency-5rps is the same at a rate
//     the dev server sustains on a small machine, for comparison.
//
// Run with a fixed count to get stable samples, e.g.
// go test ./e2e/ -run '^$' -bench Service -benchtime 300x
func BenchmarkService(b *testing.B) {
	dir := traceDir(b)
	nodes := traceNodes(b, dir, []nodePick{{"G2", 8, benchNodes}})
	e := startEnv(b, envOptions{pools: alibaba.Pools(nodes, alibaba.PoolOptions{}), simSpeed: benchSimSpeed})
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

// benchLifecycle submits b.N jobs through benchInFlight concurrent clients
// and reports jobs/s from the first submission until all succeeded.
func benchLifecycle(b *testing.B, e *env, seq *seqKeys) {
	ctx := context.Background()
	ids := make([]string, b.N)
	keys := make(chan int)
	var wg sync.WaitGroup
	var submitErr error
	var errOnce sync.Once
	b.ResetTimer()
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
	for i := range b.N {
		keys <- i
	}
	close(keys)
	wg.Wait()
	if submitErr != nil {
		b.Fatalf("submit: %v", submitErr)
	}
	waitFor(b, 10*time.Minute, "every benchmark job succeeded", func() (bool, string) {
		n := e.queryInt(b, `SELECT count(*) FROM jobs WHERE id = ANY($1) AND state = 'succeeded'`, ids)
		return n == b.N, fmt.Sprintf("%d of %d succeeded", n, b.N)
	})
	elapsed := time.Since(began)
	b.StopTimer()
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "jobs/s")
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
