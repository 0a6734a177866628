package replay

import (
	"strings"
	"testing"
	"time"

	"github.com/gpugov/gpugov/api"
	"github.com/gpugov/gpugov/internal/trace"
	"github.com/gpugov/gpugov/internal/trace/alibaba"
	"github.com/gpugov/gpugov/internal/trace/philly"
	"github.com/gpugov/gpugov/internal/vocab"
)

func pod(name string, numGPU, milli int, qos alibaba.QoS, phase alibaba.Phase, created, deleted, scheduled int64) alibaba.PodRow {
	return alibaba.PodRow{Name: name, CPUMilli: 4000, MemoryMiB: 8192, NumGPU: numGPU, GPUMilli: milli, QoS: qos, Phase: phase,
		CreationTime: created, DeletionTime: deleted, ScheduledTime: scheduled, Scheduled: phase != alibaba.PhasePending}
}

func TestSelect(t *testing.T) {
	pods := []alibaba.PodRow{
		pod("late", 1, 1000, alibaba.QoSLS, alibaba.PhaseRunning, 300, 400, 300),
		pod("cpu", 0, 0, alibaba.QoSLS, alibaba.PhaseRunning, 150, 400, 150),
		pod("early", 1, 1000, alibaba.QoSLS, alibaba.PhaseRunning, 100, 400, 100),
		pod("before", 1, 1000, alibaba.QoSLS, alibaba.PhaseRunning, 99, 400, 99),
		pod("tie", 1, 1000, alibaba.QoSLS, alibaba.PhaseRunning, 100, 400, 100),
		pod("at-end", 1, 1000, alibaba.QoSLS, alibaba.PhaseRunning, 500, 600, 500),
	}
	names := func(ps []alibaba.PodRow) string {
		var out []string
		for _, p := range ps {
			out = append(out, p.Name)
		}
		return strings.Join(out, ",")
	}
	if got := names(Select(pods, 100, 500, 0)); got != "early,tie,late" {
		t.Errorf("Select = %s, want early,tie,late (GPU pods in [100, 500), creation order, file order on ties)", got)
	}
	if got := names(Select(pods, 100, 500, 2)); got != "early,tie" {
		t.Errorf("Select max 2 = %s, want early,tie", got)
	}
}

func TestBuild(t *testing.T) {
	pods := []alibaba.PodRow{
		pod("whole8", 8, 1000, alibaba.QoSGuaranteed, alibaba.PhaseSucceeded, 1000, 5000, 1200),
		pod("share", 1, 460, alibaba.QoSLS, alibaba.PhaseRunning, 1600, 2600, 1600),
		pod("never", 1, 1000, alibaba.QoSBE, alibaba.PhasePending, 2000, 2300, 0),
		pod("instant", 1, 1000, alibaba.QoSBurstable, alibaba.PhaseFailed, 2200, 2210, 2210),
	}
	subs, err := Build(pods, BuildOptions{From: 1000, Speed: 100, Recovery: Recovery{Probability: 1,
		Tiers: []vocab.Tier{vocab.TierExperiment}, CheckpointIntervalSeconds: 600, Seed: 1}})
	if err != nil {
		t.Fatal(err)
	}
	if len(subs) != 4 {
		t.Fatalf("%d submissions, want 4", len(subs))
	}
	w, s, n, i := subs[0], subs[1], subs[2], subs[3]
	if w.Key != "whole8" || w.SubmitAt != 0 || w.CancelAt != 0 || w.Spec.Queue != "key-project" ||
		w.Spec.Resources.GPUs != 8 || w.Spec.Resources.GPUMilli != 0 || w.Spec.Resources.Topology != "same-node" ||
		w.Spec.RunSeconds != 3800 || w.Spec.Recovery.Checkpointable {
		t.Errorf("whole8: %+v", w)
	}
	if s.SubmitAt != 6*time.Second || s.Spec.Queue != "production" || s.Spec.Resources.GPUMilli != 460 ||
		s.Spec.Resources.Pool != alibaba.DefaultPoolName || s.Spec.Project != alibaba.ProjectOf("share", alibaba.DefaultProjects) {
		t.Errorf("share: %+v", s)
	}
	if n.CancelAt != 13*time.Second || n.Spec.RunSeconds != 300 || n.Spec.Queue != "experiment" ||
		n.Spec.Recovery != (api.RecoverySpec{Checkpointable: true, CheckpointIntervalSeconds: 600}) {
		t.Errorf("never scheduled: %+v", n)
	}
	if i.Spec.RunSeconds != DefaultMinRunSeconds || i.Spec.Queue != "standard" {
		t.Errorf("zero run: %+v", i)
	}
	capped, err := Build(pods[:1], BuildOptions{From: 1000, Speed: 100, MaxRunSeconds: 60})
	if err != nil || capped[0].Spec.RunSeconds != 60 {
		t.Errorf("MaxRunSeconds 60: %v, %v", capped, err)
	}
	if _, err := Build(pods, BuildOptions{From: 1500, Speed: 100}); err == nil {
		t.Error("a pod created before From was accepted")
	}
	if _, err := Build(pods, BuildOptions{From: 1000}); err == nil {
		t.Error("speed 0 was accepted")
	}
}

// TestRecoveryDraw checks the rule's bounds and that a pod's draw depends on
// its name and the seed only.
func TestRecoveryDraw(t *testing.T) {
	r := DefaultRecovery()
	if r.Probability != 0.5 || r.CheckpointIntervalSeconds != 1800 || r.Seed != 1 {
		t.Fatalf("DefaultRecovery = %+v, want internal/simulation's 0.5, 1800 s, seed 1", r)
	}
	if got := r.draw("any", vocab.TierProduction); got.Checkpointable {
		t.Error("a production job drew recovery evidence; only standard and experiment do")
	}
	yes := 0
	for i := range 1000 {
		name := "pod-" + string(rune('a'+i%26)) + strings.Repeat("x", i/26)
		a, b := r.draw(name, vocab.TierExperiment), r.draw(name, vocab.TierExperiment)
		if a != b {
			t.Fatalf("draw of %s is not deterministic", name)
		}
		if a.Checkpointable {
			yes++
		}
	}
	if yes < 430 || yes > 570 {
		t.Errorf("%d of 1000 drew checkpointable at probability 0.5", yes)
	}
	r.Probability = 0
	if r.draw("pod-a", vocab.TierStandard).Checkpointable {
		t.Error("probability 0 drew checkpointable")
	}
}

func TestParseTraceTime(t *testing.T) {
	for in, want := range map[string]int64{"12772800": 12772800, "3548h": 12772800, "90s": 90, "0": 0} {
		if got, err := ParseTraceTime(in); err != nil || got != want {
			t.Errorf("ParseTraceTime(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "-5", "yesterday", "-1h"} {
		if _, err := ParseTraceTime(in); err == nil {
			t.Errorf("ParseTraceTime(%q) accepted", in)
		}
	}
}

func TestFormatSeconds(t *testing.T) {
	for v, want := range map[float64]string{0.042: "0.04s", 9.996: "10.0s", 12.34: "12.3s", 59.97: "1m0s", 754: "12m34s", 3725: "1h2m5s"} {
		if got := formatSeconds(v); got != want {
			t.Errorf("formatSeconds(%v) = %q, want %q", v, got, want)
		}
	}
}

// TestBuildJobsPhilly checks the neutral path on Philly jobs: the busiest
// window, the selection in submit order, and the submissions' specs (VC
// project, whole-nodes topology for a gang, the recorded wait carried).
func TestBuildJobsPhilly(t *testing.T) {
	src, err := philly.Read(philly.Files{Jobs: "../internal/trace/philly/testdata/jobs_good.csv",
		VCs: "../internal/trace/philly/testdata/vcs_good.csv", Recorded: "../internal/trace/philly/testdata/recorded_good.csv"}, philly.Options{})
	if err != nil {
		t.Fatal(err)
	}
	tr, err := src.Trace(trace.Options{Pool: "philly"})
	if err != nil {
		t.Fatal(err)
	}
	from := BusiestWindow(tr.Jobs, 3600)
	if from != 35940 {
		t.Errorf("busiest hour starts at %d, want 35940 (three submits from 09:59:00)", from)
	}
	sel := SelectJobs(tr.Jobs, from, from+86400*2, 0)
	if len(sel) != 5 || sel[0].Submit != 35940 || sel[4].Submit != 86460 {
		t.Fatalf("selected %+v", sel)
	}
	subs, err := BuildJobs(sel, BuildOptions{From: from, Speed: 60})
	if err != nil {
		t.Fatal(err)
	}
	g := subs[3] // the 12-GPU job, rounded up to two whole nodes
	if g.Spec.Project != "vcb" || g.Spec.Queue != "standard" || g.Spec.Resources.GPUs != 16 || g.Spec.Resources.Topology != "whole-nodes" ||
		g.Spec.RunSeconds != 60 || g.SubmitAt != time.Duration(86400-35940)*time.Second/60 || g.CancelAt != 0 {
		t.Errorf("gang submission %+v", g)
	}
	if !subs[0].Job.HasRecordedWait || subs[0].Job.RecordedWait != 600 || subs[0].Key != "philly-4" {
		t.Errorf("first submission %+v", subs[0])
	}
	if _, err := BuildJobs(sel, BuildOptions{From: from + 1, Speed: 60}); err == nil {
		t.Error("a job before From was accepted")
	}
}
