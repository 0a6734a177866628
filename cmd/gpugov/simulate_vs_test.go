package main

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/gpugov/gpugov/internal/experiment"
	"github.com/gpugov/gpugov/internal/queuereport"
	"github.com/gpugov/gpugov/internal/simulation"
	"github.com/gpugov/gpugov/internal/trace/alibaba"
	"github.com/gpugov/gpugov/internal/vocab"
)

// The what-if's baseline and aging-only candidate (README's example): the
// same queues (the default's, written out), the candidate's aging four
// times as fast and capped at 9,000 points instead of 3,000; policy.Diff
// finds the aging group only. whatIfSpec is the README's experiment spec.
const (
	whatIfBaseFile  = "../../deploy/whatif/baseline.yaml"
	whatIfAgingFile = "../../deploy/whatif/aging.yaml"
	whatIfSpecFile  = "../../deploy/whatif/experiment.yaml"
)

var whatIfBase, whatIfAging = mustReadFile(whatIfBaseFile), mustReadFile(whatIfAgingFile)

// mustReadFile reads a file of the repository the tests need.
func mustReadFile(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		panic(err)
	}
	return string(b)
}

// The real-trace slice of the what-if test: the first whatIfPods GPU pods
// created in the trace's busiest 24 hours (hours 3548–3572, replay's
// default slice) on the first three 2-GPU T4 nodes, six GPUs: enough
// contention that experiment jobs wait for hours, small enough to simulate
// twice in well under a second.
const (
	whatIfPods       = 300
	whatIfFrom int64 = 3548 * 3600
	whatIfTo   int64 = 3572 * 3600
)

// writeIn writes body to name in dir and returns its path.
func writeIn(t *testing.T, dir, name, body string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// realTraceSlice writes the what-if slice of the Alibaba trace
// ($GPUGOV_TRACE_DIR, else ../shared/traces/alibaba-gpu-v2023 beside the
// repository) to dir and returns the node and pod list paths. A missing
// trace fails the test in CI and skips it elsewhere.
func realTraceSlice(t *testing.T, dir string) (nodes, pods string) {
	t.Helper()
	src := os.Getenv("GPUGOV_TRACE_DIR")
	if src == "" {
		src = filepath.Join("..", "..", "..", "shared", "traces", "alibaba-gpu-v2023")
	}
	podFile := filepath.Join(src, "openb_pod_list_default.csv")
	if _, err := os.Stat(podFile); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("Alibaba trace not found in %s and CI=true: %v", src, err)
		}
		t.Skipf("Alibaba trace not found in %s: %v", src, err)
	}
	allNodes, err := alibaba.ReadNodes(filepath.Join(src, "openb_node_list_gpu_node.csv"))
	if err != nil {
		t.Fatal(err)
	}
	var ns []alibaba.NodeRow
	for _, n := range allNodes {
		if n.Model == "T4" && n.GPUs == 2 && len(ns) < 3 {
			ns = append(ns, n)
		}
	}
	allPods, _, err := alibaba.ReadPods(podFile, alibaba.ReadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var ps []alibaba.PodRow
	for _, p := range allPods {
		if p.NumGPU > 0 && p.CreationTime >= whatIfFrom && p.CreationTime < whatIfTo && len(ps) < whatIfPods {
			ps = append(ps, p)
		}
	}
	if len(ns) < 3 || len(ps) < whatIfPods {
		t.Fatalf("trace slice: %d nodes, %d pods", len(ns), len(ps))
	}
	nodes, pods = filepath.Join(dir, "nodes.csv"), filepath.Join(dir, "pods.csv")
	for _, f := range []struct {
		path  string
		write func(*os.File) error
	}{
		{nodes, func(w *os.File) error { return alibaba.WriteNodes(w, ns) }},
		{pods, func(w *os.File) error { return alibaba.WritePods(w, ps) }},
	} {
		if err := writeTraceFile(f.path, f.write); err != nil {
			t.Fatal(err)
		}
	}
	return nodes, pods
}

// whatIfJSON is the part of `simulate --vs --format json` the tests read.
type whatIfJSON struct {
	Input    whatIfInput `json:"input"`
	Baseline struct {
		Report simulation.Report `json:"report"`
	} `json:"baseline"`
	Candidate struct {
		Report simulation.Report `json:"report"`
	} `json:"candidate"`
	Groups      []vocab.PolicyGroup      `json:"variable_groups"`
	Warnings    []string                 `json:"warnings"`
	Spec        experiment.Spec          `json:"spec"`
	DefaultSpec bool                     `json:"default_spec"`
	Measured    []experiment.Measurement `json:"measurements"`
	Outcome     experiment.Outcome       `json:"outcome"`
	Notes       []string                 `json:"notes"`
}

// TestSimulateVsRealTrace runs an aging-only candidate against the baseline
// on a contended slice of the real trace: both runs read the same input
// (the digest the test computes of the files itself, the same pod and job
// counts, the same jobs digest), the candidate changes the aging group
// only, every queue metric of the comparison is one of the queue report's
// (queuereport's catalogue: the live definitions), the experiment tier's
// longest wait in the comparison is the one each run's own queue report
// gives, and a verdict is printed with the default spec, the whole-window
// note included.
func TestSimulateVsRealTrace(t *testing.T) {
	dir := t.TempDir()
	nodes, pods := realTraceSlice(t, dir)
	base, cand := whatIfBaseFile, whatIfAgingFile
	out, progress, err := runSimulateArgs(t, "--nodes", nodes, "--pods", pods, "--policy", base, "--vs", cand, "--format", "json")
	if err != nil {
		t.Fatalf("simulate --vs: %v\n%s", err, progress)
	}
	var got whatIfJSON
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("output is not JSON: %v\n%s", err, out)
	}
	in, err := readTrace(traceSource{nodes: nodes, pods: pods}, simulateFlags{})
	if err != nil {
		t.Fatal(err)
	}
	if want := traceDigest(in); got.Input.Digest != want || !got.Input.SameInInput || got.Input.JobsDigest == "" {
		t.Fatalf("input %+v, want digest %s read by both runs", got.Input, want)
	}
	if a, b := got.Baseline.Report, got.Candidate.Report; a.Pods != whatIfPods || b.Pods != whatIfPods || a.GPUJobs != b.GPUJobs {
		t.Fatalf("runs read %d and %d pods (%d and %d GPU jobs), want %d each", a.Pods, b.Pods, a.GPUJobs, b.GPUJobs, whatIfPods)
	}
	if !slices.Equal(got.Groups, []vocab.PolicyGroup{vocab.PolicyAging}) || len(got.Warnings) != 0 {
		t.Fatalf("groups %v, warnings %v; want aging only and no warning", got.Groups, got.Warnings)
	}
	if !got.DefaultSpec || got.Spec.Expected.Metric != "longest_wait_s" || !slices.Contains(got.Notes, WholeWindowNote) {
		t.Fatalf("spec %+v (default %v), notes %v", got.Spec, got.DefaultSpec, got.Notes)
	}
	queueMetrics := queuereport.GroupMetricNames()
	governance := map[string]bool{}
	for _, m := range experiment.Metrics() {
		governance[m.Name] = m.Governance
	}
	for _, r := range got.Outcome.Rows {
		if !governance[r.Metric] && !slices.Contains(queueMetrics, r.Metric) {
			t.Errorf("comparison row %s on %+v: not a queue report metric (%v)", r.Metric, r.Target, queueMetrics)
		}
	}
	if !got.Outcome.Verdict.Valid() {
		t.Fatalf("verdict %q", got.Outcome.Verdict)
	}
	// The comparison's experiment longest wait is each run's own queue
	// report's (queuereport.Compute over the run's records).
	exp := got.Outcome.Expected
	for i, r := range []simulation.Report{got.Baseline.Report, got.Candidate.Report} {
		v := []*float64{exp.Before, exp.After}[i]
		g := r.Groups[slices.IndexFunc(r.Groups, func(g simulation.Group) bool { return g.Tier == "experiment" })]
		if v == nil || math.Abs(*v-float64(g.LongestWaitS)) > 1 || g.LongestWaitS < 3600 {
			t.Errorf("run %d: comparison's experiment longest_wait_s %v, the run's report %d s (want equal, and over an hour: contended)",
				i, v, g.LongestWaitS)
		}
	}
	t.Logf("verdict %s: %s", got.Outcome.Verdict, got.Outcome.Reason)

	text, _, err := runSimulateArgs(t, "--nodes", nodes, "--pods", pods, "--policy", base, "--vs", cand)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"read once: digest " + got.Input.Digest, "both runs read the same input", "variable groups the candidate changes: aging",
		"baseline run (" + base + ")", "candidate run (" + cand + ")", DefaultWhatIfSpecText, WholeWindowNote,
		"verdict:  " + string(got.Outcome.Verdict), "comparison (before: baseline, after: candidate):"} {
		if !strings.Contains(text, want) {
			t.Errorf("text output lacks %q:\n%s", want, text)
		}
	}

	// README's example: the same runs judged by deploy/whatif/experiment.yaml.
	text, _, err = runSimulateArgs(t, "--nodes", nodes, "--pods", pods, "--policy", base, "--vs", cand, "--experiment", whatIfSpecFile)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(text, `experiment "faster-aging"`) || !strings.Contains(text, "verdict:  ") {
		t.Fatalf("README's what-if:\n%s", text)
	}
	t.Logf("README's what-if:\n%s", text[strings.Index(text, "verdict:"):strings.Index(text, "comparison (")])
}

// TestSimulateVsExperimentSpec judges the candidate with a spec file on the
// small test trace: its expected result and conditions are the ones checked
// (the spec's name in the output), a candidate changing two groups is a
// warning listing them, not a refusal, and the spec's pools are replaced by
// the simulated pool with a warning.
func TestSimulateVsExperimentSpec(t *testing.T) {
	dir := t.TempDir()
	base := writeIn(t, dir, "base.yaml", whatIfBase)
	two := writeIn(t, dir, "two.yaml", whatIfAging+"preemption: {min_runtime_s: 5}\n")
	spec := writeIn(t, dir, "exp.yaml", `name: aging-and-preemption
hypothesis: faster aging and earlier preemption shorten the longest waits
scope: {pools: [a100]}
window_s: 3600
expected: {metric: wait_max_s, direction: decrease, change: 0.05}
rollback:
  - {metric: recompute_gpu_s, above_baseline_factor: 100}
`)
	out, _, err := runSimulateArgs(t, "--nodes", simNodes, "--pods", simPods, "--policy", base, "--vs", two, "--experiment", spec, "--format", "json")
	if err != nil {
		t.Fatal(err)
	}
	var got whatIfJSON
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatal(err)
	}
	if got.Spec.Name != "aging-and-preemption" || got.DefaultSpec || got.Outcome.Expected.Metric != "wait_max_s" ||
		len(got.Outcome.Checks) != 1 || got.Outcome.Checks[0].Condition.Metric != "recompute_gpu_s" {
		t.Fatalf("spec %+v, outcome %+v", got.Spec, got.Outcome)
	}
	if !slices.Equal(got.Groups, []vocab.PolicyGroup{vocab.PolicyAging, vocab.PolicyPreemption}) || len(got.Warnings) != 2 ||
		!strings.Contains(got.Warnings[0], `scope.pools [a100]: the simulation has one pool, "alibaba"`) ||
		!strings.Contains(got.Warnings[1], "aging, preemption") {
		t.Fatalf("groups %v, warnings %q", got.Groups, got.Warnings)
	}
	if got.Spec.Scope.Pools[0] != "alibaba" || len(got.Measured) != 2 || got.Measured[0].Governance.Measured == nil {
		t.Fatalf("scope %+v, measurements %+v", got.Spec.Scope, got.Measured)
	}
}

// TestSimulateVsSummaryIsTheMeasurement: each run's summary prints the
// measurement the comparison reads (the queue report's definitions), not
// the simulator's own report: every tier row holds that run's measured
// values rendered as the comparison renders them, the simulator's numbers
// are labelled as its own, and the window is given in trace time (seconds
// from the trace's origin), never as 1970 dates.
func TestSimulateVsSummaryIsTheMeasurement(t *testing.T) {
	dir := t.TempDir()
	base := writeIn(t, dir, "base.yaml", whatIfBase)
	cand := writeIn(t, dir, "aging.yaml", whatIfAging)
	args := []string{"--nodes", simNodes, "--pods", simPods, "--policy", base, "--vs", cand}
	out, _, err := runSimulateArgs(t, append(slices.Clone(args), "--format", "json")...)
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		whatIfJSON
		Window      queuereport.Window `json:"window"`
		TraceWindow traceWindow        `json:"trace_window"`
	}
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatal(err)
	}
	if len(got.Measured) != 2 || got.TraceWindow.FromS != unixSeconds(got.Window.From) || got.TraceWindow.ToS != unixSeconds(got.Window.To) ||
		got.TraceWindow.Dates != nil {
		t.Fatalf("measurements %d, window %+v, trace window %+v", len(got.Measured), got.Window, got.TraceWindow)
	}
	text, _, err := runSimulateArgs(t, args...)
	if err != nil {
		t.Fatal(err)
	}
	for _, bad := range []string{"sim_p95", "starved jobs", "1970-"} {
		if strings.Contains(text, bad) {
			t.Errorf("text output holds %q:\n%s", bad, text)
		}
	}
	for _, want := range []string{"simulator only (its own report, not compared): ", CancelRateNote,
		fmt.Sprintf("trace time t=%d s (day %.1f) to t=%d s", got.Window.From.Unix(), float64(got.Window.From.Unix())/86400, got.Window.To.Unix())} {
		if !strings.Contains(text, want) {
			t.Errorf("text output lacks %q:\n%s", want, text)
		}
	}
	runs := []string{"baseline run (" + base + "):", "candidate run (" + cand + "):"}
	for i, m := range got.Measured {
		section := text[strings.Index(text, runs[i]):]
		if end := strings.Index(section, "simulator only"); end > 0 {
			section = section[:end]
		}
		if len(m.ByTier) == 0 {
			t.Fatalf("run %d: no tier measured", i)
		}
		lines := strings.Split(section, "\n")
		for _, g := range m.ByTier {
			tier := experiment.Target{Tier: g.Key[queuereport.KeyTier]}
			want := []string{tier.Tier}
			for _, metric := range summaryMetrics {
				v, _, err := m.Value(metric, tier)
				if err != nil {
					t.Fatal(err)
				}
				want = append(want, experiment.FormatValue(v))
			}
			if !slices.ContainsFunc(lines, func(l string) bool { return slices.Equal(strings.Fields(l), want) }) {
				t.Errorf("run %d: no summary row %v in:\n%s", i, want, section)
			}
		}
		total := fmt.Sprintf("total %d jobs, %d started", m.Total.Jobs, m.Total.Started)
		if !strings.Contains(section, total) || !strings.Contains(section, fmt.Sprintf("starving_jobs %d;", m.Total.StarvingJobs)) {
			t.Errorf("run %d: summary lacks %q and starving_jobs %d:\n%s", i, total, m.Total.StarvingJobs, section)
		}
	}
}

// TestSimulateVsBadInput: every bad input is a usage error (exit 2) naming
// the file and the field or line, before anything is simulated.
func TestSimulateVsBadInput(t *testing.T) {
	dir := t.TempDir()
	base := writeIn(t, dir, "base.yaml", whatIfBase)
	cand := writeIn(t, dir, "aging.yaml", whatIfAging)
	badPolicy := writeIn(t, dir, "bad.yaml", "version: gpugov.policy/v1\naging: {cap_points: -3}\n")
	unknownMetric := writeIn(t, dir, "metric.yaml", `name: m
hypothesis: h
scope: {pools: [alibaba]}
window_s: 3600
expected: {metric: longest_wait, tier: experiment, direction: decrease, change: 0.3}
rollback: []
`)
	withCandidate := writeIn(t, dir, "cand.yaml", `name: m
hypothesis: h
candidate: {file: aging.yaml}
scope: {pools: [alibaba]}
window_s: 3600
expected: {metric: longest_wait_s, tier: experiment, direction: decrease, change: 0.3}
rollback: []
`)
	withHash := writeIn(t, dir, "hash.yaml", strings.Replace(string(mustRead(t, withCandidate)), "{file: aging.yaml}", "{hash: 0123456789abcdef}", 1))
	sim := []string{"--nodes", simNodes, "--pods", simPods}
	cases := []struct {
		name string
		args []string
		want string
	}{
		{"unknown candidate file", []string{"--vs", filepath.Join(dir, "absent.yaml")}, "absent.yaml"},
		{"candidate does not load", []string{"--policy", base, "--vs", badPolicy}, badPolicy + ":2: aging.cap_points"},
		{"unknown baseline file", []string{"--policy", filepath.Join(dir, "none.yaml"), "--vs", cand}, "none.yaml"},
		{"unknown spec file", []string{"--vs", cand, "--experiment", filepath.Join(dir, "nope.yaml")}, "nope.yaml"},
		{"unknown metric", []string{"--vs", cand, "--experiment", unknownMetric}, unknownMetric + ":5: expected.metric: unknown metric \"longest_wait\""},
		{"candidate twice", []string{"--vs", cand, "--experiment", withCandidate}, withCandidate + ":3: candidate: set here and by --vs"},
		{"candidate hash", []string{"--experiment", withHash}, "candidate.hash: a what-if needs the candidate's policy file"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := runSimulateArgs(t, append(slices.Clone(sim), tc.args...)...)
			if err == nil || !isUsageError(err) {
				t.Fatalf("error %v, want a usage error (exit 2)", err)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %q lacks %q", err, tc.want)
			}
		})
	}
	// The spec's candidate.file is the candidate when --vs is left out.
	out, _, err := runSimulateArgs(t, append(slices.Clone(sim), "--policy", base, "--experiment", withCandidate)...)
	if err != nil || !strings.Contains(out, "candidate the candidate of "+withCandidate) {
		t.Fatalf("candidate.file as the candidate: %v\n%s", err, out)
	}
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestSimulationGovernance: the governance a simulation measures is its
// report's preemption totals and, from its records, the cancel rate and
// the delivered share, Measured naming exactly those.
func TestSimulationGovernance(t *testing.T) {
	in, err := readTrace(traceSource{nodes: simNodes, pods: simPods}, simulateFlags{})
	if err != nil {
		t.Fatal(err)
	}
	r, err := simulation.Run(in, simulation.DefaultConfig(), nil)
	if err != nil {
		t.Fatal(err)
	}
	w := simulation.CoveringWindow(r)
	g := r.Governance(w, experiment.Scope{Pools: []string{"alibaba"}, Queues: []string{"production"}})
	all := r.Governance(w, experiment.Scope{Pools: []string{"alibaba"}})
	none := r.Governance(w, experiment.Scope{Pools: []string{"elsewhere"}})
	if g.Preemptions != r.Preemptions.Count || g.EffectiveRunLossGPUSeconds != r.Preemptions.LossGPUSeconds ||
		!slices.Equal(g.Measured, simulation.GovernanceMeasured) {
		t.Fatalf("governance %+v, report preemptions %+v", g, r.Preemptions)
	}
	if all.ServiceShareDelivered == nil || *all.ServiceShareDelivered != 1 || g.ServiceShareDelivered == nil ||
		*g.ServiceShareDelivered <= 0 || *g.ServiceShareDelivered >= 1 || g.CancelRate == nil {
		t.Fatalf("shares: production %v, every queue %v; cancel rate %v", g.ServiceShareDelivered, all.ServiceShareDelivered, g.CancelRate)
	}
	if none.CancelRate != nil || none.ServiceShareDelivered != nil {
		t.Fatalf("another pool: %+v", none)
	}
}
