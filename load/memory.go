package load

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"
)

// MemorySample is one look at gpugov serve's memory during a load run.
type MemorySample struct {
	// At is the time since the load started.
	At time.Duration `json:"at_ns"`
	// RSSBytes is VmRSS of /proc/<pid>/status, in bytes; 0 when no PID was given.
	RSSBytes int64 `json:"rss_bytes"`
	// HeapLiveBytes is go_gc_heap_live_bytes of serve's /metrics (the heap
	// the last GC marked live), in bytes; 0 when /metrics was not read.
	HeapLiveBytes int64 `json:"heap_live_bytes"`
	// HeapInuseBytes is go_memstats_heap_inuse_bytes, in bytes.
	HeapInuseBytes int64 `json:"heap_inuse_bytes"`
	// Goroutines is go_goroutines.
	Goroutines int64 `json:"goroutines"`
	// Load1 is the machine's 1-minute load average (/proc/loadavg), shared
	// by every process on it.
	Load1 float64 `json:"load1"`
	// Pipeline is the job pipeline behind the API at the same moment.
	Pipeline PipelineSample `json:"pipeline"`
}

// PipelineSample is the job pipeline at one sample: jobs of the run's
// database by state group (store.JobStateCounts: every job, not only the
// run's) and the scheduling cycles serve ran (its
// gpugov_scheduling_cycle_duration_seconds histogram, summed over labels).
// Zero when not read.
type PipelineSample struct {
	Finished int64 `json:"finished"` // succeeded, failed or cancelled
	Pending  int64 `json:"pending"`  // submitted or waiting
	Holding  int64 `json:"holding"`  // placed or running: holding an allocation
	// Cycles is the number of scheduling cycles so far; CycleSeconds their
	// total duration, in seconds.
	Cycles       int64   `json:"cycles"`
	CycleSeconds float64 `json:"cycle_seconds"`
}

// ReadRSS returns VmRSS of /proc/<pid>/status in bytes. It returns an error
// when the file cannot be read (the process ended) or has no VmRSS line.
func ReadRSS(pid int) (int64, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, fmt.Errorf("read RSS of pid %d: %w", pid, err)
	}
	return parseVmRSS(data)
}

// parseVmRSS reads the "VmRSS:   123456 kB" line of a /proc status file.
func parseVmRSS(status []byte) (int64, error) {
	sc := bufio.NewScanner(bytes.NewReader(status))
	for sc.Scan() {
		line := sc.Text()
		rest, ok := strings.CutPrefix(line, "VmRSS:")
		if !ok {
			continue
		}
		f := strings.Fields(rest)
		if len(f) != 2 || f[1] != "kB" {
			return 0, fmt.Errorf("VmRSS line %q: want \"VmRSS: N kB\"", line)
		}
		kb, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			return 0, fmt.Errorf("VmRSS line %q: %w", line, err)
		}
		return kb * 1024, nil
	}
	return 0, fmt.Errorf("no VmRSS line in the status file")
}

// readLoad1 returns the 1-minute load average of /proc/loadavg (0 when unreadable).
func readLoad1() float64 {
	data, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(data))
	if len(f) == 0 {
		return 0
	}
	v, _ := strconv.ParseFloat(f[0], 64)
	return v
}

// heapMetrics are the unlabelled series of serve's /metrics a sample keeps
// (internal/telemetry registers the Go runtime collector that exports them).
var heapMetrics = []string{"go_gc_heap_live_bytes", "go_memstats_heap_inuse_bytes", "go_goroutines"}

// Cycle series of serve's /metrics a sample keeps when present (they appear
// with the first cycle); summed over their labels.
const (
	metricCycleCount = "gpugov_scheduling_cycle_duration_seconds_count"
	metricCycleSum   = "gpugov_scheduling_cycle_duration_seconds_sum"
)

// ReadHeap fetches url (serve's /metrics) and returns the values of the
// unlabelled series go_gc_heap_live_bytes, go_memstats_heap_inuse_bytes and
// go_goroutines, and, once a cycle ran, the scheduling cycles' count and
// total seconds (metricCycleCount, metricCycleSum, summed over labels). It
// returns an error for a failed fetch, a non-200 answer or a missing heap
// series.
func ReadHeap(ctx context.Context, hc *http.Client, url string) (map[string]float64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("read %s: status %d", url, resp.StatusCode)
	}
	return parseMetrics(resp.Body, heapMetrics, metricCycleCount, metricCycleSum)
}

// parseMetrics reads the Prometheus text exposition and returns, for each
// name of required and optional, the sum of its series' values (labelled or
// not); it returns an error naming a missing required one.
func parseMetrics(r io.Reader, required []string, optional ...string) (map[string]float64, error) {
	want := map[string]bool{}
	for _, n := range append(slices.Clone(required), optional...) {
		want[n] = true
	}
	out := map[string]float64{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		series, value, ok := cutSeries(line)
		name, _, _ := strings.Cut(series, "{")
		if !ok || !want[name] {
			continue
		}
		v, err := strconv.ParseFloat(strings.Fields(value)[0], 64)
		if err != nil {
			return nil, fmt.Errorf("metrics line %q: %w", line, err)
		}
		out[name] += v
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read metrics: %w", err)
	}
	for _, n := range required {
		if _, ok := out[n]; !ok {
			return nil, fmt.Errorf("metrics: no series %s", n)
		}
	}
	return out, nil
}

// cutSeries splits an exposition line into its series (name and labels,
// whose values may hold spaces) and the rest (value, timestamp).
func cutSeries(line string) (series, rest string, ok bool) {
	if i := strings.IndexByte(line, '}'); i >= 0 && strings.IndexByte(line, '{') < i {
		rest, ok = strings.CutPrefix(line[i+1:], " ")
		return line[:i+1], rest, ok && strings.TrimSpace(rest) != ""
	}
	series, rest, ok = strings.Cut(line, " ")
	return series, rest, ok && strings.TrimSpace(rest) != ""
}

// Trend is the memory growth check of a load run (docs/design.md §8
// "Sustained load"). It has two modes, chosen by the backlog (pending jobs:
// submitted or waiting) over the window's second half:
//
//   - flat: the backlog grew by less than MinBacklogGrowthPerMin. Serve's
//     memory must then be flat too: the least-squares slopes of RSS and of
//     the live heap against time over the second half stay below
//     MaxSlopeMiBPerMin.
//   - backlog: the pipeline behind the API finished fewer jobs than were
//     accepted, so the backlog grew, and serve holds something for each
//     pending job (its row in the scheduler's snapshot cache, its cached job
//     workflow). Memory that follows the backlog is not a leak if it is
//     bounded per pending job and given back as the backlog drains. The
//     samples from the window's half to the end of sampling (the drain and
//     AfterDrain after it included), where the backlog rises and then falls
//     while time only rises, are fitted by least squares to
//     memory = a + k·pending + b·minutes, for RSS and for the live heap. The
//     check passes when both b (growth the backlog does not explain, MiB per
//     minute) stay below MaxSlopeMiBPerMin and both k (KiB per pending job)
//     below MaxPerPendingKiB. A leak of L KiB per submitted job shows in b
//     as L × the submission rate: 1.4 KiB at 50 jobs/s reaches the 4 MiB/min
//     bound, the same sensitivity as the flat mode's.
type Trend struct {
	// Samples is the number of samples in the second half.
	Samples int `json:"samples"`
	// RSSSlopeMiBPerMin and HeapSlopeMiBPerMin are the least-squares slopes
	// of RSS and of the live heap against time over the second half, in MiB
	// per minute.
	RSSSlopeMiBPerMin  float64 `json:"rss_slope_mib_per_min"`
	HeapSlopeMiBPerMin float64 `json:"heap_slope_mib_per_min"`
	// MaxSlopeMiBPerMin is the bound of the flat mode's slopes and of the
	// backlog mode's unexplained growth (Config.MaxGrowth).
	MaxSlopeMiBPerMin float64 `json:"max_slope_mib_per_min"`
	// SecondMinuteRSSMiB and LastMinuteRSSMiB are the median RSS of the load
	// window's second minute and of its last minute, in MiB (0 when the
	// window is shorter than two minutes).
	SecondMinuteRSSMiB float64 `json:"second_minute_rss_mib"`
	LastMinuteRSSMiB   float64 `json:"last_minute_rss_mib"`

	// BacklogPerMin is the least-squares growth of the pending jobs over
	// the second half, in jobs per minute.
	BacklogPerMin float64 `json:"backlog_per_min"`
	// Mode is "flat" or "backlog" (BacklogPerMin ≥ MinBacklogGrowthPerMin).
	Mode string `json:"mode"`
	// FitSamples is the number of samples of the backlog mode's fit (0 in
	// flat mode, or when the fit was singular: the backlog moved in step
	// with time, e.g. no drain was sampled).
	FitSamples int `json:"fit_samples"`
	// RSSPerPendingKiB and HeapPerPendingKiB are the fit's k, in KiB per
	// pending job; RSSUnexplainedMiBPerMin and HeapUnexplainedMiBPerMin its
	// b, in MiB per minute.
	RSSPerPendingKiB         float64 `json:"rss_per_pending_kib"`
	HeapPerPendingKiB        float64 `json:"heap_per_pending_kib"`
	RSSUnexplainedMiBPerMin  float64 `json:"rss_unexplained_mib_per_min"`
	HeapUnexplainedMiBPerMin float64 `json:"heap_unexplained_mib_per_min"`
	// MaxPerPendingKiB is the bound of k (Config.MaxPerPendingKiB).
	MaxPerPendingKiB float64 `json:"max_per_pending_kib"`
	// PeakPending is the largest backlog sampled. SecondMinuteHeapMiB is
	// the median live heap of the window's second minute; AfterDrainHeapMiB
	// the lowest live heap sampled once every job had settled (0: no such
	// sample), with AfterDrainPending jobs still pending then (those built
	// to wait for good); in MiB. They are reported, not checked.
	PeakPending         int64   `json:"peak_pending"`
	SecondMinuteHeapMiB float64 `json:"second_minute_heap_mib"`
	AfterDrainHeapMiB   float64 `json:"after_drain_heap_mib"`
	AfterDrainPending   int64   `json:"after_drain_pending"`
	// OK is true when the mode's check passes (or too few samples were
	// taken to fit a slope: fewer than 3).
	OK bool `json:"ok"`
}

// Bounds of Trend's backlog mode (docs/design.md §8 "Sustained load").
const (
	// MinBacklogGrowthPerMin is the backlog growth, in jobs per minute,
	// from which Trend judges memory per pending job (one job a second).
	MinBacklogGrowthPerMin = 60.0
	// DefaultMaxPerPendingKiB bounds serve's RSS and live heap per pending
	// job, in KiB: 100,000 pending jobs within 1.6 GiB of RSS. The
	// backlog-mode fit of `make load` on 2026-12-03 measured 9.7 KiB of RSS
	// and 3.9 KiB of live heap per pending job (peak backlog 7,706; design
	// §8 "Sustained load"); the bound leaves a margin of 1.6 over the RSS.
	DefaultMaxPerPendingKiB = 16.0
)

// PipelineSummary is the job pipeline over the load window's second half
// (the samples' PipelineSample), what says whether the scheduler and the job
// workflows kept up with the submissions: least-squares rates, so that a
// pipeline keeping up finishes about as many jobs per second as are accepted
// (less those built to wait) with a flat backlog.
type PipelineSummary struct {
	Samples int `json:"samples"`
	// FinishedPerSecond is the rate jobs ended at (succeeded, failed or
	// cancelled), per second.
	FinishedPerSecond float64 `json:"finished_per_s"`
	// PendingPerMinute and HoldingPerMinute are the growth of the pending
	// jobs (the backlog) and of those holding an allocation, per minute.
	PendingPerMinute float64 `json:"pending_per_min"`
	HoldingPerMinute float64 `json:"holding_per_min"`
	// Cycles is the number of scheduling cycles over the whole window and
	// MeanCycleMillis their mean duration, in milliseconds (0: none seen).
	Cycles          int64   `json:"cycles"`
	MeanCycleMillis float64 `json:"mean_cycle_ms"`
}

// computePipeline summarises the samples of [0, window]: rates over its
// second half, cycles over all of it.
func computePipeline(samples []MemorySample, window time.Duration) PipelineSummary {
	var ps PipelineSummary
	var xs, fin, pend, hold []float64
	var first, last *MemorySample
	for i := range samples {
		s := &samples[i]
		if s.At > window {
			continue
		}
		if first == nil {
			first = s
		}
		last = s
		if s.At >= window/2 {
			xs = append(xs, s.At.Seconds())
			fin = append(fin, float64(s.Pipeline.Finished))
			pend = append(pend, float64(s.Pipeline.Pending))
			hold = append(hold, float64(s.Pipeline.Holding))
		}
	}
	ps.Samples = len(xs)
	if len(xs) >= 3 {
		ps.FinishedPerSecond = slope(xs, fin)
		ps.PendingPerMinute = 60 * slope(xs, pend)
		ps.HoldingPerMinute = 60 * slope(xs, hold)
	}
	if first != nil {
		ps.Cycles = last.Pipeline.Cycles - first.Pipeline.Cycles
		if ps.Cycles > 0 {
			ps.MeanCycleMillis = 1000 * (last.Pipeline.CycleSeconds - first.Pipeline.CycleSeconds) / float64(ps.Cycles)
		}
	}
	return ps
}

// mib is bytes in MiB.
func mib(b float64) float64 { return b / (1 << 20) }

// computeTrend checks the samples of a run whose window is window (Trend's
// modes) against maxSlope (MiB/min) and maxPerPending (KiB per pending
// job). settledAt is the time since the start at which every accepted job
// had settled (0: never); the samples from then on are the after-drain ones.
func computeTrend(samples []MemorySample, window, settledAt time.Duration, maxSlope, maxPerPending float64) Trend {
	tr := Trend{MaxSlopeMiBPerMin: maxSlope, MaxPerPendingKiB: maxPerPending, Mode: "flat"}
	var xs, rss, heap, pend []float64
	for _, s := range samples {
		tr.PeakPending = max(tr.PeakPending, s.Pipeline.Pending)
		if s.At >= window/2 && s.At <= window {
			xs = append(xs, s.At.Minutes())
			rss = append(rss, mib(float64(s.RSSBytes)))
			heap = append(heap, mib(float64(s.HeapLiveBytes)))
			pend = append(pend, float64(s.Pipeline.Pending))
		}
	}
	tr.Samples = len(xs)
	if len(xs) >= 3 {
		tr.RSSSlopeMiBPerMin = slope(xs, rss)
		tr.HeapSlopeMiBPerMin = slope(xs, heap)
		tr.BacklogPerMin = slope(xs, pend)
	}
	if window >= 2*time.Minute {
		tr.SecondMinuteRSSMiB = medianMiB(samples, time.Minute, 2*time.Minute, rssOf)
		tr.LastMinuteRSSMiB = medianMiB(samples, window-time.Minute, window, rssOf)
		tr.SecondMinuteHeapMiB = medianMiB(samples, time.Minute, 2*time.Minute, heapOf)
	}
	if settledAt > 0 {
		for _, s := range samples {
			if h := mib(float64(s.HeapLiveBytes)); s.At >= settledAt && h > 0 && (tr.AfterDrainHeapMiB == 0 || h < tr.AfterDrainHeapMiB) {
				tr.AfterDrainHeapMiB, tr.AfterDrainPending = h, s.Pipeline.Pending
			}
		}
	}
	tr.OK = tr.RSSSlopeMiBPerMin < maxSlope && tr.HeapSlopeMiBPerMin < maxSlope
	if tr.BacklogPerMin < MinBacklogGrowthPerMin {
		return tr
	}
	tr.Mode, tr.OK = "backlog", false
	var ts, ps, rs, hs []float64
	for _, s := range samples {
		if s.At >= window/2 {
			ts = append(ts, s.At.Minutes())
			ps = append(ps, float64(s.Pipeline.Pending))
			rs = append(rs, mib(float64(s.RSSBytes)))
			hs = append(hs, mib(float64(s.HeapLiveBytes)))
		}
	}
	kr, br, okR := fitBacklog(ps, ts, rs)
	kh, bh, okH := fitBacklog(ps, ts, hs)
	if !okR || !okH {
		return tr
	}
	tr.FitSamples = len(ts)
	tr.RSSPerPendingKiB, tr.RSSUnexplainedMiBPerMin = 1024*kr, br
	tr.HeapPerPendingKiB, tr.HeapUnexplainedMiBPerMin = 1024*kh, bh
	tr.OK = br < maxSlope && bh < maxSlope && tr.RSSPerPendingKiB <= maxPerPending && tr.HeapPerPendingKiB <= maxPerPending
	return tr
}

// fitBacklog fits ys = a + k·ps + b·ts by ordinary least squares and
// returns k and b; ok is false for fewer than 4 points or when ps and ts are
// (nearly) collinear, so that k and b cannot be told apart. The normal
// equations are solved on centred data (Cramer's rule on the 2×2 system).
func fitBacklog(ps, ts, ys []float64) (k, b float64, ok bool) {
	n := len(ys)
	if n < 4 || len(ps) != n || len(ts) != n {
		return 0, 0, false
	}
	mean := func(v []float64) float64 {
		var s float64
		for _, x := range v {
			s += x
		}
		return s / float64(n)
	}
	mp, mt, my := mean(ps), mean(ts), mean(ys)
	var spp, stt, spt, spy, sty float64
	for i := range ys {
		p, t, y := ps[i]-mp, ts[i]-mt, ys[i]-my
		spp += p * p
		stt += t * t
		spt += p * t
		spy += p * y
		sty += t * y
	}
	det := spp*stt - spt*spt
	// Collinear when the correlation of ps and ts is above 0.999:
	// det/(spp·stt) = 1 − r².
	if spp == 0 || stt == 0 || det <= 0.002*spp*stt {
		return 0, 0, false
	}
	return (spy*stt - sty*spt) / det, (sty*spp - spy*spt) / det, true
}

// slope is the least-squares slope of ys against xs (len ≥ 2, xs not all equal; 0 otherwise).
func slope(xs, ys []float64) float64 {
	n := float64(len(xs))
	var sx, sy, sxx, sxy float64
	for i := range xs {
		sx += xs[i]
		sy += ys[i]
		sxx += xs[i] * xs[i]
		sxy += xs[i] * ys[i]
	}
	d := n*sxx - sx*sx
	if d == 0 {
		return 0
	}
	return (n*sxy - sx*sy) / d
}

// rssOf and heapOf pick a sample's RSS and live heap, in bytes.
func rssOf(s MemorySample) int64  { return s.RSSBytes }
func heapOf(s MemorySample) int64 { return s.HeapLiveBytes }

// medianMiB is the median of of(sample) in MiB over the samples taken in [from, to).
func medianMiB(samples []MemorySample, from, to time.Duration, of func(MemorySample) int64) float64 {
	var v []float64
	for _, s := range samples {
		if s.At >= from && s.At < to {
			v = append(v, mib(float64(of(s))))
		}
	}
	return median(v)
}
