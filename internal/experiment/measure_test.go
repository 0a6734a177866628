package experiment

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/gpugov/gpugov/internal/queuereport"
	"github.com/gpugov/gpugov/internal/queuereport/reporttest"
	"github.com/gpugov/gpugov/internal/vocab"
)

var t0 = time.Date(2026, 3, 2, 0, 0, 0, 0, time.UTC)

// at returns t0 + s seconds.
func at(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }

func atp(s float64) *time.Time { t := at(s); return &t }

// builder makes a small queuereport.Input job by job.
type builder struct{ in queuereport.Input }

// job adds a job of queue and tier in pool submitted at submit; runs are
// [start, end) pairs in seconds (end < 0: still running), milli the
// milli-GPU each run holds.
func (b *builder) job(id, queue string, tier vocab.Tier, pool string, submit float64, milli int64, runs ...[2]float64) {
	j := queuereport.Job{ID: id, Queue: queue, Tier: tier, Pool: pool, Project: "p", JobType: "train",
		Request: queuereport.Request{GPUs: int(max(1, milli/1000))}, SubmitTime: at(submit), State: "pending"}
	for i, r := range runs {
		run := queuereport.Run{JobID: id, Start: at(r[0]), GPUMilli: milli}
		if i == 0 {
			j.FirstStart = atp(r[0])
			j.State = "running"
		}
		if r[1] >= 0 {
			run.End = atp(r[1])
			if i == len(runs)-1 {
				j.End, j.State = atp(r[1]), "succeeded"
			}
		}
		b.in.Runs = append(b.in.Runs, run)
	}
	b.in.Jobs = append(b.in.Jobs, j)
}

// fixtureInput: window [0, 1000), now 1000.
//
//	p1  j1 qa experiment submit 0, run [100, 600): wait 100, 500 GPU-s
//	p1  j2 qa experiment submit 0, never started: longest wait 1000, still waiting
//	p1  j3 qb production submit 50, 2 GPUs, run [60, open): wait 10, 1880 GPU-s
//	p2  j4 qa experiment submit 0, run [500, 900): wait 500, 400 GPU-s
//	p2  j5 qc standard submit 200, run [200, 300): wait 0, 100 GPU-s
func fixtureInput() queuereport.Input {
	var b builder
	b.job("j1", "qa", vocab.TierExperiment, "p1", 0, 1000, [2]float64{100, 600})
	b.job("j2", "qa", vocab.TierExperiment, "p1", 0, 1000)
	b.job("j3", "qb", vocab.TierProduction, "p1", 50, 2000, [2]float64{60, -1})
	b.job("j4", "qa", vocab.TierExperiment, "p2", 0, 1000, [2]float64{500, 900})
	b.job("j5", "qc", vocab.TierStandard, "p2", 200, 1000, [2]float64{200, 300})
	b.in.WaitEvents = []queuereport.WaitEvent{
		{JobID: "j2", Reason: vocab.ReasonCapacityBusy, Start: at(0)},
		{JobID: "j4", Reason: vocab.ReasonCapacityBusy, Start: at(0), End: atp(500)},
	}
	b.in.Releases = []queuereport.Release{{At: at(600), Pool: "p1", GPUMilli: 1000}, {At: at(900), Pool: "p2", GPUMilli: 1000}}
	b.in.Targets = []queuereport.QueueTarget{{Queue: "qa", ServiceShare: 1, MaxWait: 300 * time.Second}, {Queue: "qb", ServiceShare: 3}}
	b.in.Capacity = []queuereport.PoolCapacity{{Pool: "p1", GPUs: 4}, {Pool: "p2", GPUs: 4}}
	return b.in
}

var fixtureWindow = queuereport.Window{From: at(0), To: at(1000)}

func mustMeasure(t *testing.T, scope Scope, gov Governance) Measurement {
	t.Helper()
	m, err := Measure(fixtureInput(), scope, fixtureWindow, at(1000), gov)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func keys(gs []queuereport.Group, key string) []string {
	var out []string
	for _, g := range gs {
		out = append(out, g.Key[key])
	}
	return out
}

func TestMeasureScope(t *testing.T) {
	m := mustMeasure(t, Scope{Pools: []string{"p1"}}, Governance{})
	if m.Total.Jobs != 3 || m.Total.Started != 2 || val(m.Total.LongestWaitS) != 1000 || m.Total.GPUSeconds != 2380 {
		t.Errorf("p1 total: jobs %d, started %d, longest %v, GPU-s %v; want 3, 2, 1000, 2380",
			m.Total.Jobs, m.Total.Started, m.Total.LongestWaitS, m.Total.GPUSeconds)
	}
	if got := strings.Join(keys(m.ByTier, "tier"), ","); got != "production,experiment" {
		t.Errorf("tiers %s, want production,experiment", got)
	}
	if got := strings.Join(keys(m.ByQueue, "queue"), ","); got != "qa,qb" {
		t.Errorf("queues %s, want qa,qb", got)
	}
	qa := m.ByQueue[0]
	if qa.Jobs != 2 || val(qa.ServiceShare) != 500.0/2380 || qa.JobsOverObjective != 1 || val(qa.TargetShare) != 0.25 {
		t.Errorf("qa: jobs %d, share %v, over objective %d, target %v; want 2, 500/2380, 1 (j2), 0.25",
			qa.Jobs, qa.ServiceShare, qa.JobsOverObjective, qa.TargetShare)
	}
	// pool_share is over p1's capacity only: 500 GPU-s of 4 GPUs × 1000 s.
	if val(qa.PoolShare) != 500.0/4000 {
		t.Errorf("qa pool share %v, want 0.125 (p1's capacity only)", qa.PoolShare)
	}

	// Watching qa: the total stays the scope; queues and tiers are qa's.
	w := mustMeasure(t, Scope{Pools: []string{"p1"}, Queues: []string{"qa"}}, Governance{})
	if w.Total.Jobs != 3 || strings.Join(keys(w.ByQueue, "queue"), ",") != "qa" || strings.Join(keys(w.ByTier, "tier"), ",") != "experiment" {
		t.Errorf("watching qa: total %d jobs, queues %v, tiers %v; want 3, [qa], [experiment]",
			w.Total.Jobs, keys(w.ByQueue, "queue"), keys(w.ByTier, "tier"))
	}
	if d := reporttest.DiffReports(t, m.ByQueue[0], w.ByQueue[0]); len(d) > 0 {
		t.Errorf("qa watched alone differs from qa among all: %v", d)
	}

	all := mustMeasure(t, Scope{}, Governance{})
	if all.Total.Jobs != 5 || len(all.ByQueue) != 3 || len(all.ByTier) != 3 {
		t.Errorf("no pools: %d jobs, %d queues, %d tiers; want every record (5, 3, 3)", all.Total.Jobs, len(all.ByQueue), len(all.ByTier))
	}
}

// TestMeasureIsTheReport checks that Measure's groups are the queue report's
// on the same records and options, so an experiment reads what `gpugov
// report` prints.
func TestMeasureIsTheReport(t *testing.T) {
	m := mustMeasure(t, Scope{Pools: []string{"p1"}}, Governance{})
	sub := ScopeInput(fixtureInput(), []string{"p1"})
	for _, c := range []struct {
		groupBy []string
		want    []queuereport.Group
	}{{[]string{}, []queuereport.Group{m.Total}}, {[]string{"tier"}, m.ByTier}, {[]string{"queue"}, m.ByQueue}} {
		r, err := queuereport.Compute(sub, queuereport.Options{Window: fixtureWindow, Now: at(1000), GroupBy: c.groupBy})
		if err != nil {
			t.Fatal(err)
		}
		have := r.Groups
		if len(c.groupBy) == 0 {
			have = []queuereport.Group{r.Total}
		}
		if d := reporttest.DiffReports(t, c.want, have); len(d) > 0 {
			t.Errorf("group by %v: Measure differs from the report: %v", c.groupBy, d)
		}
	}
}

func TestScopeInput(t *testing.T) {
	in := fixtureInput()
	sub := ScopeInput(in, []string{"p2"})
	var ids []string
	for _, j := range sub.Jobs {
		ids = append(ids, j.ID)
	}
	if strings.Join(ids, ",") != "j4,j5" || len(sub.Runs) != 2 || len(sub.WaitEvents) != 1 || sub.WaitEvents[0].JobID != "j4" ||
		len(sub.Releases) != 1 || sub.Releases[0].Pool != "p2" || len(sub.Capacity) != 1 || sub.Capacity[0].Pool != "p2" ||
		len(sub.Targets) != 2 {
		t.Errorf("p2 scope: jobs %v, %d runs, events %v, releases %v, capacity %v, %d targets",
			ids, len(sub.Runs), sub.WaitEvents, sub.Releases, sub.Capacity, len(sub.Targets))
	}
	if len(in.Jobs) != 5 || len(ScopeInput(in, nil).Jobs) != 5 {
		t.Error("ScopeInput changed its input, or an empty scope dropped records")
	}
}

func TestMeasureErrors(t *testing.T) {
	if _, err := Measure(fixtureInput(), Scope{}, fixtureWindow, at(-10), Governance{}); err == nil || !strings.Contains(err.Error(), "now") {
		t.Errorf("now before the window: %v", err)
	}
	bad := queuereport.Window{From: at(10), To: at(0)}
	if _, err := Measure(fixtureInput(), Scope{}, bad, at(10), Governance{}); err == nil || !strings.Contains(err.Error(), "window") {
		t.Errorf("inverted window: %v", err)
	}
}

func TestValue(t *testing.T) {
	gov := Governance{Preemptions: 4, ResumeSuccessRate: ptr(0.75), Measured: []string{"preemptions", "resume_success_rate"}}
	m := mustMeasure(t, Scope{Pools: []string{"p1"}}, gov)
	for _, c := range []struct {
		metric string
		t      Target
		want   *float64
		n      int
		err    string
	}{
		{"longest_wait_s", Target{}, ptr(1000), 3, ""},
		{"longest_wait_s", Target{Tier: "experiment"}, ptr(1000), 2, ""},
		{"wait_p50_s", Target{Tier: "production"}, ptr(10), 1, ""},
		{"wait_p50_s", Target{Queue: "qa"}, ptr(100), 2, ""},
		{"wait_reason_seconds.capacity_busy", Target{Queue: "qa"}, ptr(1000), 2, ""},
		{"jobs", Target{Tier: "standard"}, nil, 0, ""}, // no standard job in p1
		{"jobs", Target{Queue: "qz"}, nil, 0, ""},
		{"preemptions", Target{}, ptr(4), 3, ""},
		{"resume_success_rate", Target{}, ptr(0.75), 3, ""},
		{"recompute_gpu_s", Target{}, nil, 3, ""}, // not in Measured
		{"preemptions", Target{Tier: "production"}, nil, 0, "total only"},
		{"wait_p96_s", Target{}, nil, 0, "unknown metric"},
		{"jobs", Target{Tier: "production", Queue: "qb"}, nil, 0, "not both"},
	} {
		v, n, err := m.Value(c.metric, c.t)
		switch {
		case c.err != "":
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%s on %+v: error %v, want %q", c.metric, c.t, err, c.err)
			}
		case err != nil:
			t.Errorf("%s on %+v: %v", c.metric, c.t, err)
		case (v == nil) != (c.want == nil) || (v != nil && *v != *c.want) || n != c.n:
			t.Errorf("%s on %+v = %v, %d; want %v, %d", c.metric, c.t, fv(v), n, fv(c.want), c.n)
		}
	}
	// Every governance metric is read when Measured is empty.
	m.Governance.Measured = nil
	for _, d := range governanceMetrics {
		if _, _, err := m.Value(d.info.Name, Target{}); err != nil {
			t.Errorf("%s: %v", d.info.Name, err)
		}
	}
}

func TestMeasurementJSON(t *testing.T) {
	m := mustMeasure(t, Scope{Pools: []string{"p1"}}, Governance{Preemptions: 1})
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	var back Measurement
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if d := reporttest.DiffReports(t, m, back); len(d) > 0 {
		t.Errorf("round trip: %v", d)
	}
	v, _, _ := back.Value("longest_wait_s", Target{Tier: "experiment"})
	if val(v) != 1000 {
		t.Errorf("decoded measurement reads %v", fv(v))
	}
}

func val(v *float64) float64 {
	if v == nil {
		return -1
	}
	return *v
}

// fv renders a *float64 for messages.
func fv(v *float64) any {
	if v == nil {
		return nil
	}
	return *v
}
