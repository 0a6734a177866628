package load

import (
	"bytes"
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/gpugov/gpugov/internal/temporalx/temporaltest"
)

// TestBurstPrediction: the predicted drain is jobs ÷ floor, and the bound on
// all started is twice it, never under a minute.
func TestBurstPrediction(t *testing.T) {
	for _, c := range []struct {
		jobs            int
		floor           float64
		predicted, want time.Duration
	}{
		{10000, 25, 400 * time.Second, 800 * time.Second},
		{200, 20, 10 * time.Second, time.Minute},
		{1500, 25, 60 * time.Second, 120 * time.Second},
	} {
		p, b := BurstPrediction(c.jobs, c.floor)
		if p != c.predicted || b != c.want {
			t.Errorf("BurstPrediction(%d, %g) = %s, %s; want %s, %s", c.jobs, c.floor, p, b, c.predicted, c.want)
		}
	}
}

// passingBurst is a crafted report every check of decide passes.
func passingBurst() *BurstReport {
	predicted, bound := BurstPrediction(1000, 25)
	return &BurstReport{Jobs: 1000, Accepted: 1000, Submit: KindStats{Kind: KindSubmit, Sent: 1010, OK: 1000, TooMany: 10},
		Predicted: predicted, StartBound: bound, Drain: 10 * time.Minute, LastStartedAt: 30 * time.Second,
		LabelledRows: 1000, WorkflowsCounted: 1000, AllSettled: true}
}

// TestBurstDecide: the pass rule of RunBurst, one crafted finding at a time.
// 429s (back-pressure, sent again) and unsettled jobs are reported, not
// failed; each other finding fails the run with a line naming it.
func TestBurstDecide(t *testing.T) {
	r := passingBurst()
	r.Unsettled, r.AllSettled = []string{"j-late (waiting, reason \"\")"}, false
	r.decide()
	if !r.Pass || len(r.Failures) != 0 {
		t.Fatalf("crafted passing report: pass %v, failures %v", r.Pass, r.Failures)
	}
	for _, c := range []struct {
		name  string
		craft func(*BurstReport)
		want  string
	}{
		{"row missing at answer time", func(r *BurstReport) { r.MissingAtAnswer = []string{"j-1"} }, "not durable at answer time"},
		{"row missing at the end", func(r *BurstReport) { r.MissingRows = []string{"j-1"} }, "have no row"},
		{"workflow missing", func(r *BurstReport) { r.MissingWorkflows = []string{"j-1"} }, "have no workflow"},
		{"workflow failed", func(r *BurstReport) { r.WorkflowMismatch = []string{"j-1: workflow failed"} }, "failed or disagree"},
		{"extra row", func(r *BurstReport) { r.ExtraRows, r.LabelledRows = []string{"j-x"}, 1001 }, "not answered 2xx"},
		{"ID answered twice", func(r *BurstReport) { r.DuplicateAnswers = 1 }, "answered more than once"},
		{"extra workflow", func(r *BurstReport) { r.WorkflowsCounted = 1001 }, "JobWorkflows started"},
		{"5xx", func(r *BurstReport) { r.Submit.ServerErr = 1 }, "5xx"},
		{"no answer", func(r *BurstReport) { r.Submit.NoAnswer = 1 }, "no answer"},
		{"4xx", func(r *BurstReport) { r.Submit.ClientErr = 1 }, "other than 429"},
		{"nothing accepted", func(r *BurstReport) { r.Accepted, r.WorkflowsCounted = 0, 0 }, "no submission"},
		{"never started", func(r *BurstReport) { r.NotStarted = []string{"j-1"} }, "never started"},
		{"started late", func(r *BurstReport) { r.LastStartedAt = r.StartBound + time.Second }, "over the bound"},
	} {
		r := passingBurst()
		c.craft(r)
		r.decide()
		if r.Pass || len(r.Failures) != 1 || !strings.Contains(r.Failures[0], c.want) {
			t.Errorf("%s: pass %v, failures %q; want one naming %q", c.name, r.Pass, r.Failures, c.want)
		}
	}
}

// TestShortBurst runs a burst of 200 submissions, 32 in flight, against the
// service in this process (TestShortLoad's) and checks that every figure of
// the report is filled and that it passes: every row there at answer time,
// every workflow started (well within the one-minute floor of the bound),
// one row and one workflow per job, memory sampled.
func TestShortBurst(t *testing.T) {
	temporaltest.SkipShort(t)
	ts := startTestStack(t)
	var progress bytes.Buffer
	rep, err := RunBurst(context.Background(), BurstConfig{
		Config: Config{Client: ts.client, Store: ts.store, Temporal: ts.dev.Client, WaitShare: 0.03, RunSeconds: 20,
			Drain: 3 * time.Minute, ServePID: os.Getpid(), MetricsURL: ts.base + "/metrics", SampleInterval: 2 * time.Second,
			Seed: 23, Progress: &progress},
		Jobs: 200, Concurrency: 32, FloorRate: 20,
	})
	if err != nil {
		t.Fatalf("burst: %v\n%s", err, progress.String())
	}
	var out bytes.Buffer
	if err := rep.Render(&out); err != nil {
		t.Fatal(err)
	}
	t.Logf("report:\n%s", out.String())
	if !rep.Pass {
		t.Fatalf("burst failed:\n%s\nprogress:\n%s", out.String(), progress.String())
	}
	if rep.Accepted != 200 || rep.Submit.OK != 200 || rep.LabelledRows != 200 || rep.WorkflowsCounted != 200 {
		t.Errorf("accepted %d, 2xx %d, labelled rows %d, workflows counted %d; want 200 each",
			rep.Accepted, rep.Submit.OK, rep.LabelledRows, rep.WorkflowsCounted)
	}
	if rep.Predicted != 10*time.Second || rep.StartBound != time.Minute {
		t.Errorf("predicted %s, bound %s; want 10s, 1m0s", rep.Predicted, rep.StartBound)
	}
	if rep.SendTime <= 0 || rep.AcceptPerSecond <= 0 || rep.Submit.P50ms <= 0 || rep.Submit.P99ms < rep.Submit.P50ms {
		t.Errorf("send %s, accept rate %g/s, p50 %g ms, p99 %g ms: want all > 0", rep.SendTime, rep.AcceptPerSecond, rep.Submit.P50ms, rep.Submit.P99ms)
	}
	if rep.LastStartedAt <= 0 || rep.LastSeenAt < rep.LastStartedAt || rep.SettledAt <= 0 || !rep.AllSettled {
		t.Errorf("last started %s, seen %s, settled %s (all %v): want the times filled", rep.LastStartedAt, rep.LastSeenAt, rep.SettledAt, rep.AllSettled)
	}
	if rep.PeakRSSBytes == 0 || rep.PeakHeapLiveBytes == 0 || len(rep.Memory) == 0 {
		t.Errorf("peak RSS %d, peak heap %d, %d samples: want memory sampled", rep.PeakRSSBytes, rep.PeakHeapLiveBytes, len(rep.Memory))
	}
	if got := rep.States["succeeded"] + rep.Reasons["held"] + rep.Reasons["no_matching_capacity"] + rep.Reasons["environment_not_ready"]; got != 200 {
		t.Errorf("states %v, reasons %v: want every job succeeded or waiting for good", rep.States, rep.Reasons)
	}
}

// TestShortBurstBacklog stores a backlog of 2,000 pending jobs under the
// service in this process and samples it for 10 s: every row lands with the
// run's label, memory and cycles are sampled before and after, and the
// reconciler has started some of their workflows by the end.
func TestShortBurstBacklog(t *testing.T) {
	temporaltest.SkipShort(t)
	ts := startTestStack(t)
	var progress bytes.Buffer
	rep, err := RunBacklog(context.Background(), BacklogConfig{
		Config: Config{Client: ts.client, Store: ts.store, Temporal: ts.dev.Client, WaitShare: 0.03, RunSeconds: 20,
			ServePID: os.Getpid(), MetricsURL: ts.base + "/metrics", SampleInterval: 2 * time.Second, Seed: 29, Progress: &progress},
		Jobs: 2000, Baseline: 5 * time.Second, Hold: 10 * time.Second,
	})
	if err != nil {
		t.Fatalf("backlog: %v\n%s", err, progress.String())
	}
	var out bytes.Buffer
	if err := rep.Render(&out); err != nil {
		t.Fatal(err)
	}
	t.Logf("report:\n%s", out.String())
	if !rep.Pass || rep.LabelledRows != 2000 {
		t.Fatalf("backlog: pass %v, %d labelled rows; want 2000\n%s", rep.Pass, rep.LabelledRows, out.String())
	}
	if rep.BaselineRSSBytes == 0 || rep.PeakRSSBytes == 0 || rep.PeakHeapLiveBytes == 0 || rep.InsertTime <= 0 {
		t.Errorf("baseline RSS %d, peak RSS %d, peak heap %d, insert %s: want all filled", rep.BaselineRSSBytes, rep.PeakRSSBytes,
			rep.PeakHeapLiveBytes, rep.InsertTime)
	}
	if rep.PendingPeak < 1000 || rep.Cycles == 0 || rep.WorkflowsCounted <= 0 {
		t.Errorf("pending peak %d, cycles %d, workflows counted %d: want the backlog seen, cycled over and being started",
			rep.PendingPeak, rep.Cycles, rep.WorkflowsCounted)
	}
}
