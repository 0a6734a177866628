package store_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/gpugov/gpugov/internal/queuereport"
	"github.com/gpugov/gpugov/internal/scheduling"
	"github.com/gpugov/gpugov/internal/vocab"
)

// TestWaitEventsCoverSubmitToPlacement checks that ApplyCycle's wait events
// cover every second a job waited before its placement, also when the first
// cycle that sees the job places it: the interval before that first
// evaluation is not_yet_evaluated (after a submit or a requeue), then the
// reasons the cycles found; a job placed in the instant it was submitted
// gets no event; WaitTransitions counts only reason transitions. The time
// per reason of the report adds up to the waits.
func TestWaitEventsCoverSubmitToPlacement(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := reportEnv(t)
	f := &reportFlow{t: t, s: s}
	base := time.Now().UTC().Truncate(time.Minute).Add(-3 * time.Hour)
	at := func(m int) time.Time { return base.Add(time.Duration(m) * time.Minute) }

	first := f.submit(at(0), 1, "training") // placed by the first cycle that sees it, 5 min later
	f.run(first, f.apply(at(5), first, "", "p-a100", "GPU-a0"), at(6), at(20), vocab.RunPreempted)
	f.run(first, f.apply(at(23), first, "", "p-a100", "GPU-a0"), at(24), time.Time{}, "") // requeued at 20, placed at 23

	waited := f.submit(at(0), 1, "training") // first seen at 2: capacity_busy until placed at 10
	f.waitCycle(at(2), waited, vocab.ReasonCapacityBusy, 1)
	f.run(waited, f.apply(at(10), waited, "", "p-h100", "GPU-h0"), at(10), time.Time{}, "")

	instant := f.submit(at(30), 1, "training") // placed in the instant it was submitted
	f.apply(at(30), instant, "", "p-a100", "GPU-a1")

	want := map[string][]string{
		first:   {"not_yet_evaluated 0–5", "not_yet_evaluated 20–23"},
		waited:  {"not_yet_evaluated 0–2", "capacity_busy 2–10"},
		instant: nil,
	}
	for job, w := range want {
		events, err := s.JobWaitEvents(ctx, job)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, e := range events {
			end := "open"
			if e.EndedAt != nil {
				end = fmt.Sprint(e.EndedAt.Sub(base).Minutes())
			}
			got = append(got, fmt.Sprintf("%s %v–%s", e.Reason, e.StartedAt.Sub(base).Minutes(), end))
		}
		if fmt.Sprint(got) != fmt.Sprint(w) {
			t.Errorf("job %s: wait events %v, want %v", job, got, w)
		}
		if len(events) > 0 && events[0].NextAction == "" {
			t.Errorf("job %s: not_yet_evaluated event without a next action: %+v", job, events[0])
		}
	}
	if job, err := s.GetJob(ctx, waited); err != nil || job.Reason != "" {
		t.Errorf("the placed job's current reason: %+v, %v", job, err)
	}

	now := at(60)
	r, err := s.QueueReport(ctx, queuereport.Options{Window: queuereport.Window{From: base, To: now}, Now: now, GroupBy: []string{}}, "")
	if err != nil {
		t.Fatal(err)
	}
	// Waits until placement: 5 + 3 (first), 10 (waited), 0 (instant) minutes.
	if got := r.Total.WaitReasonSeconds; got["not_yet_evaluated"] != 10*60 || got["capacity_busy"] != 8*60 || len(got) != 2 {
		t.Errorf("seconds per reason %v, want not_yet_evaluated 600 and capacity_busy 480", got)
	}
}

// waitCycle applies a cycle at at that gives job reason and checks that it counts as
// one wait transition (the not_yet_evaluated interval written with it is not
// one).
func (f *reportFlow) waitCycle(at time.Time, job string, reason vocab.WaitReason, transitions int) {
	f.t.Helper()
	f.cycle++
	res := &scheduling.Result{At: at, Waiting: []scheduling.WaitStatus{{JobID: job, Reason: reason, Detail: "test", Rank: 1}}}
	out, err := f.s.ApplyCycle(context.Background(), fmt.Sprintf("cover-c%d", f.cycle), res, at)
	if err != nil {
		f.t.Fatal(err)
	}
	if out.WaitTransitions != transitions {
		f.t.Errorf("cycle at %s: %d wait transitions, want %d", at.Format(time.RFC3339), out.WaitTransitions, transitions)
	}
}

// TestReasonSharesFromTheStore checks the reason shares and verdict on rows
// ApplyCycle wrote, through both of the store's paths — stored summaries of
// past hours (no project) and every record (a project) — and with the
// window's start clipping a wait: GPU-seconds weigh the 2-GPU job double,
// the wait still open at the end counts to it, and not_yet_evaluated stays
// apart.
func TestReasonSharesFromTheStore(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := reportEnv(t)
	f := &reportFlow{t: t, s: s}
	base := time.Now().UTC().Truncate(time.Hour).Add(-4 * time.Hour)
	at := func(m int) time.Time { return base.Add(time.Duration(m) * time.Minute) }

	two := f.submit(at(0), 2, "training") // not_yet_evaluated 0–10, capacity_busy 10–40, quota_exhausted 40–70, placed
	f.waitCycle(at(10), two, vocab.ReasonCapacityBusy, 1)
	f.waitCycle(at(40), two, vocab.ReasonQuotaExhausted, 1)
	f.run(two, f.apply(at(70), two, "", "p-a100", "GPU-a0", "GPU-a1"), at(70), time.Time{}, "")
	one := f.submit(at(0), 1, "training") // not_yet_evaluated 0–20, environment_not_ready from 20, still waiting
	f.waitCycle(at(20), one, vocab.ReasonEnvironmentNotReady, 1)

	end := at(180)
	for _, c := range []struct {
		name    string
		from    int
		project string
		verdict string
		gpuMin  [3]float64 // capacity, quota, environment and operator
		latency float64    // GPU-minutes of not_yet_evaluated
	}{
		{"summaries", 0, "", "pool p: main problem is environment and operator — 57.1% of waiting GPU-seconds (environment_not_ready 57.1%)",
			[3]float64{60, 60, 160}, 40},
		{"records", 0, "vision", "pool p: main problem is environment and operator — 57.1% of waiting GPU-seconds (environment_not_ready 57.1%)",
			[3]float64{60, 60, 160}, 40},
		// From minute 30: capacity_busy 30–40 (× 2), quota 40–70 (× 2), environment_not_ready 30–180: 150 / 230.
		{"clipped", 30, "", "pool p: main problem is environment and operator — 65.2% of waiting GPU-seconds (environment_not_ready 65.2%)",
			[3]float64{20, 60, 150}, 0},
	} {
		r, err := s.QueueReport(ctx, queuereport.Options{Window: queuereport.Window{From: at(c.from), To: end}, Now: end}, c.project)
		if err != nil {
			t.Fatal(err)
		}
		if len(r.ReasonShares) != 1 {
			t.Fatalf("%s: reason shares %+v, want pool p only", c.name, r.ReasonShares)
		}
		p := r.ReasonShares[0]
		if p.Verdict != c.verdict {
			t.Errorf("%s: verdict %q, want %q", c.name, p.Verdict, c.verdict)
		}
		got := map[vocab.ReasonGroup]float64{}
		for _, g := range p.Groups {
			got[g.Group] = g.GPUSeconds / 60
		}
		want := map[vocab.ReasonGroup]float64{vocab.GroupCapacity: c.gpuMin[0], vocab.GroupFragmentationSpec: 0,
			vocab.GroupQueueOrder: 0, vocab.GroupQuota: c.gpuMin[1], vocab.GroupEnvironmentOperator: c.gpuMin[2]}
		if fmt.Sprint(got) != fmt.Sprint(want) || p.WaitGPUSeconds != 60*(c.gpuMin[0]+c.gpuMin[1]+c.gpuMin[2]) {
			t.Errorf("%s: GPU-minutes per group %v (total %v s), want %v", c.name, got, p.WaitGPUSeconds, want)
		}
		if p.ServiceLatency.GPUSeconds != 60*c.latency {
			t.Errorf("%s: service latency %v GPU-s, want %v", c.name, p.ServiceLatency.GPUSeconds, 60*c.latency)
		}
	}
}
