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
	tr := computeTrend(flat, window, 0, 4, 8)
	if !tr.OK || tr.Samples < 25 || tr.RSSSlopeMiBPerMin > 1 || tr.RSSSlopeMiBPerMin < -1 {
		t.Fatalf("flat second half: %+v, want OK with a slope near 0", tr)
	}
	if tr.SecondMinuteRSSMiB < 90 || tr.LastMinuteRSSMiB < 130 {
		t.Errorf("medians %+v", tr)
	}
	growing := samplesOf(window, func(m float64) float64 { return 100 }, func(m float64) float64 { return 20 + 5*m })
	tr = computeTrend(growing, window, 0, 4, 8)
	if tr.OK || tr.Mode != "flat" || tr.HeapSlopeMiBPerMin < 4.9 || tr.HeapSlopeMiBPerMin > 5.1 {
		t.Fatalf("heap growing 5 MiB/min: %+v, want not OK with slope 5", tr)
	}
}

// backlogSamples is samplesOf over window plus a drain to window+drain:
// the backlog grows 1,500 jobs/min in the window and falls to 400 by the
// end of the drain; heap(t, pending) gives the live heap in MiB, RSS is
// twice it.
func backlogSamples(window, drain time.Duration, heap func(min float64, pending int64) float64) []MemorySample {
	var out []MemorySample
	for at := time.Duration(0); at <= window+drain; at += 5 * time.Second {
		pending := int64(1500 * at.Minutes())
		if at > window {
			pending = max(400, int64(1500*window.Minutes())-int64(3000*(at-window).Minutes()))
		}
		h := heap(at.Minutes(), pending)
		out = append(out, MemorySample{At: at, RSSBytes: int64(2 * h * (1 << 20)), HeapLiveBytes: int64(h * (1 << 20)),
			Pipeline: PipelineSample{Pending: pending}})
	}
	return out
}

func TestTrendBacklogMode(t *testing.T) {
	window, drain := 5*time.Minute, 4*time.Minute
	settled := window + 2*time.Minute + 30*time.Second // the backlog is back at 400 by then
	// 6 KiB of live heap (12 of RSS) per pending job, given back as the
	// backlog drains: RSS grows 17.6 MiB/min over the second half, far above
	// the flat bound, and the run passes.
	held := func(_ float64, pending int64) float64 { return 20 + 6*float64(pending)/1024 }
	tr := computeTrend(backlogSamples(window, drain, held), window, settled, 4, 16)
	if !tr.OK || tr.Mode != "backlog" || tr.RSSSlopeMiBPerMin < 4 || tr.FitSamples < 60 {
		t.Fatalf("memory held per pending job and given back: %+v, want OK in backlog mode", tr)
	}
	if tr.BacklogPerMin < 1490 || tr.BacklogPerMin > 1510 || tr.HeapPerPendingKiB < 5.9 || tr.HeapPerPendingKiB > 6.1 ||
		tr.RSSPerPendingKiB < 11.9 || tr.RSSPerPendingKiB > 12.1 || tr.AfterDrainPending != 400 || tr.PeakPending != 7500 ||
		tr.HeapUnexplainedMiBPerMin > 0.01 || tr.HeapUnexplainedMiBPerMin < -0.01 {
		t.Errorf("backlog figures %+v: want 1,500 jobs/min, 6 KiB heap and 12 KiB RSS per pending job, no unexplained growth, 400 pending after the drain", tr)
	}
	// A leak: the same, plus 3 KiB per job ever submitted or finished
	// (1,500 a minute), never given back: 4.4 MiB/min of heap, 8.8 of RSS.
	leak := func(m float64, pending int64) float64 { return held(m, pending) + 1500*3*m/1024 }
	tr = computeTrend(backlogSamples(window, drain, leak), window, settled, 4, 16)
	if tr.OK || tr.HeapUnexplainedMiBPerMin < 4.3 || tr.HeapUnexplainedMiBPerMin > 4.5 || tr.HeapPerPendingKiB > 6.1 {
		t.Fatalf("a leak of 3 KiB per job: %+v, want not OK with 4.4 MiB/min unexplained and still 6 KiB per pending job", tr)
	}
	// Too much per pending job: 10 KiB of heap, 20 of RSS.
	fat := func(_ float64, pending int64) float64 { return 20 + 10*float64(pending)/1024 }
	if tr = computeTrend(backlogSamples(window, drain, fat), window, settled, 4, 16); tr.OK || tr.RSSPerPendingKiB < 19.9 {
		t.Fatalf("20 KiB of RSS per pending job: %+v, want not OK", tr)
	}
	// Only the window sampled: the backlog rises with time, so the fit
	// cannot tell them apart and a growing run cannot pass.
	if tr = computeTrend(backlogSamples(window, 0, held), window, 0, 4, 16); tr.OK || tr.FitSamples != 0 {
		t.Fatalf("no drain sampled: %+v, want not OK without a fit", tr)
	}
	r := &Report{Accepted: 1, Trend: tr}
	if r.decide(true); r.Pass || !strings.Contains(strings.Join(r.Failures, ""), "no drain was sampled") {
		t.Errorf("no fit: failures %v", r.Failures)
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
