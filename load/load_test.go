package load

import (
	"errors"
	"math"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gpugov/gpugov/internal/vocab"
	"github.com/gpugov/gpugov/store"
)

func TestParseVmRSS(t *testing.T) {
	got, err := parseVmRSS([]byte("Name:\tgpugov\nVmPeak:\t  999 kB\nVmRSS:\t  123456 kB\nThreads:\t12\n"))
	if err != nil || got != 123456*1024 {
		t.Fatalf("parseVmRSS = %d, %v; want %d", got, err, 123456*1024)
	}
	for _, bad := range []string{"Name:\tx\n", "VmRSS:\t12 MB\n", "VmRSS:\tx kB\n"} {
		if _, err := parseVmRSS([]byte(bad)); err == nil {
			t.Errorf("parseVmRSS(%q): no error", bad)
		}
	}
}

func TestReadRSSOfThisProcess(t *testing.T) {
	rss, err := ReadRSS(os.Getpid())
	if err != nil {
		t.Skipf("no /proc here: %v", err)
	}
	if rss < 1<<20 {
		t.Fatalf("RSS of the test process %d bytes, want at least 1 MiB", rss)
	}
}

func TestParseMetrics(t *testing.T) {
	text := `# HELP go_goroutines Number of goroutines.
# TYPE go_goroutines gauge
go_goroutines 42
go_gc_heap_live_bytes 1.048576e+06
go_memstats_heap_inuse_bytes 2097152
go_memstats_heap_inuse_bytes_other{x="y"} 5
gpugov_scheduling_cycle_duration_seconds_count{otel_scope_name="gpugov",shard="a b"} 3
gpugov_scheduling_cycle_duration_seconds_count{otel_scope_name="gpugov",shard="c"} 4
gpugov_scheduling_cycle_duration_seconds_sum{otel_scope_name="gpugov"} 0.35
`
	m, err := parseMetrics(strings.NewReader(text), heapMetrics, metricCycleCount, metricCycleSum, "absent_optional")
	if err != nil {
		t.Fatal(err)
	}
	if m["go_goroutines"] != 42 || m["go_gc_heap_live_bytes"] != 1<<20 || m["go_memstats_heap_inuse_bytes"] != 2<<20 ||
		m[metricCycleCount] != 7 || m[metricCycleSum] != 0.35 || m["absent_optional"] != 0 {
		t.Fatalf("parseMetrics = %v", m)
	}
	if _, err := parseMetrics(strings.NewReader("go_goroutines 1\n"), heapMetrics); err == nil ||
		!strings.Contains(err.Error(), "go_gc_heap_live_bytes") {
		t.Fatalf("missing series: err %v, want one naming go_gc_heap_live_bytes", err)
	}
}

func TestPercentileNearestRank(t *testing.T) {
	var v []time.Duration
	for i := 1; i <= 100; i++ {
		v = append(v, time.Duration(i)*time.Millisecond)
	}
	for q, want := range map[float64]time.Duration{0.5: 50 * time.Millisecond, 0.99: 99 * time.Millisecond, 1: 100 * time.Millisecond} {
		if got := percentile(v, q); got != want {
			t.Errorf("percentile(1..100 ms, %g) = %s, want %s", q, got, want)
		}
	}
	if percentile(nil, 0.5) != 0 || percentile(v[:1], 0.99) != time.Millisecond {
		t.Error("percentile of empty or one value")
	}
}

// samplesOf builds one sample per 5 s over window with rss(t) and heap(t) in MiB.
func samplesOf(window time.Duration, rss, heap func(min float64) float64) []MemorySample {
	var out []MemorySample
	for at := time.Duration(0); at <= window; at += 5 * time.Second {
		out = append(out, MemorySample{At: at, RSSBytes: int64(rss(at.Minutes()) * (1 << 20)),
			HeapLiveBytes: int64(heap(at.Minutes()) * (1 << 20))})
	}
	return out
}

func TestTrendFlatAndGrowing(t *testing.T) {
	window := 5 * time.Minute
	// A warm-up in the first half (fast growth) then flat with a sawtooth:
	// no trend, since only the second half is fitted.
	flat := samplesOf(window, func(m float64) float64 {
		if m < 2 {
			return 50 + 40*m
		}
		return 130 + float64(int(m*12)%3)
	}, func(float64) float64 { return 30 })
	tr := computeTrend(flat, window, 4)
	if !tr.OK || tr.Samples < 25 || tr.RSSSlopeMiBPerMin > 1 || tr.RSSSlopeMiBPerMin < -1 {
		t.Fatalf("flat second half: %+v, want OK with a slope near 0", tr)
	}
	if tr.SecondMinuteRSSMiB < 90 || tr.LastMinuteRSSMiB < 130 {
		t.Errorf("medians %+v", tr)
	}
	growing := samplesOf(window, func(m float64) float64 { return 100 }, func(m float64) float64 { return 20 + 5*m })
	tr = computeTrend(growing, window, 4)
	if tr.OK || tr.HeapSlopeMiBPerMin < 4.9 || tr.HeapSlopeMiBPerMin > 5.1 {
		t.Fatalf("heap growing 5 MiB/min: %+v, want not OK with slope 5", tr)
	}
}

func TestDecideNamesEveryFinding(t *testing.T) {
	r := &Report{Accepted: 10, MissingRows: []string{"j-1"}, MissingWorkflows: []string{"j-2", "j-3", "j-4", "j-5"},
		Unsettled: []string{"j-6 (running)"}, Kinds: []KindStats{
			{Kind: KindSubmit, ServerErr: 2, Errors: []string{"internal error"}},
			{Kind: KindCancel, Conflict: 3},
			{Kind: KindGet, TooMany: 1},
		}, Trend: Trend{OK: false, HeapSlopeMiBPerMin: 9}}
	r.decide(true)
	text := strings.Join(r.Failures, "\n")
	for _, want := range []string{"1 accepted jobs have no row: j-1", "4 accepted jobs have no workflow: j-2, j-3, j-4, … (1 more)",
		"1 accepted jobs are neither final", "submit: 2 answers 5xx (internal error)", "get: 1 answers 4xx, 1 of them 429", "memory grows"} {
		if !strings.Contains(text, want) {
			t.Errorf("failures lack %q:\n%s", want, text)
		}
	}
	if strings.Contains(text, "cancel") || r.Pass || r.Lost() != 5 || r.ServerErrors() != 2 {
		t.Errorf("pass %v lost %d 5xx %d; failures:\n%s (a cancel's 409 is expected)", r.Pass, r.Lost(), r.ServerErrors(), text)
	}
	ok := &Report{Accepted: 3, Kinds: []KindStats{{Kind: KindCancel, Conflict: 1}}, Trend: Trend{OK: false}}
	ok.decide(false)
	if !ok.Pass {
		t.Fatalf("clean report without the trend check: %v", ok.Failures)
	}
}

func TestRecorderCountsByStatus(t *testing.T) {
	r := newRecorder()
	for _, st := range []int{201, 201, 409, 429, 422, 503, 0} {
		r.scheduled(KindSubmit, "")
		r.answered(KindSubmit, st, time.Duration(st)*time.Millisecond, time.Millisecond, errIf(st))
	}
	r.scheduled(KindSubmit, "dropped")
	r.scheduled(KindGet, "no_target")
	s := r.snapshot(time.Second)[0]
	if s.Scheduled != 8 || s.Sent != 7 || s.Dropped != 1 || s.OK != 2 || s.Conflict != 1 || s.TooMany != 1 ||
		s.ClientErr != 1 || s.ServerErr != 1 || s.NoAnswer != 1 || s.RatePerSec != 7 {
		t.Fatalf("stats %+v", s)
	}
	// Latencies of answered requests only: 201 201 409 422 429 503 ms.
	if s.P50ms != 409 || s.Maxms != 503 {
		t.Errorf("p50 %g max %g, want 409 and 503", s.P50ms, s.Maxms)
	}
}

func errIf(status int) error {
	if status >= 200 && status < 300 {
		return nil
	}
	return errors.New("status " + strconv.Itoa(status))
}

func TestSettled(t *testing.T) {
	for _, c := range []struct {
		s    store.JobSettlement
		want bool
	}{
		{store.JobSettlement{State: vocab.JobSucceeded}, true},
		{store.JobSettlement{State: vocab.JobCancelled}, true},
		{store.JobSettlement{State: vocab.JobWaiting, Reason: vocab.ReasonHeld}, true},
		{store.JobSettlement{State: vocab.JobSubmitted, Reason: vocab.ReasonNotYetEvaluated}, false},
		{store.JobSettlement{State: vocab.JobSubmitted}, false},
		{store.JobSettlement{State: vocab.JobRunning}, false},
	} {
		if got := c.s.Settled(); got != c.want {
			t.Errorf("%+v.Settled() = %v, want %v", c.s, got, c.want)
		}
	}
}

// The pipeline summary fits finished, pending and holding jobs over the
// window's second half and averages the cycles over the whole window.
func TestComputePipeline(t *testing.T) {
	window := 4 * time.Minute
	var samples []MemorySample
	for i := 0; i <= 60; i++ { // every 5 s for 5 min: the drain's samples are left out
		at := time.Duration(i) * 5 * time.Second
		sec := at.Seconds()
		samples = append(samples, MemorySample{At: at, Pipeline: PipelineSample{
			Finished: int64(20 * sec), Pending: int64(100 + sec), Holding: 40,
			Cycles: int64(i * 2), CycleSeconds: float64(i*2) * 0.05,
		}})
	}
	ps := computePipeline(samples, window)
	if ps.Samples != 25 || math.Abs(ps.FinishedPerSecond-20) > 0.01 || math.Abs(ps.PendingPerMinute-60) > 0.5 ||
		math.Abs(ps.HoldingPerMinute) > 0.01 || ps.Cycles != 96 || math.Abs(ps.MeanCycleMillis-50) > 0.01 {
		t.Fatalf("pipeline %+v", ps)
	}
	if ps := computePipeline(nil, window); ps != (PipelineSummary{}) {
		t.Fatalf("no samples: %+v", ps)
	}
}
