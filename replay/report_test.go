package replay

import (
	"strings"
	"testing"
	"time"

	"github.com/gpugov/gpugov/api"
	"github.com/gpugov/gpugov/internal/queuereport"
	"github.com/gpugov/gpugov/internal/trace/alibaba"
	"github.com/gpugov/gpugov/internal/vocab"
)

var t0 = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

func at(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }

func ptr(t time.Time) *time.Time { return &t }

// rec builds a record of a job submitted at t0 in tier production.
func rec(id string, state vocab.JobState, placed bool, updated time.Time, runS float64, seen *time.Time, events ...api.WaitEvent) *jobRecord {
	j := api.Job{ID: id, Queue: "production", Tier: "production", State: state, SubmittedAt: t0, UpdatedAt: updated,
		RunSeconds: runS, Resources: api.ResourceSpec{GPUs: 1, Pool: "alibaba"}}
	if placed {
		j.Explanation = &api.Explanation{Placed: &api.PlacedOn{Pool: "alibaba"}}
	} else if state == "waiting" {
		j.Explanation = &api.Explanation{Reason: "capacity_busy"}
	}
	return &jobRecord{tj: &trackedJob{sub: &Submission{Key: id}, jobID: id, seenStart: seen}, job: j, events: events}
}

// TestReportInputStarts covers each source of a job's first start and the
// report computed from them.
func TestReportInputStarts(t *testing.T) {
	recs := []*jobRecord{
		// waited 3 s for capacity: start = end of its wait event
		rec("evented", "succeeded", true, at(10), 600, nil,
			api.WaitEvent{Reason: "capacity_busy", StartedAt: at(1), EndedAt: ptr(at(3))}),
		// placed at once, seen placed by a look at 0.5 s
		rec("seen", "succeeded", true, at(5), 600, ptr(at(0.5))),
		// placed at once, ended before any look: end − run/speed = 4 − 600/600 = 3 s
		rec("estimated", "succeeded", true, at(4), 600, nil),
		// cancelled while running, never seen: start unknown → submit time
		rec("unknown", "cancelled", true, at(2), 600, nil),
		// cancelled while waiting
		rec("abandoned", "cancelled", false, at(6), 600, nil,
			api.WaitEvent{Reason: "capacity_busy", StartedAt: at(1), EndedAt: ptr(at(6))}),
		// still waiting
		rec("waiting", "waiting", false, at(1), 600, nil,
			api.WaitEvent{Reason: "capacity_busy", StartedAt: at(1)}),
	}
	queues := &api.QueueList{Queues: []api.Queue{{Name: "production", Tier: "production", ServiceShare: 4, MaxWaitSec: 60}}}
	in, sources := reportInput(recs, queues, 600, nil)
	if sources[startRecorded] != 2 || sources[startEstimated] != 1 || sources[startUnknown] != 1 {
		t.Errorf("start sources %v, want 2 recorded, 1 estimated, 1 unknown", sources)
	}
	starts := map[string]time.Time{}
	for _, j := range in.Jobs {
		if j.FirstStart != nil {
			starts[j.ID] = *j.FirstStart
		}
		if j.ID == "abandoned" && (!j.CancelledWhileWaiting || j.FirstStart != nil) {
			t.Errorf("abandoned: %+v, want cancelled while waiting, never started", j)
		}
	}
	want := map[string]time.Time{"evented": at(3), "seen": at(0.5), "estimated": at(3), "unknown": t0}
	for id, w := range want {
		if !starts[id].Equal(w) {
			t.Errorf("%s first start %v, want %v", id, starts[id], w)
		}
	}
	if len(starts) != len(want) || len(in.Runs) != 4 || len(in.WaitEvents) != 3 {
		t.Errorf("%d started, %d runs, %d wait events; want 4, 4, 3", len(starts), len(in.Runs), len(in.WaitEvents))
	}
	rep, err := queuereport.Compute(in, queuereport.Options{Window: queuereport.Window{From: t0, To: at(20)}, Now: at(20),
		GroupBy: []string{queuereport.KeyTier}})
	if err != nil {
		t.Fatal(err)
	}
	g := rep.Total
	if g.Jobs != 6 || g.Started != 4 || g.StillWaiting != 1 || g.WaitMaxS == nil || *g.WaitMaxS != 3 {
		t.Errorf("report total %+v, want 6 jobs, 4 started, 1 waiting, max wait 3 s", g)
	}
}

func TestRender(t *testing.T) {
	p50, max := 0.8, 12.5
	res := &Result{Started: t0, Finished: at(90), Speed: 600, Pods: 3, Accepted: 3, StartsEstimated: 1,
		States:     map[vocab.JobState]int{vocab.JobSucceeded: 2, vocab.JobWaiting: 1},
		Reasons:    map[string]map[string]int{"experiment": {"no_matching_capacity": 1}},
		TraceWaits: map[string]WaitStats{"production": {N: 2, P50: 0.06, P95: 0.4, P99: 0.4, Max: 0.4}, totalKey: {N: 2, P50: 0.06}},
		Report: queuereport.Report{
			Groups: []queuereport.Group{{Key: map[string]string{"tier": "production"}, Jobs: 2, Started: 2, WaitP50S: &p50, WaitMaxS: &max}},
			Total:  queuereport.Group{Jobs: 3, Started: 2, StillWaiting: 1},
			ReasonShares: []queuereport.PoolReasons{{Pool: "alibaba",
				Verdict: "pool alibaba: main problem is fragmentation and spec — 100.0% of waiting GPU-seconds (no_matching_capacity 100.0%)"}},
		},
		Rejected: []Rejection{{Pod: "bad", Error: "resources.gpus: must be ≥ 0"}},
	}
	var b strings.Builder
	if err := res.Render(&b, "HEADER\n"); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{"HEADER", "Replayed 3 pods at 600×", "production", "0.80s", "12.5s", "0.06s",
		"experiment   no_matching_capacity", "Wait-reason shares and main problem", "\npool alibaba: main problem is fragmentation and spec", "succeeded 2", "waiting 1", "for 1 jobs placed", "rejected bad: resources.gpus"} {
		if !strings.Contains(out, want) {
			t.Errorf("rendered report lacks %q:\n%s", want, out)
		}
	}
}

func TestTraceWaits(t *testing.T) {
	subs, err := Build([]alibaba.PodRow{
		pod("a", 1, 1000, alibaba.QoSLS, alibaba.PhaseRunning, 0, 100, 60),
		pod("b", 1, 1000, alibaba.QoSLS, alibaba.PhaseRunning, 0, 100, 0),
		pod("c", 1, 1000, alibaba.QoSBE, alibaba.PhasePending, 0, 100, 0),
	}, BuildOptions{Speed: 60})
	if err != nil {
		t.Fatal(err)
	}
	w := traceWaits(subs, 60)
	if p := w["production"]; p.N != 2 || p.P50 != 0 || p.Max != 1 {
		t.Errorf("production trace waits %+v, want 2 samples, P50 0 s, max 1 s (60 s at speed 60)", p)
	}
	if _, ok := w["experiment"]; ok {
		t.Error("a never-scheduled pod gave a trace wait")
	}
}
