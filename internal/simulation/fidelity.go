package simulation

import (
	"cmp"
	"fmt"
	"io"
	"slices"
	"text/tabwriter"

	"github.com/gpugov/gpugov/internal/trace"
)

// Fidelity sets the simulated first waits (first start − submit) of the jobs
// whose start the trace recorded beside the recorded waits, for all of them,
// per GPU bucket and per project (the trace's own tenants: Philly's virtual
// clusters), and the simulation's waits of all GPU jobs beside the figures
// published for the traced cluster. Percentiles are nearest-rank
// (queuereport.NearestRank), as in the rest of the report. It is filled only
// for traces that name their projects (trace.Trace.OwnProjects).
type Fidelity struct {
	Rows      []FidelityRow   `json:"rows"`
	Published []PublishedWait `json:"published"`
}

// FidelityRow is one group of jobs with a recorded start: Group names it
// ("all", "gpus 2-4", "vc 6214e9"; "vc ?" for recorded jobs of no known
// project). Recorded covers every recorded start of the group, Simulated
// those of them the reader matched to a job row that started in the
// simulation; NotStarted counts matched jobs still waiting at its end.
// P50Ratio and P90Ratio are simulated ÷ recorded (nil when either is
// missing or the recorded value is 0); Within2x is whether both lie in
// [0.5, 2].
type FidelityRow struct {
	Group      string    `json:"group"`
	Recorded   WaitStats `json:"recorded"`
	Simulated  WaitStats `json:"simulated"`
	NotStarted int       `json:"not_started"`
	P50Ratio   *float64  `json:"p50_ratio"`
	P90Ratio   *float64  `json:"p90_ratio"`
	Within2x   bool      `json:"within_2x"`
}

// WaitStats summarises waits in seconds: count, mean and nearest-rank
// percentiles (nil for no waits).
type WaitStats struct {
	N     int      `json:"n"`
	MeanS *float64 `json:"mean_s"`
	P50S  *int64   `json:"p50_s"`
	P90S  *int64   `json:"p90_s"`
	P99S  *int64   `json:"p99_s"`
	MaxS  *int64   `json:"max_s"`
}

// PublishedWait is a published figure (trace.Published) beside the
// simulation's first waits of all the trace's GPU jobs that started.
type PublishedWait struct {
	trace.Published
	Simulated WaitStats `json:"simulated"`
}

// StatsOf returns the WaitStats of waits (seconds, any order; not changed).
func StatsOf(waits []int64) WaitStats {
	s := WaitStats{N: len(waits)}
	if len(waits) == 0 {
		return s
	}
	sorted := slices.Clone(waits)
	slices.Sort(sorted)
	var sum float64
	for _, w := range sorted {
		sum += float64(w)
	}
	mean := sum / float64(len(sorted))
	s.MeanS = &mean
	s.P50S, s.P90S, s.P99S, s.MaxS = tracePercentile(sorted, 50), tracePercentile(sorted, 90), tracePercentile(sorted, 99), tracePercentile(sorted, 100)
	return s
}

// Bucket names the GPU bucket of a job of n GPUs, the ATC '19 Philly
// paper's: "1", "2-4", "5-8" or ">8".
func Bucket(n int) string {
	switch {
	case n <= 1:
		return "1"
	case n <= 4:
		return "2-4"
	case n <= 8:
		return "5-8"
	}
	return ">8"
}

// Buckets lists the GPU buckets in order.
var Buckets = []string{"1", "2-4", "5-8", ">8"}

// fidelity builds the Fidelity of the finished engine, nil for a trace
// without its own projects or without recorded starts.
func (e *engine) fidelity() *Fidelity {
	if !e.trace.OwnProjects {
		return nil
	}
	type acc struct {
		rec, sim   []int64
		notStarted int
	}
	groups := map[string]*acc{}
	add := func(rec int64, project string, gpus int, sim int64, matched bool) {
		vc := project
		if vc == "" {
			vc = "?"
		}
		for _, g := range []string{"all", "gpus " + Bucket(gpus), "vc " + vc} {
			a := groups[g]
			if a == nil {
				a = &acc{}
				groups[g] = a
			}
			a.rec = append(a.rec, rec)
			switch {
			case !matched:
			case sim >= 0:
				a.sim = append(a.sim, sim)
			default:
				a.notStarted++
			}
		}
	}
	var all []int64
	for _, j := range e.jobs {
		wait := int64(-1)
		if j.firstStart >= 0 {
			wait = j.firstStart - j.tj.Submit
			all = append(all, wait)
		}
		if j.tj.HasRecordedWait {
			add(j.tj.RecordedWait, j.spec.Project, traceGPUs(j), wait, true)
		}
	}
	for _, r := range e.trace.RecordedElsewhere {
		add(r.WaitS, r.Project, r.GPUs, -1, false)
	}
	if len(groups) == 0 {
		return nil
	}
	f := &Fidelity{Rows: []FidelityRow{}, Published: []PublishedWait{}}
	order := []string{"all"}
	for _, b := range Buckets {
		order = append(order, "gpus "+b)
	}
	var vcs []string
	for g := range groups {
		if len(g) > 3 && g[:3] == "vc " {
			vcs = append(vcs, g)
		}
	}
	// Projects by recorded jobs, most first (then name), as the trace's README lists them.
	slices.SortFunc(vcs, func(a, b string) int {
		return cmp.Or(cmp.Compare(len(groups[b].rec), len(groups[a].rec)), cmp.Compare(a, b))
	})
	for _, g := range append(order, vcs...) {
		a := groups[g]
		if a == nil {
			continue
		}
		row := FidelityRow{Group: g, Recorded: StatsOf(a.rec), Simulated: StatsOf(a.sim), NotStarted: a.notStarted}
		row.P50Ratio = ratio(row.Simulated.P50S, row.Recorded.P50S)
		row.P90Ratio = ratio(row.Simulated.P90S, row.Recorded.P90S)
		row.Within2x = within2(row.P50Ratio) && within2(row.P90Ratio)
		f.Rows = append(f.Rows, row)
	}
	for _, p := range e.trace.Published {
		f.Published = append(f.Published, PublishedWait{Published: p, Simulated: StatsOf(all)})
	}
	return f
}

// traceGPUs is the GPUs the trace records for the job (the request may be
// rounded up to whole nodes).
func traceGPUs(j *simJob) int { return j.tj.GPUs }

func ratio(sim, rec *int64) *float64 {
	if sim == nil || rec == nil || *rec == 0 {
		return nil
	}
	r := float64(*sim) / float64(*rec)
	return &r
}

func within2(r *float64) bool { return r != nil && *r >= 0.5 && *r <= 2 }

// writeFidelity writes the fidelity table of r, when it has one.
func (r *Report) writeFidelity(w io.Writer) {
	f := r.Fidelity
	if f == nil {
		return
	}
	fmt.Fprintln(w, "\nfidelity to the recorded waits (first start − submit, seconds; recorded: every job with a recorded start; sim: the same jobs in this simulation):")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "group\trec_n\trec_mean\trec_p50\trec_p90\tsim_n\tsim_mean\tsim_p50\tsim_p90\tnot_started\tp50_ratio\tp90_ratio\twithin_2x\t")
	for _, row := range f.Rows {
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%d\t%s\t%s\t%s\t%d\t%s\t%s\t%v\t\n", row.Group,
			row.Recorded.N, meanText(row.Recorded.MeanS), optInt(row.Recorded.P50S), optInt(row.Recorded.P90S),
			row.Simulated.N, meanText(row.Simulated.MeanS), optInt(row.Simulated.P50S), optInt(row.Simulated.P90S),
			row.NotStarted, ratioText(row.P50Ratio), ratioText(row.P90Ratio), row.Within2x)
	}
	tw.Flush()
	for _, p := range f.Published {
		fmt.Fprintf(w, "published, %s (%d jobs; %s): mean %.0f s, median %.0f s; simulated, all %d GPU jobs that started: mean %s s, median %s s\n",
			p.Label, p.Jobs, p.Source, p.MeanS, p.MedianS, p.Simulated.N, meanText(p.Simulated.MeanS), optInt(p.Simulated.P50S))
	}
}

func meanText(v *float64) string {
	if v == nil {
		return "-"
	}
	return fmt.Sprintf("%.0f", *v)
}

func optInt(v *int64) string {
	if v == nil {
		return "-"
	}
	return fmt.Sprint(*v)
}

func ratioText(v *float64) string {
	if v == nil {
		return "-"
	}
	return fmt.Sprintf("%.2f", *v)
}
