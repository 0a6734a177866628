package replay

import (
	"strings"
	"testing"

	"github.com/gpugov/gpugov/api"
	"github.com/gpugov/gpugov/internal/trace/alibaba"
)

func node(sn string, gpus int, model string) alibaba.NodeRow {
	return alibaba.NodeRow{SN: sn, CPUMilli: 64000, MemoryMiB: 262144, GPUs: gpus, Model: model}
}

// TestSizePool: the covering nodes come first (the fewest GPUs that hold
// each pod, its models respected), then the list's order fills the pool to
// exactly the size; impossible sizes are errors naming the problem.
func TestSizePool(t *testing.T) {
	nodes := []alibaba.NodeRow{
		node("p100-a", 2, "P100"), node("cpu", 0, ""), node("g2-big", 8, "G2"), node("t4-4", 4, "T4"),
		node("p100-b", 2, "P100"), node("g2-other", 8, "G2"), node("v100", 8, "V100M32"),
	}
	big := pod("big", 8, 1000, alibaba.QoSBurstable, alibaba.PhaseRunning, 0, 10, 0)
	t4 := pod("t4", 3, 1000, alibaba.QoSLS, alibaba.PhaseRunning, 0, 10, 0)
	t4.GPUSpec = []string{"T4"}
	small := pod("small", 1, 500, alibaba.QoSBE, alibaba.PhaseRunning, 0, 10, 0)
	names := func(ns []alibaba.NodeRow) string {
		var out []string
		for _, n := range ns {
			out = append(out, n.SN)
		}
		return strings.Join(out, ",")
	}
	sz, err := SizePool(nodes, []alibaba.PodRow{small, big, t4}, 14)
	if err != nil {
		t.Fatal(err)
	}
	// big covers small too (largest pods first); t4 needs a T4 node.
	if got := names(sz.Nodes); got != "g2-big,t4-4,p100-a" || sz.GPUs != 14 || sz.Covering != 2 {
		t.Errorf("SizePool 14 = %s (%d GPUs, %d covering), want g2-big,t4-4,p100-a (14 GPUs, 2 covering)", got, sz.GPUs, sz.Covering)
	}
	if sz.ClusterNodes != 6 || sz.ClusterGPUs != 32 {
		t.Errorf("cluster %d nodes %d GPUs, want 6 and 32 (the CPU-only node left out)", sz.ClusterNodes, sz.ClusterGPUs)
	}
	if !strings.Contains(sz.String(), "14 GPUs on 3 nodes") {
		t.Errorf("String() = %q", sz.String())
	}
	// A node whose CPU no pod that may use it fits is never a filler, nor
	// a covering node for such a pod.
	tiny := node("v100-tiny", 1, "V100M16")
	tiny.CPUMilli = 8000
	hungry := pod("hungry", 1, 1000, alibaba.QoSLS, alibaba.PhaseRunning, 0, 10, 0)
	hungry.CPUMilli = 11300
	sz, err = SizePool([]alibaba.NodeRow{tiny, node("p100-a", 2, "P100"), node("p100-b", 2, "P100")}, []alibaba.PodRow{hungry}, 4)
	if err != nil || names(sz.Nodes) != "p100-a,p100-b" {
		t.Errorf("SizePool with a tiny node = %s, %v; want p100-a,p100-b", names(sz.Nodes), err)
	}
	for _, c := range []struct {
		gpus int
		pods []alibaba.PodRow
		want string
	}{
		{0, nil, "want a positive number"},
		{10, []alibaba.PodRow{big, t4}, "need 12 GPUs on 2 nodes"},
		{13, []alibaba.PodRow{big}, "reach only 12"},
		{8, []alibaba.PodRow{pod("huge", 16, 1000, alibaba.QoSLS, alibaba.PhaseRunning, 0, 10, 0)}, "no node of the list holds pod huge"},
	} {
		if _, err := SizePool(nodes, c.pods, c.gpus); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("SizePool %d GPUs: error %v, want one containing %q", c.gpus, err, c.want)
		}
	}
}

// TestPeakDemand: overlapping runs add up (shares as milli-GPU), a run
// ending as another starts does not overlap it, a never-scheduled pod
// counts until its deletion.
func TestPeakDemand(t *testing.T) {
	pods := []alibaba.PodRow{
		pod("a", 2, 1000, alibaba.QoSLS, alibaba.PhaseRunning, 0, 100, 0),     // 2000 over [0, 100)
		pod("b", 1, 500, alibaba.QoSBE, alibaba.PhaseRunning, 50, 120, 60),    // run 60 s: 500 over [50, 110)
		pod("c", 1, 1000, alibaba.QoSLS, alibaba.PhaseRunning, 100, 200, 100), // 1000 from 100: after a ends
		pod("p", 1, 1000, alibaba.QoSBE, alibaba.PhasePending, 105, 108, 0),   // pending: [105, 108)
	}
	subs, err := Build(pods, BuildOptions{From: 0, Speed: 1, Recovery: DefaultRecovery()})
	if err != nil {
		t.Fatal(err)
	}
	if got := PeakDemand(subs); got != 2500 {
		t.Errorf("PeakDemand = %d milli-GPU, want 2500 (a and b overlap; c and p overlap b only: 500+1000+1000)", got)
	}
}

// TestReportInputCutsPreemptedRuns: a victim's run ends at the preemption's
// release and the next starts at its resume; one never resumed has no run
// after the release.
func TestReportInputCutsPreemptedRuns(t *testing.T) {
	resumed := rec("resumed", "succeeded", true, at(100), 600, nil,
		api.WaitEvent{Reason: "capacity_busy", StartedAt: at(0), EndedAt: ptr(at(10))})
	lost := rec("lost", "waiting", false, at(100), 600, nil,
		api.WaitEvent{Reason: "capacity_busy", StartedAt: at(0), EndedAt: ptr(at(5))},
		api.WaitEvent{Reason: "capacity_busy", StartedAt: at(40)})
	lost.job.StartedAt = ptr(at(5))
	pre := []api.Preemption{
		{VictimJobID: "resumed", ReleasedAt: ptr(at(30)), ResumedAt: ptr(at(50))},
		{VictimJobID: "lost", ReleasedAt: ptr(at(40))},
	}
	queues := &api.QueueList{Queues: []api.Queue{{Name: "production", Tier: "production", ServiceShare: 1, MaxWaitSec: 60}}}
	in, _ := reportInput([]*jobRecord{resumed, lost}, queues, 600, pre)
	var got []string
	for _, r := range in.Runs {
		end := "open"
		if r.End != nil {
			end = r.End.Sub(t0).String()
		}
		got = append(got, r.JobID+" "+r.Start.Sub(t0).String()+".."+end)
	}
	want := "resumed 10s..30s,resumed 50s..1m40s,lost 5s..40s"
	if strings.Join(got, ",") != want {
		t.Errorf("runs %s, want %s", strings.Join(got, ","), want)
	}
	if len(in.Releases) != 3 {
		t.Errorf("%d releases, want 3 (each run's end)", len(in.Releases))
	}
}
