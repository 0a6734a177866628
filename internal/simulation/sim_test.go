package simulation

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"runtime/debug"
	"strings"
	"testing"
	"time"

	"github.com/gpugov/gpugov/internal/queuereport"
	"github.com/gpugov/gpugov/internal/trace"
	"github.com/gpugov/gpugov/internal/trace/alibaba"
	"github.com/gpugov/gpugov/internal/vocab"
)

// readInput reads a fixture trace from testdata.
func readInput(t testing.TB, nodes, pods string) Input {
	t.Helper()
	n, err := alibaba.ReadNodes(nodes)
	if err != nil {
		t.Fatal(err)
	}
	p, skipped, err := alibaba.ReadPods(pods, alibaba.ReadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return Input{Nodes: n, Pods: p, Skipped: skipped}
}

func groupOf(t *testing.T, r *Report, tier string) Group {
	t.Helper()
	for _, g := range r.Groups {
		if g.Tier == tier {
			return g
		}
	}
	t.Fatalf("no group %q", tier)
	return Group{}
}

// eq checks an optional percentile against its hand-computed value.
func eq(t *testing.T, what string, got *int64, want int64) {
	t.Helper()
	if got == nil || *got != want {
		t.Errorf("%s = %v, want %d", what, secs(got), want)
	}
}

func sumReasons(m map[string]float64) float64 {
	var s float64
	for _, v := range m {
		s += v
	}
	return s
}

// TestSmallTraceWaits replays testdata/pods_small.csv on one node with two T4s,
// with no checkpointable jobs (so nothing is preempted). Hand-worked timeline:
//
//	a LS        runs 0–100
//	b BE        runs 10–210
//	c LS        arrives 20, both GPUs busy, starts at 100 when a ends: wait 80 (trace 5); runs to 120
//	d BE        Pending in the trace: arrives 30, cancelled at its deletion at 90 after 60 s
//	h BE        4 GPUs on one node: never fits, waits 50–269 (no_matching_capacity)
//	e BE        half a T4 at 130 on the GPU c freed: wait 0; runs to 160
//	f Burstable 2 GPUs on one node, arrives 140, starts at 210 when b ends: wait 70 (trace 1); runs 59 s to 269
//	g           CPU-only, left out
func TestSmallTraceWaits(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Recovery.Probability = 0
	r, err := Run(readInput(t, "testdata/nodes_two_t4.csv", "testdata/pods_small.csv"), cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	if r.GPUJobs != 7 || r.CPUOnlyPods != 1 || r.GPUs != 2 || r.Nodes != 1 {
		t.Fatalf("jobs %d, CPU-only %d, GPUs %d, nodes %d", r.GPUJobs, r.CPUOnlyPods, r.GPUs, r.Nodes)
	}
	if r.Span != (Span{StartS: 0, EndS: 269}) {
		t.Fatalf("span %+v, want 0..269", r.Span)
	}

	prod := groupOf(t, r, "production")
	if prod.Jobs != 2 || prod.SimWaits != 2 || prod.TraceWaits != 2 {
		t.Fatalf("production counts %+v", prod)
	}
	eq(t, "production sim p50", prod.WaitP50S, 0)
	eq(t, "production sim p95", prod.WaitP95S, 80)
	eq(t, "production sim max", prod.WaitMaxS, 80)
	eq(t, "production trace p50", prod.TraceP50S, 0)
	eq(t, "production trace p99", prod.TraceP99S, 5)
	if prod.OverObjective != 1 || prod.TraceOverObjective != 0 || prod.LongestWaitS != 80 {
		t.Errorf("production over objective %d (trace %d), longest %d; want 1, 0, 80",
			prod.OverObjective, prod.TraceOverObjective, prod.LongestWaitS)
	}

	std := groupOf(t, r, "standard")
	eq(t, "standard sim p50", std.WaitP50S, 70)
	eq(t, "standard trace p50", std.TraceP50S, 1)

	exp := groupOf(t, r, "experiment")
	if exp.Jobs != 4 || exp.SimWaits != 2 || exp.TraceWaits != 3 || exp.TraceUnscheduled != 1 ||
		exp.TraceUnscheduledStarted != 0 || exp.CancelledWhileWaiting != 1 || exp.NeverStarted != 1 {
		t.Fatalf("experiment counts %+v", exp)
	}
	eq(t, "experiment sim max", exp.WaitMaxS, 0)
	if exp.LongestWaitS != 219 {
		t.Errorf("experiment longest wait %d, want 219 (h, 50–269)", exp.LongestWaitS)
	}
	if got := exp.Reasons[string(vocab.ReasonNoMatchingCapacity)]; got != 219 {
		t.Errorf("experiment no_matching_capacity %v s, want 219 (h)", got)
	}
	if kp := groupOf(t, r, "key-project"); kp.Jobs != 0 || kp.WaitP50S != nil || kp.TraceP50S != nil {
		t.Errorf("key-project group %+v, want empty with null percentiles", kp)
	}

	// Every second of waiting is charged to exactly one reason.
	for tier, want := range map[string]float64{"production": 80, "standard": 70, "experiment": 60 + 219} {
		if got := sumReasons(groupOf(t, r, tier).Reasons); got != want {
			t.Errorf("%s reason seconds %v, want %v", tier, got, want)
		}
	}
	if got := sumReasons(r.Reasons); got != 429 {
		t.Errorf("total reason seconds %v, want 429", got)
	}
	// The reason shares weigh each wait by its GPUs: capacity_busy c 80 + d 60
	// + f 70 × 2 = 280 GPU-s, no_matching_capacity h 219 × 4 = 876 GPU-s.
	if len(r.ReasonShares) != 1 || r.ReasonShares[0].WaitGPUSeconds != 280+876 || r.ReasonShares[0].WaitS != 429 ||
		r.ReasonShares[0].Verdict != "pool alibaba: main problem is fragmentation and spec — 75.8% of waiting GPU-seconds (no_matching_capacity 75.8%)" {
		t.Errorf("reason shares %+v", r.ReasonShares)
	}
	var text bytes.Buffer
	if err := r.WriteText(&text); err != nil || !strings.Contains(text.String(), "\n"+r.ReasonShares[0].Verdict+"\n") {
		t.Errorf("text report lacks the verdict (%v):\n%s", err, text.String())
	}

	// a 100 + b 200 + c 20 + e 0.5×30 + f 2×59 = 453 GPU-s over 2 GPUs × 269 s.
	if r.AllocatedGPUSeconds != 453 || r.CapacityGPUSeconds != 538 ||
		math.Abs(r.GPUUtilization-453.0/538) > 1e-12 {
		t.Errorf("utilization %v = %v / %v, want 453/538", r.GPUUtilization, r.AllocatedGPUSeconds, r.CapacityGPUSeconds)
	}
	if r.Unfinished.Count != 1 || r.Unfinished.NeverStarted != 1 || strings.Join(r.Unfinished.Jobs, ",") != "h" {
		t.Errorf("unfinished %+v, want h never started", r.Unfinished)
	}
	if r.StarvedJobs.Count != 1 || r.StarvedJobs.Jobs[0].Job != "h" || r.StarvedJobs.Jobs[0].Started ||
		r.StarvedJobs.Jobs[0].Reason != string(vocab.ReasonNoMatchingCapacity) {
		t.Errorf("starved %+v, want only h", r.StarvedJobs)
	}
	if r.Preemptions != (Preemptions{}) {
		t.Errorf("preemptions %+v with no checkpointable job", r.Preemptions)
	}
}

// TestStarvationByObjective: with a 10 s production objective, c's 80 s wait
// is over 4× the objective and c is listed as starved (started).
func TestStarvationByObjective(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Recovery.Probability = 0
	cfg.Queues[0].MaxWait = 10e9
	r, err := Run(readInput(t, "testdata/nodes_two_t4.csv", "testdata/pods_small.csv"), cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	if r.StarvedJobs.Count != 2 {
		t.Fatalf("starved %+v, want h and c", r.StarvedJobs)
	}
	c := r.StarvedJobs.Jobs[1] // sorted by longest wait: h 219, c 80
	if c.Job != "c" || !c.Started || c.LongestWaitS != 80 || c.ObjectiveS != 10 {
		t.Errorf("starved c %+v", c)
	}
}

// TestStarvationSignals replays testdata/pods_starvation.csv on one T4 with
// no checkpointable job. Hand-worked timeline:
//
//	a  LS  runs 0–100
//	x  BE  arrives 5, waits while p1, p2, p3 (LS, arriving 20, 30, 40) queue
//	       ahead of it; they run 100–110, 110–120, 120–130; x starts at 130
//	p* LS  each waits 80 s (over the 60 s objective, not over 4 × 60 s)
//
// x's wait (5, 130) holds queuereport's three signals: overtaken by p1–p3
// (later, same GPUs), 3 releases (a, p1, p2; p3's at 130 ends the wait) and
// 3 higher-tier arrivals, so x is starved although it is neither over 4 ×
// its objective nor waiting at the end. Signals count only on waits of at
// least the queue's objective and the report's floor: the experiment
// objective is set to 100 s and the 300 s floor dropped, so x's 125 s wait
// qualifies (and is over its objective).
func TestStarvationSignals(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Recovery.Probability = 0
	cfg.StarvationMinWaitS = queuereport.NoStarvationMinWait
	for i := range cfg.Queues {
		if cfg.Queues[i].Tier == vocab.TierExperiment {
			cfg.Queues[i].MaxWait = 100 * time.Second
		}
	}
	r, err := Run(readInput(t, "testdata/nodes_one_t4.csv", "testdata/pods_starvation.csv"), cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	if r.StarvedJobs.Count != 1 {
		t.Fatalf("starved %+v, want x only", r.StarvedJobs)
	}
	x := r.StarvedJobs.Jobs[0]
	if x.Job != "x" || !x.Started || x.LongestWaitS != 125 ||
		strings.Join(x.Signals, ",") != "overtaken,releases,higher_tier_arrivals" {
		t.Errorf("starved x %+v", x)
	}
	prod, exp := groupOf(t, r, "production"), groupOf(t, r, "experiment")
	eq(t, "production sim p50", prod.WaitP50S, 80)
	eq(t, "experiment sim max", exp.WaitMaxS, 125)
	if prod.OverObjective != 3 || exp.OverObjective != 1 || sumReasons(exp.Reasons) != 125 || sumReasons(prod.Reasons) != 240 {
		t.Errorf("production over objective %d, reasons %v; experiment over objective %d, reasons %v",
			prod.OverObjective, prod.Reasons, exp.OverObjective, exp.Reasons)
	}
}

// TestPreemption: on one T4, checkpointable BE job b (checkpoint every 50 s)
// has run 120 s when LS job c arrives. b is preempted at 120: its last
// checkpoint was at 100, so 20 s are lost; it saves nothing after the notice;
// its next run restores for 5 s and redoes the 20 s, a recompute of 25 s:
// 45 GPU-s of effective run loss (accounting.EffectiveRunLoss), and its
// remaining run grows from 180 to 205 s. c starts at once (wait 0), runs
// 30 s; b resumes at 150 (requeue wait 30), passes the step of the notice at
// 175 and ends at 355.
func TestPreemption(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Recovery = RecoveryRule{Tiers: []vocab.Tier{vocab.TierExperiment}, Probability: 1,
		CheckpointIntervalSeconds: 50, VerifiedResumes: 1}
	cfg.Policy.Preemption.MinRuntimeSeconds = 10
	cfg.Policy.Preemption.SaveRestoreSeconds = 5
	r, err := Run(readInput(t, "testdata/nodes_one_t4.csv", "testdata/pods_preempt.csv"), cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	if r.Preemptions.Count != 1 || r.Preemptions.LossGPUSeconds != 45 || r.Preemptions.RecomputeUnmeasured != 0 {
		t.Fatalf("preemptions %+v, want 1 with 45 GPU-s loss, recompute measured", r.Preemptions)
	}
	var order []string
	for _, p := range r.History.Placements {
		order = append(order, fmt.Sprintf("%s@%d", p.JobID, p.At.Sub(alibaba.Epoch)/time.Second))
	}
	if got := strings.Join(order, " "); got != "b@0 c@120 b@150" {
		t.Errorf("placements %s, want b@0 c@120 b@150", got)
	}
	exp := groupOf(t, r, "experiment")
	if exp.Preemptions != 1 || exp.RequeueWaits != 1 {
		t.Fatalf("experiment group %+v", exp)
	}
	eq(t, "b requeue wait", exp.RequeueWaitMaxS, 30)
	eq(t, "c wait", groupOf(t, r, "production").WaitMaxS, 0)
	if r.Span.EndS != 355 {
		t.Errorf("span ends at %d, want 355 (b resumed at 150 for 205 s)", r.Span.EndS)
	}
	// b ran 120 + 205 s, c 30 s.
	if r.AllocatedGPUSeconds != 355 {
		t.Errorf("allocated %v GPU-s, want 355", r.AllocatedGPUSeconds)
	}

	// In stage observe the proposal is only recorded: c waits for b's end.
	cfg.Stage = vocab.StageObserve
	r, err = Run(readInput(t, "testdata/nodes_one_t4.csv", "testdata/pods_preempt.csv"), cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	if r.Preemptions.Count != 0 || r.Preemptions.WouldPreempt == 0 {
		t.Fatalf("observe: preemptions %+v, want none carried out and some proposed", r.Preemptions)
	}
	eq(t, "observe: c wait", groupOf(t, r, "production").WaitMaxS, 180)
}

// TestReportJSONShape checks the field names and types other tools read.
func TestReportJSONShape(t *testing.T) {
	cfg := DefaultConfig()
	r, err := Run(readInput(t, "testdata/nodes_two_t4.csv", "testdata/pods_small.csv"), cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := r.WriteJSON(&buf); err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := json.Unmarshal(buf.Bytes(), &doc); err != nil {
		t.Fatal(err)
	}
	for key, kind := range map[string]string{
		"groups": "array", "reasons": "object", "preemptions": "object", "gpu_utilization": "number",
		"starved_jobs": "object", "assumptions": "array", "skipped_rows": "object", "unfinished": "object",
		"span": "object", "policy_version": "string", "seed": "number", "reason_shares": "array",
	} {
		if got := kindOf(doc[key]); got != kind {
			t.Errorf("%s is %s, want %s", key, got, kind)
		}
	}
	groups := doc["groups"].([]any)
	if len(groups) != 4 {
		t.Fatalf("%d groups, want 4", len(groups))
	}
	wantTiers := []string{"production", "key-project", "standard", "experiment"}
	for i, g := range groups {
		obj := g.(map[string]any)
		if obj["tier"] != wantTiers[i] {
			t.Errorf("groups[%d].tier = %v, want %s", i, obj["tier"], wantTiers[i])
		}
		for _, key := range []string{"jobs", "over_objective"} {
			if kindOf(obj[key]) != "number" {
				t.Errorf("groups[%d].%s is %s", i, key, kindOf(obj[key]))
			}
		}
		for _, key := range []string{"wait_p50_s", "wait_p95_s", "wait_p99_s", "wait_max_s",
			"trace_wait_p50_s", "trace_wait_p95_s", "trace_wait_p99_s", "trace_wait_max_s"} {
			k := kindOf(obj[key])
			if k != "number" && !(k == "null" && obj["jobs"].(float64) == 0) {
				t.Errorf("groups[%d].%s is %s", i, key, k)
			}
		}
		if kindOf(obj["reasons"]) != "object" {
			t.Errorf("groups[%d].reasons is %s", i, kindOf(obj["reasons"]))
		}
	}
	pre := doc["preemptions"].(map[string]any)
	st := doc["starved_jobs"].(map[string]any)
	if kindOf(pre["count"]) != "number" || kindOf(pre["loss_gpu_seconds"]) != "number" ||
		kindOf(st["count"]) != "number" || kindOf(st["jobs"]) != "array" {
		t.Errorf("preemptions %v, starved_jobs %v", pre, st)
	}
	if len(doc["assumptions"].([]any)) == 0 {
		t.Error("no assumptions stated")
	}
}

func kindOf(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case []any:
		return "array"
	case map[string]any:
		return "object"
	case float64:
		return "number"
	case string:
		return "string"
	}
	return "other"
}

// TestDeterminism: the same seed gives byte-identical reports; the recovery
// draw depends on the seed.
func TestDeterminism(t *testing.T) {
	in := readInput(t, "testdata/nodes_two_t4.csv", "testdata/pods_small.csv")
	cfg := DefaultConfig()
	cfg.Policy.Preemption.MinRuntimeSeconds = 5
	render := func(c Config) string {
		r, err := Run(in, c, nil)
		if err != nil {
			t.Fatal(err)
		}
		var buf bytes.Buffer
		if err := r.WriteJSON(&buf); err != nil {
			t.Fatal(err)
		}
		if err := r.WriteText(&buf); err != nil {
			t.Fatal(err)
		}
		return buf.String()
	}
	first := render(cfg)
	for i := 0; i < 3; i++ {
		if render(cfg) != first {
			t.Fatal("two runs with the same seed differ")
		}
	}
	differs := false
	for seed := uint64(2); seed < 40 && !differs; seed++ {
		for i := 0; i < 20; i++ {
			id := "job-" + string(rune('a'+i))
			a := drawRecovery(cfg, id, vocab.TierExperiment)
			c2 := cfg
			c2.Seed = seed
			if drawRecovery(c2, id, vocab.TierExperiment) != a {
				differs = true
			}
		}
	}
	if !differs {
		t.Fatal("the recovery draw ignores the seed")
	}
	if drawRecovery(cfg, "x", vocab.TierProduction).Checkpointable {
		t.Fatal("a production job drew recovery evidence; the rule lists standard and experiment only")
	}
}

// TestProgress checks the progress lines on stderr.
func TestProgress(t *testing.T) {
	var buf bytes.Buffer
	if _, err := Run(readInput(t, "testdata/nodes_two_t4.csv", "testdata/pods_small.csv"), DefaultConfig(), &buf); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(buf.String(), "simulate: done at") {
		t.Fatalf("progress output %q lacks the final line", buf.String())
	}
}

// The real trace lives outside the repository (docs/design.md §9).
const traceDir = "../../../shared/traces/alibaba-gpu-v2023/"

// BenchmarkSimulateDefaultTrace simulates the whole default trace (8,152
// pods, 6,212 GPUs) under DefaultConfig. Target: ≤ 10 s per run. The gc=400
// case runs as `gpugov simulate` does (BatchGCPercent); gc=100 is Go's default.
func BenchmarkSimulateDefaultTrace(b *testing.B) {
	nodes, pods := traceDir+"openb_node_list_gpu_node.csv", traceDir+"openb_pod_list_default.csv"
	if _, err := os.Stat(pods); err != nil {
		b.Skip("trace absent:", pods)
	}
	in := readInput(b, nodes, pods)
	cfg := DefaultConfig()
	for _, gc := range []int{BatchGCPercent, 100} {
		b.Run(fmt.Sprintf("gc=%d", gc), func(b *testing.B) {
			defer debug.SetGCPercent(debug.SetGCPercent(gc))
			for b.Loop() {
				if _, err := Run(in, cfg, nil); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestMinShareInSimulation replays testdata/pods_minshare.csv on two T4s: a
// key-project stream (k1–k8, 100 s each, two at a time) keeps both GPUs
// busy while experiment job x (arriving at 5, 300 s) waits. Without a
// min_share x starts only when the stream is done, at 400 (wait 395); with
// the experiment queue's min_share 0.5 (1 of the 2 GPUs) it takes the first
// GPU freed after its arrival, at 100 (wait 95), and the stream runs on the
// other GPU. The simulator's Plan reads the queue shares from Config.Queues.
func TestMinShareInSimulation(t *testing.T) {
	in := readInput(t, "testdata/nodes_two_t4.csv", "testdata/pods_minshare.csv")
	run := func(minShare float64) Group {
		t.Helper()
		cfg := DefaultConfig()
		cfg.Recovery.Probability = 0
		for i := range cfg.Queues {
			if cfg.Queues[i].Tier == vocab.TierExperiment {
				cfg.Queues[i].MinShare = minShare
			}
		}
		r, err := Run(in, cfg, nil)
		if err != nil {
			t.Fatal(err)
		}
		return groupOf(t, r, "experiment")
	}
	eq(t, "experiment wait without min_share", run(0).WaitMaxS, 395)
	eq(t, "experiment wait with min_share 0.5", run(0.5).WaitMaxS, 95)
}

// TestDeclaredRunSeconds checks that each simulated job declares the run
// time the replay submits as run_seconds (the trace's run time; deletion −
// creation for a pod never scheduled; at least 1 s), which its running job
// carries as RunningJob.RunSeconds for the wait's expected releases.
func TestDeclaredRunSeconds(t *testing.T) {
	in := readInput(t, "testdata/nodes_two_t4.csv", "testdata/pods_small.csv")
	cfg := DefaultConfig()
	tr, err := in.source().Trace(trace.Options{Pool: cfg.PoolName, Stage: cfg.Stage, Projects: cfg.Projects})
	if err != nil {
		t.Fatal(err)
	}
	e := newEngine(tr, cfg, nil)
	if len(e.jobs) == 0 {
		t.Fatal("no jobs")
	}
	pods := map[string]alibaba.PodRow{}
	for _, p := range in.Pods {
		pods[p.Name] = p
	}
	for _, j := range e.jobs {
		pod := pods[j.spec.ID]
		want := pod.DeletionTime - pod.CreationTime
		if run, ok := pod.TraceRunSeconds(); ok {
			want = run
		}
		if want = max(want, 1); j.declaredRun != want {
			t.Errorf("job %s declares %d s, want %d", j.spec.ID, j.declaredRun, want)
		}
	}
}
