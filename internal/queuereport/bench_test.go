package queuereport

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gpugov/gpugov/internal/vocab"
)

// benchShape is a request shape with its weight, after the Alibaba
// cluster-trace-gpu-v2023 "default" pod list (num_gpu × gpu_milli counts:
// 3911 × 1×1000, 1088 × CPU only, 1078 × 1×810, 750 × 1×470, …, 44 × 8×1000).
type benchShape struct {
	gpus, milli, weight int
}

var benchShapes = []benchShape{
	{1, 1000, 3911}, {0, 0, 1088}, {1, 810, 1078}, {1, 470, 750}, {1, 320, 328}, {1, 650, 253},
	{1, 230, 140}, {1, 460, 128}, {1, 590, 75}, {1, 160, 74}, {1, 550, 72}, {1, 220, 62},
	{1, 370, 47}, {8, 1000, 44}, {1, 110, 24}, {1, 480, 19}, {2, 1000, 16}, {4, 1000, 15},
}

var (
	benchOnce  sync.Once
	benchInput Input
	benchOpts  Options
)

// benchData builds, once, 1,000,000 jobs over 30 days in 8 pools and 16 queues
// with 1.14 M runs, as many releases and 5.0 M wait events (3 to 7 per job).
func benchData() (Input, Options) {
	benchOnce.Do(func() {
		benchInput, benchOpts = makeBenchData(1_000_000, 5_000_000, rand.New(rand.NewPCG(42, 42)))
	})
	return benchInput, benchOpts
}

func makeBenchData(nJobs, nEvents int, rng *rand.Rand) (Input, Options) {
	const day = 24 * time.Hour
	start := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	now := start.Add(30 * day)
	pools := []string{"g2-a", "g2-b", "g2-c", "t4", "v100m32", "g3", "p100", "g2-d"}
	poolModel := []string{"G2", "G2", "G2", "T4", "V100M32", "G3", "P100", "G2"}
	jobTypes := []string{"training", "inference", "notebook", "batch"}
	meanWait := map[vocab.Tier]float64{ // seconds, by tier
		vocab.TierProduction: 60, vocab.TierKeyProject: 300,
		vocab.TierStandard: 1200, vocab.TierExperiment: 3600,
	}
	var totalWeight int
	for _, s := range benchShapes {
		totalWeight += s.weight
	}
	shape := func() benchShape {
		w := rng.IntN(totalWeight)
		for _, s := range benchShapes {
			if w < s.weight {
				return s
			}
			w -= s.weight
		}
		return benchShapes[0]
	}
	exp := func(mean float64) time.Duration {
		return time.Duration(rng.ExpFloat64() * mean * float64(time.Second))
	}
	tp := func(t time.Time) *time.Time { return &t }

	in := Input{Jobs: make([]Job, 0, nJobs), Runs: make([]Run, 0, nJobs*6/5),
		WaitEvents: make([]WaitEvent, 0, nEvents), Releases: make([]Release, 0, nJobs*6/5)}
	for q := 0; q < 16; q++ {
		in.Targets = append(in.Targets, QueueTarget{Queue: fmt.Sprintf("q%02d", q), ServiceShare: float64(1 + q%4),
			MaxWait: time.Duration(1+q%4) * 30 * time.Minute})
	}
	reasons := vocab.WaitReasons
	gap := float64(30*day) / float64(nJobs)
	submit := start
	eventsLeft := nEvents
	for i := 0; i < nJobs; i++ {
		submit = submit.Add(time.Duration(rng.ExpFloat64() * gap))
		q := rng.IntN(16)
		p := rng.IntN(len(pools))
		s := shape()
		j := Job{
			ID: fmt.Sprintf("job-%07d", i), Queue: fmt.Sprintf("q%02d", q), Tier: vocab.Tiers[q%4],
			JobType: jobTypes[rng.IntN(len(jobTypes))], Pool: pools[p], Project: fmt.Sprintf("proj-%03d", rng.IntN(200)),
			Request: Request{GPUs: s.gpus, GPUMilli: s.milli}, SubmitTime: submit, State: "completed",
		}
		if rng.IntN(5) == 0 {
			j.Request.Models = []string{poolModel[p]}
		}
		wait := exp(meanWait[j.Tier])
		if rng.IntN(100) == 0 {
			wait = time.Duration(1+rng.IntN(3)) * day // a starving job
		}
		// The whole initial wait is split into wait events of several reasons.
		waitEnd := submit.Add(wait)
		k := min(3+rng.IntN(5), eventsLeft)
		eventsLeft -= k
		for e := 0; e < k; e++ {
			ev := WaitEvent{JobID: j.ID, Reason: reasons[rng.IntN(len(reasons))], Start: submit.Add(wait * time.Duration(e) / time.Duration(k))}
			if e < k-1 || waitEnd.Before(now) {
				ev.End = tp(submit.Add(wait * time.Duration(e+1) / time.Duration(k)))
			}
			in.WaitEvents = append(in.WaitEvents, ev)
		}
		switch {
		case !waitEnd.Before(now):
			j.State = "pending"
		case rng.IntN(30) == 0:
			j.End, j.Cancelled, j.CancelledWhileWaiting, j.State = tp(waitEnd), true, true, "cancelled"
		default:
			runStart := waitEnd
			j.FirstStart = tp(runStart)
			nRuns := 1
			if r := rng.IntN(100); r < 12 {
				nRuns = 2
			} else if r < 15 {
				nRuns = 3
			}
			for r := 0; r < nRuns; r++ {
				end := runStart.Add(exp(3 * 3600))
				run := Run{JobID: j.ID, Start: runStart, GPUMilli: Request{GPUs: s.gpus, GPUMilli: s.milli}.DemandMilli()}
				if !end.Before(now) {
					in.Runs = append(in.Runs, run)
					j.State = "running"
					break
				}
				run.End = tp(end)
				in.Runs = append(in.Runs, run)
				in.Releases = append(in.Releases, Release{At: end, Pool: j.Pool, Models: []string{poolModel[p]}, GPUMilli: run.GPUMilli})
				if r == nRuns-1 {
					j.End = tp(end)
					break
				}
				runStart = end.Add(exp(600)) // requeued after a preemption
				if !runStart.Before(now) {
					j.State = "pending"
					break
				}
			}
		}
		in.Jobs = append(in.Jobs, j)
	}
	opts := Options{Window: Window{From: start.Add(2 * day), To: now}, Now: now}
	return in, opts
}

// BenchmarkCompute computes the default report (queue × tier × job type ×
// pool) over 1,000,000 jobs and 5,000,000 wait events held in memory.
func BenchmarkCompute(b *testing.B) {
	in, opts := benchData()
	if len(in.Jobs) != 1_000_000 || len(in.WaitEvents) < 4_900_000 || len(in.WaitEvents) > 5_000_000 {
		b.Fatalf("benchmark data: %d jobs, %d wait events", len(in.Jobs), len(in.WaitEvents))
	}
	runtime.GC()
	b.ReportAllocs()
	b.ResetTimer()
	cpu0 := processCPU(b)
	for i := 0; i < b.N; i++ {
		r, err := Compute(in, opts)
		if err != nil {
			b.Fatal(err)
		}
		if r.Total.Jobs == 0 {
			b.Fatal("empty report")
		}
	}
	// The machine is shared: CPU time of the process (GC workers included)
	// says what the report costs when wall time is inflated by waiting for a core.
	b.ReportMetric(float64(processCPU(b)-cpu0)/float64(b.N), "cpu-ns/op")
}

// processCPU returns the user + system CPU time of the process in ns.
func processCPU(b *testing.B) int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}

// TestBenchDataShape keeps the benchmark honest about what it measures, on a
// small instance of the same generator.
func TestBenchDataShape(t *testing.T) {
	in, opts := makeBenchData(20_000, 100_000, rand.New(rand.NewPCG(42, 42)))
	if len(in.Jobs) != 20_000 || len(in.WaitEvents) < 95_000 || len(in.WaitEvents) > 100_000 {
		t.Fatalf("%d jobs, %d wait events", len(in.Jobs), len(in.WaitEvents))
	}
	r, err := Compute(in, opts)
	if err != nil {
		t.Fatal(err)
	}
	g := r.Total
	if len(r.Groups) < 100 || g.Started < 15_000 || g.RequeueStarts == 0 || g.StillWaiting == 0 ||
		g.CancelledWhileWaiting == 0 || g.StarvingJobs == 0 || g.OvertakenJobs == 0 || g.ReleaseStarvedJobs == 0 || g.TierStarvedJobs == 0 {
		t.Errorf("benchmark data lacks a feature: %d groups, total %+v", len(r.Groups), g)
	}
}
