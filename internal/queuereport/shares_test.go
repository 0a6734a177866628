package queuereport

import (
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/gpugov/gpugov/internal/vocab"
)

// ev is a wait event of job over [start, end); end < 0 leaves it open.
func ev(job string, r vocab.WaitReason, start, end float64) WaitEvent {
	e := WaitEvent{JobID: job, Reason: r, Start: at(start)}
	if end >= 0 {
		e.End = atp(end)
	}
	return e
}

func poolShare(t *testing.T, r Report, pool string) PoolReasons {
	t.Helper()
	for _, p := range r.ReasonShares {
		if p.Pool == pool {
			return p
		}
	}
	t.Fatalf("no reason shares of pool %q in %+v", pool, r.ReasonShares)
	return PoolReasons{}
}

func groupShare(t *testing.T, p PoolReasons, g vocab.ReasonGroup) GroupShare {
	t.Helper()
	for _, gs := range p.Groups {
		if gs.Group == g {
			return gs
		}
	}
	t.Fatalf("pool %s: no group %s", p.Pool, g)
	return GroupShare{}
}

func near(a, b float64) bool { return math.Abs(a-b) < 1e-9 }

// checkSums checks that a pool's group shares, and its reasons' shares, add
// up to 1 on both bases, and that every verdict group is listed in order.
func checkSums(t *testing.T, p PoolReasons) {
	t.Helper()
	var groups []vocab.ReasonGroup
	var gj, gg, rj, rg float64
	for _, g := range p.Groups {
		groups = append(groups, g.Group)
		gj, gg = gj+val(g.Share), gg+val(g.GPUShare)
		for _, r := range g.Reasons {
			if r.Reason.Group() != g.Group {
				t.Errorf("pool %s: reason %s listed under %s", p.Pool, r.Reason, g.Group)
			}
			rj, rg = rj+val(r.Share), rg+val(r.GPUShare)
		}
	}
	if !slices.Equal(groups, vocab.ReasonGroups[:5]) {
		t.Errorf("pool %s: groups %v, want %v", p.Pool, groups, vocab.ReasonGroups[:5])
	}
	for _, s := range []float64{gj, gg, rj, rg} {
		if !near(s, 1) {
			t.Errorf("pool %s: shares add up to %v (groups job %v, GPU %v; reasons job %v, GPU %v), want 1", p.Pool, s, gj, gg, rj, rg)
		}
	}
}

// TestReasonShares checks the shares on crafted wait events: GPU-seconds
// weigh each wait by its GPUs (a 500 milli share by half), events are
// clipped to the window, open events run to the report end (now, before
// the window's end), reasons add up by group, not_yet_evaluated stays out
// of the shares, and the verdict names the group with the most GPU-seconds
// even when another has more job-seconds. The report is not grouped by
// pool: the shares are per pool anyway.
func TestReasonShares(t *testing.T) {
	in := Input{
		Jobs: []Job{
			testJob("j1", 0, inPool("a")),
			testJob("j2", 200, inPool("a"), asking(4, 0)),
			testJob("j3", 500, inPool("a")),
			testJob("j3b", 500, inPool("a")),
			testJob("j4", 600, inPool("a"), asking(1, 500)),
			testJob("j5", 100, inPool("a")),
			testJob("j6", 0, inPool("a")),
			testJob("b1", 100, inPool("b"), started(100)),
			testJob("c1", 700, inPool("c")),
			testJob("d1", 0, inPool("d"), started(10), ended(50)),
		},
		Runs: []Run{testRun("b1", 100, -1), testRun("d1", 10, 50)},
		WaitEvents: []WaitEvent{
			ev("j1", vocab.ReasonCapacityBusy, 0, 300),           // clipped to [100, 300): 200 s, 200 GPU-s
			ev("j2", vocab.ReasonCapacityBusy, 200, 400),         // 200 s × 4 GPUs = 800 GPU-s
			ev("j2", vocab.ReasonPreemptionInProgress, 400, 450), // 50 s × 4 = 200 GPU-s
			ev("j3", vocab.ReasonNoMatchingCapacity, 500, -1),    // open: to the end 800, 300 s
			ev("j3b", vocab.ReasonFragmented, 500, -1),           // 300 s
			ev("j4", vocab.ReasonQuotaExhausted, 600, 700),       // 100 s × 0.5 = 50 GPU-s
			ev("j5", vocab.ReasonNotYetEvaluated, 100, 150),      // service latency 50 s
			ev("j6", vocab.ReasonHeld, 0, 100),                   // ends at the window's start: nothing
			ev("j6", vocab.ReasonHeld, 900, 950),                 // after the report end: nothing
			ev("c1", vocab.ReasonNotYetEvaluated, 700, 760),      // c waited only for the first evaluation
		},
	}
	r := mustCompute(t, in, window(100, 1000, 800, []string{}))
	if len(r.ReasonShares) != 3 {
		t.Fatalf("reason shares of %d pools, want a, b and c (d had no job in the window): %+v", len(r.ReasonShares), r.ReasonShares)
	}
	a := poolShare(t, r, "a")
	checkSums(t, a)
	if a.WaitS != 1150 || a.WaitGPUSeconds != 1850 {
		t.Errorf("pool a waited %v s, %v GPU-s; want 1150 and 1850", a.WaitS, a.WaitGPUSeconds)
	}
	for _, w := range []struct {
		g        vocab.ReasonGroup
		job, gpu float64
	}{
		{vocab.GroupCapacity, 450, 1200}, {vocab.GroupFragmentationSpec, 600, 600}, {vocab.GroupQueueOrder, 0, 0},
		{vocab.GroupQuota, 100, 50}, {vocab.GroupEnvironmentOperator, 0, 0},
	} {
		g := groupShare(t, a, w.g)
		if g.WaitS != w.job || g.GPUSeconds != w.gpu || !near(val(g.Share), w.job/1150) || !near(val(g.GPUShare), w.gpu/1850) {
			t.Errorf("pool a, %s: %+v; want %v s, %v GPU-s", w.g, g, w.job, w.gpu)
		}
	}
	if c := groupShare(t, a, vocab.GroupCapacity); len(c.Reasons) != 2 || c.Reasons[0].Reason != vocab.ReasonCapacityBusy ||
		c.Reasons[0].GPUSeconds != 1000 || c.Reasons[1].Reason != vocab.ReasonPreemptionInProgress || c.Reasons[1].GPUSeconds != 200 {
		t.Errorf("pool a, capacity reasons %+v", c.Reasons)
	}
	sl := a.ServiceLatency
	if sl.Group != vocab.GroupServiceLatency || sl.WaitS != 50 || sl.GPUSeconds != 50 || !near(val(sl.Share), 50.0/1200) ||
		!near(val(sl.GPUShare), 50.0/1900) || len(sl.Reasons) != 1 || sl.Reasons[0].Reason != vocab.ReasonNotYetEvaluated {
		t.Errorf("pool a, service latency %+v", sl)
	}
	want := "pool a: main problem is capacity — 64.9% of waiting GPU-seconds (capacity_busy 54.1%, preemption_in_progress 10.8%)"
	if a.Verdict != want || !slices.Equal(a.MainProblem, []vocab.ReasonGroup{vocab.GroupCapacity}) ||
		!near(val(a.MainShare), 1200.0/1850) || a.MainBasis != BasisGPUSeconds {
		t.Errorf("pool a verdict %q %v %v %s\nwant %q", a.Verdict, a.MainProblem, val(a.MainShare), a.MainBasis, want)
	}
	b := poolShare(t, r, "b")
	if b.Verdict != "pool b: no waiting in window" || len(b.MainProblem) != 0 || b.MainShare != nil || b.MainBasis != "" ||
		b.Groups[0].Share != nil {
		t.Errorf("pool b, which never waited: %+v", b)
	}
	c := poolShare(t, r, "c")
	if c.Verdict != "pool c: no waiting in window but service latency (not_yet_evaluated 1m00s, outside the shares)" ||
		len(c.MainProblem) != 0 || c.ServiceLatency.WaitS != 60 || val(c.ServiceLatency.Share) != 1 {
		t.Errorf("pool c, which waited for its first evaluation only: %+v", c)
	}
}

// TestReasonShareTie checks the tie rule: groups with exactly the same
// GPU-seconds at the top are all named, in report order, each with the
// share; a job-seconds lead does not break the tie.
func TestReasonShareTie(t *testing.T) {
	in := Input{
		Jobs: []Job{testJob("x", 0, asking(2, 0)), testJob("y", 0), testJob("z", 0, asking(4, 0))},
		WaitEvents: []WaitEvent{
			ev("x", vocab.ReasonCapacityBusy, 0, 100),    // 200 GPU-s, 100 s
			ev("y", vocab.ReasonQuotaExhausted, 0, 200),  // 200 GPU-s, 200 s
			ev("z", vocab.ReasonHeld, 0, 25),             // 100 GPU-s
			ev("z", vocab.ReasonPoolUnavailable, 25, 50), // 100 GPU-s: environment and operator 200 GPU-s as well
		},
	}
	p := poolShare(t, mustCompute(t, in, window(0, 1000, 1000, nil)), "p")
	checkSums(t, p)
	want := "pool p: main problem is a tie of capacity, quota and environment and operator — 33.3% of waiting GPU-seconds each " +
		"(capacity_busy 33.3%; quota_exhausted 33.3%; held 16.7%, pool_unavailable 16.7%)"
	if p.Verdict != want || !slices.Equal(p.MainProblem, []vocab.ReasonGroup{vocab.GroupCapacity, vocab.GroupQuota, vocab.GroupEnvironmentOperator}) ||
		!near(val(p.MainShare), 1.0/3) {
		t.Errorf("tie: %q %v %v\nwant %q", p.Verdict, p.MainProblem, val(p.MainShare), want)
	}
	in.WaitEvents[1].End = atp(200.5) // quota 200.5 GPU-s: no longer a tie
	p = poolShare(t, mustCompute(t, in, window(0, 1000, 1000, nil)), "p")
	if !slices.Equal(p.MainProblem, []vocab.ReasonGroup{vocab.GroupQuota}) {
		t.Errorf("half a second more of quota: main problem %v (%s)", p.MainProblem, p.Verdict)
	}
}

// TestReasonSharesWithoutGPUs checks the fallback basis: when no waiting job
// requested a GPU, the verdict weighs job-seconds and says so.
func TestReasonSharesWithoutGPUs(t *testing.T) {
	in := Input{
		Jobs: []Job{testJob("x", 0, asking(0, 0)), testJob("y", 0, asking(0, 0))},
		WaitEvents: []WaitEvent{
			ev("x", vocab.ReasonReservedForHigherPriority, 0, 300),
			ev("y", vocab.ReasonCapacityBusy, 0, 100),
		},
	}
	p := poolShare(t, mustCompute(t, in, window(0, 1000, 1000, nil)), "p")
	want := "pool p: main problem is queue order — 75.0% of waiting job-seconds (no waiting job requested a GPU) (reserved_for_higher_priority 75.0%)"
	if p.Verdict != want || p.MainBasis != BasisJobSeconds || p.WaitGPUSeconds != 0 || p.Groups[0].GPUShare != nil {
		t.Errorf("no GPUs: %+v\nwant %q", p, want)
	}
}

// TestRenderReasonShares checks the text form: the verdict line per pool,
// every verdict group, the reasons with time under their group, and the
// service latency apart.
func TestRenderReasonShares(t *testing.T) {
	f := loadFixture(t)
	r := mustCompute(t, f.Input, f.Options)
	var b strings.Builder
	if err := RenderReasonShares(&b, r.Options.Window, r.End, r.ReasonShares); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{
		"\npool p1: main problem is fragmentation and spec — 66.7% of waiting GPU-seconds (fragmented 66.7%)\n",
		"\n  capacity                                2h55m      28.9%        17400      26.9%\n    capacity_busy                         2h55m      28.9%        17400      26.9%\n",
		"\n  fragmentation and spec                  6h00m      59.5%        43200      66.7%\n    fragmented ",
		"\n  queue order ", "\n  quota ", "\n  environment and operator ", "\n    held ",
		"\n  service latency (apart)                    0s       0.0%            0       0.0%\n",
		"\npool p2: main problem is environment and operator — 100.0% of waiting GPU-seconds (environment_not_ready 100.0%)\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("rendered shares lack %q:\n%s", want, out)
		}
	}
}

// TestRenderReportNamesMainProblems checks that the full text report ends
// with each pool's verdict line.
func TestRenderReportNamesMainProblems(t *testing.T) {
	f := loadFixture(t)
	var b strings.Builder
	if err := RenderReport(&b, mustCompute(t, f.Input, f.Options)); err != nil {
		t.Fatal(err)
	}
	want := "\nMain problem per pool (details: gpugov report --reasons)\n" +
		"pool p1: main problem is fragmentation and spec — 66.7% of waiting GPU-seconds (fragmented 66.7%)\n" +
		"pool p2: main problem is environment and operator — 100.0% of waiting GPU-seconds (environment_not_ready 100.0%)\n"
	if !strings.HasSuffix(b.String(), want) {
		t.Errorf("report does not end with the verdicts:\n%s", b.String())
	}
}
