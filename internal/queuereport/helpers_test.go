package queuereport

import (
	"testing"
	"time"

	"github.com/gpugov/gpugov/internal/vocab"
)

// t0 is the origin of test times; at(s) is s seconds after it.
var t0 = time.Date(2026, 1, 5, 0, 0, 0, 0, time.UTC)

func at(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }

func atp(s float64) *time.Time {
	t := at(s)
	return &t
}

// testJob builds a job of queue "q", tier standard, pool "p", 1 whole GPU.
func testJob(id string, submit float64, mods ...func(*Job)) Job {
	j := Job{ID: id, Queue: "q", Tier: vocab.TierStandard, JobType: "train", Pool: "p", Project: "proj",
		Request: Request{GPUs: 1}, SubmitTime: at(submit)}
	for _, m := range mods {
		m(&j)
	}
	return j
}

func started(s float64) func(*Job) { return func(j *Job) { j.FirstStart = atp(s) } }
func ended(s float64) func(*Job)   { return func(j *Job) { j.End = atp(s) } }
func inPool(p string) func(*Job)   { return func(j *Job) { j.Pool = p } }
func inQueue(q string, tier vocab.Tier) func(*Job) {
	return func(j *Job) { j.Queue, j.Tier = q, tier }
}
func ofProject(p string) func(*Job) { return func(j *Job) { j.Project = p } }
func asking(gpus, milli int, models ...string) func(*Job) {
	return func(j *Job) { j.Request = Request{GPUs: gpus, GPUMilli: milli, Models: models} }
}
func cancelledWaiting(s float64) func(*Job) {
	return func(j *Job) { j.End, j.Cancelled, j.CancelledWhileWaiting = atp(s), true, true }
}

// testRun is a run of 1000 milli-GPU; end < 0 means still running.
func testRun(job string, start, end float64) Run {
	r := Run{JobID: job, Start: at(start), GPUMilli: 1000}
	if end >= 0 {
		r.End = atp(end)
	}
	return r
}

// window returns options over [from, to) read at now, with the given grouping
// (nil: the default), thresholds of 1 and no starvation floor so that every
// count shows, and every starving job listed.
func window(from, to, now float64, groupBy []string) Options {
	return Options{Window: Window{From: at(from), To: at(to)}, Now: at(now), GroupBy: groupBy,
		OvertakenThreshold: 1, StarvationReleases: 1, TierArrivalThreshold: 1, StarvingLimit: NoStarvingLimit,
		StarvationMinWaitS: NoStarvationMinWait}
}

func mustCompute(t *testing.T, in Input, o Options) Report {
	t.Helper()
	r, err := Compute(in, o)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// val dereferences a metric for comparison; nil reads as -1.
func val(f *float64) float64 {
	if f == nil {
		return -1
	}
	return *f
}

func starvingByID(r Report) map[string]StarvingJob {
	m := map[string]StarvingJob{}
	for _, s := range r.Starving {
		m[s.JobID] = s
	}
	return m
}

func findGroup(t *testing.T, r Report, key map[string]string) Group {
	t.Helper()
	for _, g := range r.Groups {
		if keyString(g.Key) == keyString(key) {
			return g
		}
	}
	t.Fatalf("no group %v in %d groups", key, len(r.Groups))
	return Group{}
}
