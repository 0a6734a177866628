package main

import (
	"bytes"
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"reflect"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"gopkg.in/yaml.v3"

	"github.com/gpugov/gpugov/internal/experiment"
	"github.com/gpugov/gpugov/internal/policy"
	"github.com/gpugov/gpugov/internal/queuereport"
	"github.com/gpugov/gpugov/internal/simulation"
	"github.com/gpugov/gpugov/internal/vocab"
)

// WholeWindowNote is what the what-if says about its rollback conditions.
const WholeWindowNote = "rollback conditions are evaluated once, on the whole window: a finished simulation's " +
	"records hold the future, so a check at an instant during the window would read it (a live experiment checks " +
	"them periodically on the window so far)"

// defaultWhatIfSpec is the experiment a what-if judges without --experiment:
// the experiment tier's longest wait decreases by at least 30 %, rolled
// back when production's P95 wait exceeds 1.2 × the baseline's or the
// experiment tier still has starving jobs. pool is the simulated pool.
func defaultWhatIfSpec(pool string) *experiment.Spec {
	return &experiment.Spec{
		Name:       "what-if",
		Hypothesis: "the candidate shortens the experiment tier's longest wait by at least 30 % without hurting production",
		Scope:      experiment.Scope{Pools: []string{pool}},
		Expected: experiment.Expectation{Metric: "longest_wait_s", Target: experiment.Target{Tier: vocab.TierExperiment.String()},
			Direction: experiment.Decrease, Change: 0.30},
		Rollback: []experiment.Condition{
			{Name: "production wait_p95_s above 1.2 × baseline", Metric: "wait_p95_s",
				Target: experiment.Target{Tier: vocab.TierProduction.String()}, AboveBaselineFactor: floatp(1.2)},
			{Name: "experiment tier still starving", Metric: "starving_jobs",
				Target: experiment.Target{Tier: vocab.TierExperiment.String()}, Above: floatp(0)},
		},
	}
}

// CancelRateNote tells the comparison's two cancellation metrics apart.
const CancelRateNote = "cancel_rate (governance: jobs cancelled ÷ jobs submitted in the window, running or waiting) " +
	"is not cancellation_rate (queue report: waits ended by a cancellation ÷ waits ended)"

// DefaultWhatIfSpecText describes defaultWhatIfSpec in the output.
const DefaultWhatIfSpecText = "default spec (no --experiment): expected experiment longest_wait_s decrease ≥ 30 %; " +
	"rollback when production wait_p95_s > 1.2 × baseline or experiment starving_jobs > 0"

func floatp(v float64) *float64 { return &v }

// whatIfRun is one of the two simulations of a what-if.
type whatIfRun struct {
	Label  string             `json:"label"`  // the policy file (or "(default policy)")
	Policy string             `json:"policy"` // its hash
	Report *simulation.Report `json:"report"`
}

// whatIfInput is what the what-if says of the input both runs read.
type whatIfInput struct {
	Nodes       string `json:"nodes"`
	Pods        string `json:"pods"`
	NodeRows    int    `json:"node_rows"`
	PodRows     int    `json:"pod_rows"`
	GPUJobs     int    `json:"gpu_jobs"`
	Digest      string `json:"digest"`      // SHA-256 of the node and pod rows, as read
	JobsDigest  string `json:"jobs_digest"` // SHA-256 of the jobs in each run's records (equal in both)
	SameInInput bool   `json:"same_in_both_runs"`
}

// whatIfOutput is the JSON form of a what-if.
type whatIfOutput struct {
	Input       whatIfInput         `json:"input"`
	Baseline    whatIfRun           `json:"baseline"`
	Candidate   whatIfRun           `json:"candidate"`
	Groups      []vocab.PolicyGroup `json:"variable_groups"`
	Warnings    []string            `json:"warnings"`
	Spec        *experiment.Spec    `json:"spec"`
	DefaultSpec bool                `json:"default_spec"`
	Window      queuereport.Window  `json:"window"`
	// TraceWindow is Window in trace time: seconds from the trace's origin
	// (Window's times are those seconds read as Unix times, not dates).
	TraceWindow traceWindow               `json:"trace_window"`
	Measured    [2]experiment.Measurement `json:"measurements"` // baseline, candidate
	Outcome     experiment.Outcome        `json:"outcome"`
	Notes       []string                  `json:"notes"`
}

// traceWindow is a what-if's window in trace time: FromS and ToS are
// seconds from the trace's origin (its second 0). For a trace exported from
// the store (--from-store), second 0 is --since, and Dates holds the window
// as the service's times.
type traceWindow struct {
	FromS float64             `json:"from_s"`
	ToS   float64             `json:"to_s"`
	Dates *queuereport.Window `json:"dates,omitempty"`
}

// newTraceWindow converts w (trace seconds read as Unix times, as the
// simulator's clock runs) to trace time; origin, when not zero, is the
// service time of trace second 0 (an export's --since).
func newTraceWindow(w queuereport.Window, origin time.Time) traceWindow {
	tw := traceWindow{FromS: unixSeconds(w.From), ToS: unixSeconds(w.To)}
	if !origin.IsZero() {
		tw.Dates = &queuereport.Window{From: origin.Add(w.From.Sub(time.Unix(0, 0))).UTC(), To: origin.Add(w.To.Sub(time.Unix(0, 0))).UTC()}
	}
	return tw
}

// unixSeconds is t's seconds since the Unix epoch, fractions included.
func unixSeconds(t time.Time) float64 { return float64(t.UnixNano()) / 1e9 }

// text renders the window for the notes, to the millisecond, e.g. "trace
// time t=12772873 s (day 147.8) to t=12844110 s (day 148.7), seconds from
// the trace's origin", with the service's dates after it for an export.
func (tw traceWindow) text() string {
	at := func(s float64) string {
		return fmt.Sprintf("t=%s s (day %.1f)", strconv.FormatFloat(math.Round(s*1000)/1000, 'f', -1, 64), s/86400)
	}
	out := "trace time " + at(tw.FromS) + " to " + at(tw.ToS) + ", seconds from the trace's origin"
	if tw.Dates != nil {
		out += fmt.Sprintf(" (--since is t=0: %s to %s)", tw.Dates.From.Format(time.RFC3339), tw.Dates.To.Format(time.RFC3339))
	}
	return out
}

// runWhatIf is `simulate --vs` with base (named baseLabel in the output)
// as the baseline: the candidate and the spec are loaded and
// checked first (usage errors, exit 2, before any simulation), then the
// trace is simulated under both policies and judged with the experiment
// package's Measure, Check and Decide.
func runWhatIf(cmd *cobra.Command, f simulateFlags, base *policy.Policy, baseLabel string, in simulation.Input, src traceSource) error {
	spec, cand, candLabel, err := loadWhatIf(f)
	if err != nil {
		return err
	}
	var warnings []string
	// The candidate runs on the baseline's trace assumptions.
	if !reflect.DeepEqual(cand.Simulation, base.Simulation) {
		warnings = append(warnings, fmt.Sprintf("the candidate's simulation section differs from the baseline's; both runs use the baseline's (%s), so that they simulate the same input",
			baseLabel))
	}
	cand.Simulation = base.Simulation
	cfgA, err := simConfig(cmd, f, base, baseLabel)
	if err != nil {
		return err
	}
	cfgB, err := simConfig(cmd, f, cand, candLabel)
	if err != nil {
		return err
	}
	defaulted := spec == nil
	if defaulted {
		spec = defaultWhatIfSpec(cfgA.PoolName)
		spec.Candidate.Policy = "(" + candLabel + ")"
		spec.WindowSeconds = float64(cfgA.CycleIntervalSeconds)
		if fe := spec.Validate(time.Duration(cfgA.CycleIntervalSeconds) * time.Second); len(fe) > 0 {
			return fmt.Errorf("simulate: the default experiment spec is invalid: %v", fe) // a bug, not the user's input
		}
	}
	if !slices.Equal(spec.Scope.Pools, []string{cfgA.PoolName}) {
		warnings = append(warnings, fmt.Sprintf("scope.pools %v: the simulation has one pool, %q; it is measured instead",
			spec.Scope.Pools, cfgA.PoolName))
		spec.Scope.Pools = []string{cfgA.PoolName}
	}
	groups, ferr := experiment.CheckOneVariable(spec, base, cand)
	if ferr != nil {
		warnings = append(warnings, "one-variable rule: "+ferr.Message+" (a live experiment would refuse this candidate; a what-if only warns)")
	}

	defer debug.SetGCPercent(debug.SetGCPercent(simulation.BatchGCPercent))
	progress := cmd.ErrOrStderr()
	digest := traceDigest(in)
	fmt.Fprintf(progress, "simulate: input %d nodes, %d pods, digest %s; baseline run (%s)\n", len(in.Nodes), len(in.Pods), digest, baseLabel)
	repA, err := simulation.Run(in, cfgA, progress)
	if err != nil {
		return fmt.Errorf("simulate: baseline %s: %w", baseLabel, err)
	}
	if d := traceDigest(in); d != digest {
		return fmt.Errorf("simulate: the baseline run changed its input (digest %s, then %s)", digest, d)
	}
	fmt.Fprintf(progress, "simulate: candidate run (%s) on the same input\n", candLabel)
	repB, err := simulation.Run(in, cfgB, progress)
	if err != nil {
		return fmt.Errorf("simulate: candidate %s: %w", candLabel, err)
	}
	input, err := sameInput(in, src, digest, repA, repB)
	if err != nil {
		return err
	}

	w := simulation.CoveringWindow(repA, repB)
	if defaulted {
		spec.WindowSeconds = w.To.Sub(w.From).Seconds()
	}
	var ms [2]experiment.Measurement
	for i, r := range []*simulation.Report{repA, repB} {
		if ms[i], err = experiment.Measure(r.History.Records, spec.Scope, w, w.To, r.Governance(w, spec.Scope)); err != nil {
			return fmt.Errorf("simulate: measure the %s run: %w", []string{"baseline", "candidate"}[i], err)
		}
	}
	var breaches []experiment.ConditionResult
	for _, c := range experiment.Check(spec, &ms[0], &ms[1]) {
		if c.Breached {
			breaches = append(breaches, c)
		}
	}
	out := whatIfOutput{
		Input:    input,
		Baseline: whatIfRun{Label: baseLabel, Policy: base.Hash(), Report: repA}, Candidate: whatIfRun{Label: candLabel, Policy: cand.Hash(), Report: repB},
		Groups: groups, Warnings: warnings, Spec: spec, DefaultSpec: defaulted, Window: w, TraceWindow: newTraceWindow(w, src.origin), Measured: ms,
		Outcome: experiment.Decide(spec, &ms[0], &ms[1], breaches),
		Notes: []string{
			"both runs are measured over the same window, the whole simulated span of either run, " + newTraceWindow(w, src.origin).text() +
				", with the live experiment's code (internal/experiment); each run's summary above is that measurement",
			WholeWindowNote,
			"governance metrics measured by the simulator: " + strings.Join(simulation.GovernanceMeasured, ", ") +
				"; the others (resumes, reclaims, start failures, GPU release time) are not modelled",
			CancelRateNote,
			"the spec's start, window_s, baseline and check_interval_s apply to live experiments only",
		},
	}
	if out.Groups == nil {
		out.Groups = []vocab.PolicyGroup{}
	}
	if out.Warnings == nil {
		out.Warnings = []string{}
	}
	if defaulted {
		out.Notes = append(out.Notes, DefaultWhatIfSpecText)
	}
	if f.format == "json" {
		enc := json.NewEncoder(cmd.OutOrStdout())
		enc.SetIndent("", "  ")
		return enc.Encode(out)
	}
	return writeWhatIfText(cmd.OutOrStdout(), &out)
}

// loadWhatIf reads the experiment spec (nil without --experiment) and the
// candidate policy: --vs, else the spec's candidate.file. Every problem is
// a usage error naming the file (and the field or line).
func loadWhatIf(f simulateFlags) (spec *experiment.Spec, cand *policy.Policy, label string, err error) {
	if f.experiment != "" {
		if spec, err = loadWhatIfSpec(f.experiment, f.vs); err != nil {
			return nil, nil, "", err
		}
	}
	if f.vs != "" {
		if cand, err = policy.Load(f.vs); err != nil {
			return nil, nil, "", newUsageError("%w", err)
		}
		if spec != nil {
			spec.Candidate = experiment.Candidate{Policy: "(" + f.vs + ")"}
		}
		return spec, cand, f.vs, nil
	}
	label = "the candidate of " + f.experiment
	switch {
	case spec.Candidate.Hash != "":
		return nil, nil, "", newUsageError("simulate: %s: candidate.hash: a what-if needs the candidate's policy file: pass --vs FILE or set candidate.file", f.experiment)
	case spec.Candidate.Policy == "":
		return nil, nil, "", newUsageError("simulate: %s: candidate: pass --vs FILE or set candidate.file", f.experiment)
	}
	if cand, err = policy.Parse(label, []byte(spec.Candidate.Policy)); err != nil {
		return nil, nil, "", newUsageError("%w", err)
	}
	spec.Candidate.Policy = "(" + label + ")"
	return spec, cand, label, nil
}

// loadWhatIfSpec reads the spec file with experiment.ParseSpecFile. With
// --vs (vs non-empty) the spec must not name a candidate: the what-if adds
// the candidate's text to the spec it validates, after the file's last
// line, so that every problem keeps its line.
func loadWhatIfSpec(path, vs string) (*experiment.Spec, error) {
	if vs == "" {
		s, err := experiment.ParseSpecFile(path)
		if err != nil {
			return nil, newUsageError("%w", err)
		}
		return s, nil
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, newUsageError("experiment spec: %w", err)
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err == nil && len(doc.Content) == 1 {
		if root := doc.Content[0]; root.Kind == yaml.MappingNode {
			for i := 0; i+1 < len(root.Content); i += 2 {
				if k := root.Content[i]; k.Value == "candidate" {
					return nil, newUsageError("%s:%d: candidate: set here and by --vs %s: give the candidate once", path, k.Line, vs)
				}
			}
			if root.Style&yaml.FlowStyle != 0 {
				return nil, newUsageError("%s: with --vs, write the spec as a block mapping (one field a line), not a flow mapping {…}", path)
			}
		}
	}
	body, err := os.ReadFile(vs)
	if err != nil {
		return nil, newUsageError("policy file: %w", err)
	}
	extra, err := yaml.Marshal(map[string]any{"candidate": map[string]string{"policy": string(body)}})
	if err != nil {
		return nil, err
	}
	if len(data) > 0 && data[len(data)-1] != '\n' {
		data = append(data, '\n')
	}
	s, err := experiment.ParseSpec(path, append(data, extra...))
	if err != nil {
		return nil, newUsageError("%w", err)
	}
	return s, nil
}

// sameInput checks that both runs read the input whose digest was taken
// before the first: the input is unchanged, both reports count its pods and
// GPU jobs, and the jobs in both runs' records are the same (IDs, queues,
// tiers, pools, projects, submit times and requests). A mismatch is an
// error of the simulator, not of the input.
func sameInput(in simulation.Input, src traceSource, digest string, a, b *simulation.Report) (whatIfInput, error) {
	out := whatIfInput{Nodes: src.nodes, Pods: src.pods, NodeRows: len(in.Nodes), PodRows: len(in.Pods), GPUJobs: a.GPUJobs, Digest: digest}
	if d := traceDigest(in); d != digest {
		return out, fmt.Errorf("simulate: the input changed between the runs (digest %s, then %s)", digest, d)
	}
	if a.Pods != len(in.Pods) || b.Pods != len(in.Pods) || a.GPUJobs != b.GPUJobs {
		return out, fmt.Errorf("simulate: the runs read different inputs: %d and %d pods (%d in the trace), %d and %d GPU jobs",
			a.Pods, b.Pods, len(in.Pods), a.GPUJobs, b.GPUJobs)
	}
	ja, jb := jobsDigest(a), jobsDigest(b)
	if ja != jb {
		return out, fmt.Errorf("simulate: the runs' records hold different jobs (digest %s and %s)", ja, jb)
	}
	out.JobsDigest, out.SameInInput = ja, true
	return out, nil
}

// traceDigest is the SHA-256 of the input's node and pod rows (every column
// as read, lines aside), in order: "sha256:" and 64 hex digits.
func traceDigest(in simulation.Input) string {
	h := sha256.New()
	for _, n := range in.Nodes {
		fmt.Fprintf(h, "n\x1f%s\x1f%d\x1f%d\x1f%d\x1f%s\n", n.SN, n.CPUMilli, n.MemoryMiB, n.GPUs, n.Model)
	}
	for _, p := range in.Pods {
		fmt.Fprintf(h, "p\x1f%s\x1f%d\x1f%d\x1f%d\x1f%d\x1f%s\x1f%s\x1f%s\x1f%d\x1f%d\x1f%d\x1f%t\n", p.Name, p.CPUMilli, p.MemoryMiB,
			p.NumGPU, p.GPUMilli, strings.Join(p.GPUSpec, "|"), p.QoS, p.Phase, p.CreationTime, p.DeletionTime, p.ScheduledTime, p.Scheduled)
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil))
}

// jobsDigest is the SHA-256 of the jobs of a run's records (what the run
// made of the pods): ID, queue, tier, pool, project, submit time and request.
func jobsDigest(r *simulation.Report) string {
	h := sha256.New()
	for _, j := range r.History.Records.Jobs {
		fmt.Fprintf(h, "%s\x1f%s\x1f%s\x1f%s\x1f%s\x1f%d\x1f%d\x1f%d\x1f%s\n", j.ID, j.Queue, j.Tier, j.Pool, j.Project,
			j.SubmitTime.UnixNano(), j.Request.GPUs, j.Request.GPUMilli, strings.Join(j.Request.Models, "|"))
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil))
}

// writeWhatIfText writes the what-if as the CLI prints it: the input check,
// the variable groups and warnings, each run's summary, then the outcome as
// experiment.Outcome.WriteText writes it (the live experiment's text).
func writeWhatIfText(w io.Writer, o *whatIfOutput) error {
	var b bytes.Buffer
	fmt.Fprintf(&b, "what-if: baseline %s (policy %s) vs candidate %s (policy %s)\n", o.Baseline.Label, short(o.Baseline.Policy),
		o.Candidate.Label, short(o.Candidate.Policy))
	fmt.Fprintf(&b, "input: %s (%d nodes), %s (%d pods, %d GPU jobs), read once: digest %s\n", o.Input.Nodes, o.Input.NodeRows,
		o.Input.Pods, o.Input.PodRows, o.Input.GPUJobs, o.Input.Digest)
	fmt.Fprintf(&b, "both runs read the same input: %d pods each, jobs digest %s in both runs' records\n", o.Input.PodRows, o.Input.JobsDigest)
	groups := make([]string, len(o.Groups))
	for i, g := range o.Groups {
		groups[i] = string(g)
	}
	fmt.Fprintf(&b, "variable groups the candidate changes: %s\n", cmp.Or(strings.Join(groups, ", "), "none"))
	for _, warn := range o.Warnings {
		fmt.Fprintf(&b, "warning: %s\n", warn)
	}
	for i, run := range []struct {
		name string
		r    whatIfRun
	}{{"baseline", o.Baseline}, {"candidate", o.Candidate}} {
		fmt.Fprintf(&b, "\n%s run (%s):\n", run.name, run.r.Label)
		if err := writeRunSummary(&b, &o.Measured[i], o.Spec.Scope.Queues, run.r.Report); err != nil {
			return err
		}
	}
	fmt.Fprintf(&b, "\nexperiment %q: %s\n", o.Spec.Name, o.Spec.Hypothesis)
	for _, n := range o.Notes {
		fmt.Fprintf(&b, "note: %s\n", n)
	}
	fmt.Fprintln(&b)
	if _, err := w.Write(b.Bytes()); err != nil {
		return err
	}
	return o.Outcome.WriteText(w)
}

// summaryMetrics are the queue report metrics a run's summary shows per
// tier: the comparison's core metrics (experiment.CoreMetrics) but the
// service share.
var summaryMetrics = []string{"jobs", "started", "wait_p50_s", "wait_p95_s", "longest_wait_s",
	"jobs_over_objective", "starving_jobs", "cancellation_rate"}

// writeRunSummary writes a short form of one run: its measurement m (the
// one the comparison reads: the queue report's definitions over the
// what-if's window, and the governance metrics), the scope's total and
// each tier of m (those of the watched queues, when the spec names any),
// rendered as the comparison renders them; then, labelled as the
// simulator's, what only the simulator's report r has.
func writeRunSummary(w io.Writer, m *experiment.Measurement, watched []string, r *simulation.Report) error {
	val := func(metric string, t experiment.Target) string {
		v, _, err := m.Value(metric, t)
		if err != nil {
			return "?"
		}
		return experiment.FormatValue(v)
	}
	total := experiment.Target{}
	tiers := "by tier"
	if len(watched) > 0 {
		tiers = "the tiers of the watched queues " + strings.Join(watched, ", ")
	}
	fmt.Fprintf(w, "  as compared below (the queue report's definitions, the window in the notes): total %s jobs, %s started, wait_p95_s %s s, longest_wait_s %s s, jobs_over_objective %s, starving_jobs %s; preemptions %s (effective_run_loss_gpu_s %s, recompute_gpu_s %s); %s:\n",
		val("jobs", total), val("started", total), val("wait_p95_s", total), val("longest_wait_s", total),
		val("jobs_over_objective", total), val("starving_jobs", total),
		val("preemptions", total), val("effective_run_loss_gpu_s", total), val("recompute_gpu_s", total), tiers)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "  tier\t%s\t\n", strings.Join(summaryMetrics, "\t"))
	for _, g := range m.ByTier {
		t := experiment.Target{Tier: g.Key[queuereport.KeyTier]}
		cells := make([]string, len(summaryMetrics))
		for i, metric := range summaryMetrics {
			cells[i] = val(metric, t)
		}
		fmt.Fprintf(tw, "  %s\t%s\t\n", t.Tier, strings.Join(cells, "\t"))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err := fmt.Fprintf(w, "  simulator only (its own report, not compared): %d scheduling cycles, GPU utilization %.1f%%, would preempt %d, unfinished %d at the end\n",
		r.Cycles, 100*r.GPUUtilization, r.Preemptions.WouldPreempt, r.Unfinished.Count)
	return err
}

// short abbreviates a policy hash to 12 digits.
func short(hash string) string { return hash[:min(12, len(hash))] }
