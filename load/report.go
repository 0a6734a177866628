package load

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
)

// ConfigSummary is the part of Config a report repeats.
type ConfigSummary struct {
	Rate        float64 `json:"submit_rate_per_s"`
	Duration    string  `json:"duration"`
	GetRate     float64 `json:"get_rate_per_s"`
	WhyRate     float64 `json:"why_rate_per_s"`
	ListRate    float64 `json:"list_rate_per_s"`
	ReportRate  float64 `json:"report_rate_per_s"`
	CancelShare float64 `json:"cancel_share"`
	WaitShare   float64 `json:"wait_share"`
	RunSeconds  float64 `json:"run_seconds"`
	Pool        string  `json:"pool"`
	Projects    int     `json:"projects"`
	MaxGrowth   float64 `json:"max_growth_mib_per_min"`
	// MaxPerPendingKiB is Config.MaxPerPendingKiB, in KiB per pending job;
	// AfterDrain is Config.AfterDrain.
	MaxPerPendingKiB float64       `json:"max_per_pending_kib"`
	AfterDrain       time.Duration `json:"after_drain_ns"`
	MaxInFlight      int           `json:"max_in_flight"`
}

func (c Config) summary() ConfigSummary {
	return ConfigSummary{Rate: c.Rate, Duration: c.Duration.String(), GetRate: c.GetRate, WhyRate: c.WhyRate,
		ListRate: c.ListRate, ReportRate: c.ReportRate, CancelShare: c.CancelShare, WaitShare: c.WaitShare,
		RunSeconds: c.RunSeconds, Pool: c.Pool, Projects: c.Projects, MaxGrowth: c.MaxGrowth,
		MaxPerPendingKiB: c.MaxPerPendingKiB, AfterDrain: c.AfterDrain, MaxInFlight: c.MaxInFlight}
}

// Report is the outcome of a load run.
type Report struct {
	Config ConfigSummary `json:"config"`
	// Window is the load window; Sent the time until the last answer
	// (cancels scheduled near the end included); Drain the wait for the
	// jobs to settle; VerifyTime the final DescribeWorkflow pass.
	Window     time.Duration `json:"window_ns"`
	Sent       time.Duration `json:"sent_ns"`
	Drain      time.Duration `json:"drain_ns"`
	VerifyTime time.Duration `json:"verify_ns"`
	Kinds      []KindStats   `json:"kinds"`
	// Accepted is the number of submissions answered 201 or 202 (Deferred of
	// them 202: stored, workflow start left to the reconciler).
	Accepted int `json:"accepted"`
	Deferred int `json:"deferred_202"`
	// MissingRows are accepted job IDs without a jobs row; MissingWorkflows
	// those Temporal has no job/<id> workflow for; Unsettled those neither
	// final nor waiting with a reason after the drain; WorkflowMismatch those
	// whose workflow failed or disagrees with the row. Each must be empty.
	MissingRows []string `json:"missing_rows"`
	// BacklogLeft is the accepted jobs still pending at the end of the
	// drain other than those built to wait for good (0: the backlog
	// drained); they are settled (waiting with a reason), not a failure.
	BacklogLeft      int      `json:"backlog_left"`
	MissingWorkflows []string `json:"missing_workflows"`
	Unsettled        []string `json:"unsettled"`
	WorkflowMismatch []string `json:"workflow_mismatch"`
	// States counts the accepted jobs by state, Reasons the pending ones by
	// wait reason, Workflows their workflows by Temporal status.
	States    map[string]int `json:"states"`
	Reasons   map[string]int `json:"reasons"`
	Workflows map[string]int `json:"workflows"`
	// Memory is serve's memory over the run (drain included); Trend the
	// growth check over the window's second half.
	Memory []MemorySample `json:"memory"`
	Trend  Trend          `json:"trend"`
	// Pipeline is how the scheduler and the job workflows kept up.
	Pipeline PipelineSummary `json:"pipeline"`
	// LoadAvgStart and LoadAvgEnd are the machine's 1-minute load averages.
	LoadAvgStart float64 `json:"load_avg_start"`
	LoadAvgEnd   float64 `json:"load_avg_end"`
	// Failures says why Pass is false, one line each.
	Failures []string `json:"failures"`
	Pass     bool     `json:"pass"`
}

// Lost is the number of accepted jobs missing a row or a workflow.
func (r *Report) Lost() int { return len(r.MissingRows) + len(r.MissingWorkflows) }

// ServerErrors is the number of 5xx answers over every kind.
func (r *Report) ServerErrors() int {
	n := 0
	for _, k := range r.Kinds {
		n += k.ServerErr
	}
	return n
}

// decide fills Failures and Pass: nothing lost, unsettled or mismatched, no
// 5xx, no answer missing, no unexpected 4xx, and (when checkTrend) no memory
// growth beyond the bound.
func (r *Report) decide(checkTrend bool) {
	r.Failures = nil
	add := func(format string, args ...any) { r.Failures = append(r.Failures, fmt.Sprintf(format, args...)) }
	addLossFindings(add, r.MissingRows, r.MissingWorkflows, r.WorkflowMismatch)
	if n := len(r.Unsettled); n > 0 {
		add("%d accepted jobs are neither final nor waiting with a reason: %s", n, head(r.Unsettled))
	}
	for _, k := range r.Kinds {
		if k.ServerErr > 0 {
			add("%s: %d answers 5xx (%s)", k.Kind, k.ServerErr, strings.Join(k.Errors, "; "))
		}
		if k.NoAnswer > 0 {
			add("%s: %d requests got no answer (%s)", k.Kind, k.NoAnswer, strings.Join(k.Errors, "; "))
		}
		if k.ClientErr > 0 || k.TooMany > 0 {
			add("%s: %d answers 4xx, %d of them 429 (%s)", k.Kind, k.ClientErr+k.TooMany, k.TooMany, strings.Join(k.Errors, "; "))
		}
		if k.Kind != KindCancel && k.Conflict > 0 {
			add("%s: %d answers 409 (%s)", k.Kind, k.Conflict, strings.Join(k.Errors, "; "))
		}
		if k.Dropped > 0 {
			add("%s: %d requests not sent: %d in flight already (the generator's cap)", k.Kind, k.Dropped, r.Config.MaxInFlight)
		}
	}
	if r.Accepted == 0 {
		add("no submission was accepted")
	}
	if t := r.Trend; checkTrend && !t.OK {
		switch {
		case t.Mode == "backlog" && t.FitSamples == 0:
			add("the backlog grew %+.0f jobs/min and memory %+.2f MiB/min (RSS), but no drain was sampled to tell growth per pending job from a leak",
				t.BacklogPerMin, t.RSSSlopeMiBPerMin)
		case t.Mode == "backlog":
			add("memory beyond what the backlog explains: %+.2f MiB/min of RSS and %+.2f of live heap (bound %.1f), "+
				"%.1f KiB of RSS and %.1f of live heap per pending job (bound %.1f)",
				t.RSSUnexplainedMiBPerMin, t.HeapUnexplainedMiBPerMin, t.MaxSlopeMiBPerMin, t.RSSPerPendingKiB, t.HeapPerPendingKiB, t.MaxPerPendingKiB)
		default:
			add("memory grows over the window's second half: RSS %+.2f MiB/min, live heap %+.2f MiB/min (bound %.1f)",
				t.RSSSlopeMiBPerMin, t.HeapSlopeMiBPerMin, t.MaxSlopeMiBPerMin)
		}
	}
	r.Pass = len(r.Failures) == 0
}

// addLossFindings adds the final check's findings shared by the sustained
// and the burst reports: accepted jobs without a row or a workflow, and
// workflows that failed or disagree with their job.
func addLossFindings(add func(format string, args ...any), missingRows, missingWorkflows, mismatch []string) {
	if n := len(missingRows); n > 0 {
		add("%d accepted jobs have no row: %s", n, head(missingRows))
	}
	if n := len(missingWorkflows); n > 0 {
		add("%d accepted jobs have no workflow: %s", n, head(missingWorkflows))
	}
	if n := len(mismatch); n > 0 {
		add("%d workflows failed or disagree with their job: %s", n, head(mismatch))
	}
}

// head lists the first three items and how many more.
func head(items []string) string {
	if len(items) <= 3 {
		return strings.Join(items, ", ")
	}
	return fmt.Sprintf("%s, … (%d more)", strings.Join(items[:3], ", "), len(items)-3)
}

// Render writes the report as text: the mix, a table per kind, the
// settlement check, memory over time (one line per minute) and the trend, and
// the verdict.
func (r *Report) Render(w io.Writer) error {
	var b strings.Builder
	c := r.Config
	fmt.Fprintf(&b, "gpugov load: %g submissions/s for %s (open loop), plus get %g/s, why %g/s, list %g/s, report %g/s; "+
		"cancel %.0f%% of accepted jobs; %.0f%% built to wait (held, unknown model, prerequisite); run_seconds %g; pool %s, %d projects\n",
		c.Rate, c.Duration, c.GetRate, c.WhyRate, c.ListRate, c.ReportRate, 100*c.CancelShare, 100*c.WaitShare, c.RunSeconds, c.Pool, c.Projects)
	fmt.Fprintf(&b, "machine load average (1 min): %.2f at the start, %.2f at the end\n\n", r.LoadAvgStart, r.LoadAvgEnd)

	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "kind\tsent\trate/s\t2xx\t409\t4xx\t429\t5xx\tno answer\tdropped\tp50 ms\tp99 ms\tmax ms\tlate p99 ms\t")
	for _, k := range r.Kinds {
		fmt.Fprintf(tw, "%s\t%d\t%.2f\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%.1f\t%.1f\t%.1f\t%.1f\t\n", k.Kind, k.Sent, k.RatePerSec,
			k.OK, k.Conflict, k.ClientErr, k.TooMany, k.ServerErr, k.NoAnswer, k.Dropped, k.P50ms, k.P99ms, k.Maxms, k.LateP99ms)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(&b, "latency runs from each request's scheduled time (queueing included); late = how far behind schedule it was sent\n\n")

	fmt.Fprintf(&b, "accepted %d (%d of them 202), settled after a drain of %s; checked in %s:\n",
		r.Accepted, r.Deferred, r.Drain.Round(time.Second), r.VerifyTime.Round(time.Second))
	if r.BacklogLeft > 0 {
		fmt.Fprintf(&b, "  the backlog had not drained at the bound: %d jobs still waiting with their reasons (not counting those built to wait)\n", r.BacklogLeft)
	}
	fmt.Fprintf(&b, "  lost: %d (no row %d, no workflow %d); unsettled %d; workflow mismatches %d\n",
		r.Lost(), len(r.MissingRows), len(r.MissingWorkflows), len(r.Unsettled), len(r.WorkflowMismatch))
	fmt.Fprintf(&b, "  job states: %s\n", counts(r.States))
	fmt.Fprintf(&b, "  wait reasons of the pending: %s\n", counts(r.Reasons))
	fmt.Fprintf(&b, "  workflows: %s\n\n", counts(r.Workflows))

	fmt.Fprintf(&b, "serve's memory (a sample per minute; %d samples in all):\n", len(r.Memory))
	tw = tabwriter.NewWriter(&b, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "at\trss MiB\theap live MiB\theap in use MiB\tgoroutines\tload1\t")
	next := time.Duration(0)
	for i, s := range r.Memory {
		if s.At >= next || i == len(r.Memory)-1 {
			fmt.Fprintf(tw, "%s\t%.1f\t%.1f\t%.1f\t%d\t%.2f\t\n", s.At.Round(time.Second), mib(float64(s.RSSBytes)),
				mib(float64(s.HeapLiveBytes)), mib(float64(s.HeapInuseBytes)), s.Goroutines, s.Load1)
			next = s.At.Truncate(time.Minute) + time.Minute
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	t := r.Trend
	fmt.Fprintf(&b, "trend over the window's second half (%d samples, least squares): RSS %+.2f MiB/min, live heap %+.2f MiB/min, bound %.1f MiB/min",
		t.Samples, t.RSSSlopeMiBPerMin, t.HeapSlopeMiBPerMin, t.MaxSlopeMiBPerMin)
	if t.SecondMinuteRSSMiB > 0 {
		fmt.Fprintf(&b, "; median RSS %.1f MiB in the second minute, %.1f MiB in the last", t.SecondMinuteRSSMiB, t.LastMinuteRSSMiB)
	}
	verdict := map[bool]string{true: "no growth trend", false: "GROWING"}[t.OK]
	if t.Mode == "backlog" {
		fmt.Fprintf(&b, ";\n  the backlog grew %+.0f jobs/min (peak %d pending), so memory is fitted against backlog and time over %d samples "+
			"(the window's second half, the drain and up to %s after it): %.1f KiB of RSS and %.1f KiB of live heap per pending job (bound %.1f), "+
			"%+.2f MiB/min of RSS and %+.2f MiB/min of live heap the backlog does not explain (bound %.1f);\n"+
			"  live heap %.1f MiB in the second minute",
			t.BacklogPerMin, t.PeakPending, t.FitSamples, c.AfterDrain, t.RSSPerPendingKiB, t.HeapPerPendingKiB, t.MaxPerPendingKiB,
			t.RSSUnexplainedMiBPerMin, t.HeapUnexplainedMiBPerMin, t.MaxSlopeMiBPerMin, t.SecondMinuteHeapMiB)
		if t.AfterDrainHeapMiB > 0 {
			fmt.Fprintf(&b, ", %.1f MiB after the drain with %d jobs pending", t.AfterDrainHeapMiB, t.AfterDrainPending)
		} else {
			fmt.Fprintf(&b, ", none sampled after the drain (the backlog had not drained)")
		}
		if t.OK {
			verdict = "memory follows the backlog within its bound and no growth trend beyond it"
		}
	}
	fmt.Fprintf(&b, ": %s\n", verdict)
	p := r.Pipeline
	fmt.Fprintf(&b, "job pipeline over the window's second half (%d samples, least squares): %.1f jobs finished/s against %.1f accepted/s; "+
		"backlog (submitted or waiting) %+.0f/min, holding an allocation (placed or running) %+.0f/min; %d scheduling cycles in the window, %.0f ms each on average\n\n",
		p.Samples, p.FinishedPerSecond, c.Rate, p.PendingPerMinute, p.HoldingPerMinute, p.Cycles, p.MeanCycleMillis)

	if r.Pass {
		fmt.Fprintf(&b, "PASS: nothing lost, no 5xx\n")
	} else {
		fmt.Fprintf(&b, "FAIL:\n")
		for _, f := range r.Failures {
			fmt.Fprintf(&b, "  - %s\n", f)
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// counts renders a count map as "a 3, b 1" in key order ("none" when empty).
func counts(m map[string]int) string {
	if len(m) == 0 {
		return "none"
	}
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		name := k
		if name == "" {
			name = "(none)"
		}
		parts = append(parts, fmt.Sprintf("%s %d", name, m[k]))
	}
	return strings.Join(parts, ", ")
}
