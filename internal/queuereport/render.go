package queuereport

import (
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

// RenderReport writes r as readable aligned tables: one row per group and the
// total, the time per wait reason, the starving jobs, the jobs stuck,
// needing action (with their owner and the action), and each pool's verdict
// line (ReasonShares). Durations are shown
// as 45s, 12m30s, 3h04m or 2d03h; "-" marks an undefined value. It returns the
// writer's error.
func RenderReport(w io.Writer, r Report) error {
	ew := &errWriter{w: w}
	o := r.Options
	ew.printf("Queue service report\n")
	ew.printf("window     %s – %s (observed until %s)\n", stamp(o.Window.From), stamp(o.Window.To), stamp(r.End))
	ew.printf("group by   %s\n", groupByLabel(o.GroupBy))
	ew.printf("starvation overtaken ≥ %d, matching releases ≥ %d, higher-tier arrivals ≥ %d, in waits ≥ %s\n\n",
		o.OvertakenThreshold, o.StarvationReleases, o.TierArrivalThreshold, floorLabel(o.StarvationMinWaitS))
	rows := append(append([]Group(nil), r.Groups...), r.Total)
	renderGroups(ew, o.GroupBy, rows)
	renderQueuePoolShares(ew, o.GroupBy, r.Groups)
	renderProjectShares(ew, o.GroupBy, r.Groups)
	renderReasons(ew, o.GroupBy, rows)
	renderStarving(ew, r)
	renderStuck(ew, r)
	if len(r.ReasonShares) > 0 {
		ew.printf("\nMain problem per pool (details: gpugov report --reasons)\n")
		for _, p := range r.ReasonShares {
			ew.printf("%s\n", p.Verdict)
		}
	}
	return ew.err
}

// renderGroups writes the main table: one row per group, the total last.
func renderGroups(ew *errWriter, groupBy []string, rows []Group) {
	tw := tabwriter.NewWriter(ew, 0, 0, 2, ' ', tabwriter.AlignRight)
	writeRow(tw, append(keyHeads(groupBy), "JOBS", "STARTED", "CANCELLED", "WAIT_P50", "WAIT_P95", "WAIT_P99", "WAIT_MAX",
		"REQUEUES", "REQUEUE_P95", "LONGEST", "WAITING", "OVER_OBJ", "CANCEL_RATE", "GPU_H", "SHARE", "TARGET", "STARVING"))
	for _, g := range rows {
		writeRow(tw, append(keyCells(groupBy, g.Key), itoa(g.Jobs), itoa(g.Started), itoa(g.Cancelled),
			dur(g.WaitP50S), dur(g.WaitP95S), dur(g.WaitP99S), dur(g.WaitMaxS),
			itoa(g.RequeueStarts), dur(g.RequeueWaitP95S), longest(g), itoa(g.StillWaiting),
			itoa(g.JobsOverObjective), pct(g.CancellationRate), hours(g.GPUSeconds),
			pct(g.ServiceShare), pct(g.TargetShare), itoa(g.StarvingJobs)))
	}
	ew.err = firstErr(ew.err, tw.Flush())
	ew.printf("(CANCELLED: jobs cancelled in the window, waiting or not; LONGEST + : still waiting at the end; SHARE: of the pool's GPU-seconds when grouped by pool)\n")
}

// renderQueuePoolShares writes each queue group's delivered share of the pools'
// GPUs against its min_share and max_share, when some group has one.
func renderQueuePoolShares(ew *errWriter, groupBy []string, groups []Group) {
	has := false
	for _, g := range groups {
		has = has || g.PoolShare != nil || g.MinShare != nil || g.MaxShare != nil
	}
	if !has {
		return
	}
	ew.printf("\nPool shares (time-averaged share of the pool's usable GPUs vs the queue's min_share and max_share):\n")
	tw := tabwriter.NewWriter(ew, 0, 0, 2, ' ', tabwriter.AlignRight)
	writeRow(tw, append(keyHeads(groupBy), "POOL_SHARE", "MIN_SHARE", "MAX_SHARE", "STATUS"))
	for _, g := range groups {
		status := ""
		switch {
		case g.PoolShare == nil:
		case g.MinShare != nil && *g.PoolShare < *g.MinShare:
			status = "below min_share"
			if g.StillWaiting == 0 {
				status += " (no job left waiting)"
			}
		case g.MaxShare != nil && *g.PoolShare > *g.MaxShare:
			status = "above max_share"
		case g.MinShare != nil || g.MaxShare != nil:
			status = "within"
		}
		writeRow(tw, append(keyCells(groupBy, g.Key), pct(g.PoolShare), pct(g.MinShare), pct(g.MaxShare), status))
	}
	ew.err = firstErr(ew.err, tw.Flush())
}

// renderProjectShares writes each project group's share of the report's
// GPU-seconds against its fair-share entitlement, when grouped by project.
func renderProjectShares(ew *errWriter, groupBy []string, groups []Group) {
	if len(groups) == 0 || groups[0].ProjectTargetShare == nil {
		return
	}
	ew.printf("\nProject fair shares (share of the report's GPU-seconds vs the fair-share weight's share):\n")
	tw := tabwriter.NewWriter(ew, 0, 0, 2, ' ', tabwriter.AlignRight)
	writeRow(tw, append(keyHeads(groupBy), "PROJECT_SHARE", "FAIR_TARGET"))
	for _, g := range groups {
		writeRow(tw, append(keyCells(groupBy, g.Key), pct(g.ProjectShare), pct(g.ProjectTargetShare)))
	}
	ew.err = firstErr(ew.err, tw.Flush())
}

// renderReasons writes the time waited per reason, one column per reason
// that has any time.
func renderReasons(ew *errWriter, groupBy []string, rows []Group) {
	seen := map[string]bool{}
	for _, g := range rows {
		for k := range g.WaitReasonSeconds {
			seen[k] = true
		}
	}
	names := orderReasons(seen)
	if len(names) == 0 {
		return
	}
	ew.printf("\nTime waited per reason\n")
	tw := tabwriter.NewWriter(ew, 0, 0, 2, ' ', tabwriter.AlignRight)
	writeRow(tw, append(keyHeads(groupBy), upper(names)...))
	for _, g := range rows {
		cells := keyCells(groupBy, g.Key)
		for _, n := range names {
			s := g.WaitReasonSeconds[n]
			cells = append(cells, dur(&s))
		}
		writeRow(tw, cells)
	}
	ew.err = firstErr(ew.err, tw.Flush())
}

// renderStarving lists the starving jobs with their signal counts.
func renderStarving(ew *errWriter, r Report) {
	ew.printf("\nStarving jobs (%d listed of %d)\n", len(r.Starving), r.Total.StarvingJobs)
	if len(r.Starving) == 0 {
		return
	}
	tw := tabwriter.NewWriter(ew, 0, 0, 2, ' ', 0)
	writeLeftRow(tw, []string{"JOB", "QUEUE", "TIER", "POOL", "WAITED", "SINCE", "SIGNALS", "LAST_REASON"})
	for _, s := range r.Starving {
		waited := dur(&s.WaitS)
		if s.WaitOngoing {
			waited += " (still waiting)"
		}
		writeLeftRow(tw, []string{s.JobID, keyValueLabel(s.Queue), s.Tier, keyValueLabel(s.Pool), waited, stamp(s.WaitStart), signalCounts(s), orDash(s.LastReason)})
	}
	ew.err = firstErr(ew.err, tw.Flush())
}

// renderStuck lists the jobs stuck at the report end with their owner and
// the action their reason asks for (StuckJob).
func renderStuck(ew *errWriter, r Report) {
	ew.printf("\nStuck: needs action (%d listed of %d)\n", len(r.Stuck), r.Total.StuckJobs)
	if len(r.Stuck) == 0 {
		return
	}
	tw := tabwriter.NewWriter(ew, 0, 0, 2, ' ', 0)
	writeLeftRow(tw, []string{"JOB", "QUEUE", "TIER", "POOL", "OWNER", "REASON", "WAITED", "SINCE", "ACTION"})
	for _, s := range r.Stuck {
		writeLeftRow(tw, []string{s.JobID, keyValueLabel(s.Queue), s.Tier, keyValueLabel(s.Pool), orDash(s.Project),
			s.Reason, dur(&s.WaitS), stamp(s.WaitStart), s.Action})
	}
	ew.err = firstErr(ew.err, tw.Flush())
}

// RenderComparison writes c as one aligned table: per group (the total first),
// each metric's before, after, delta and ratio. Rows where both sides are zero
// or undefined are left out. A definition mismatch is written first as a
// warning. It returns the writer's error.
func RenderComparison(w io.Writer, c Comparison) error {
	ew := &errWriter{w: w}
	ew.printf("Queue service comparison\n")
	ew.printf("before  %s – %s\n", stamp(c.Before.From), stamp(c.Before.To))
	ew.printf("after   %s – %s\n", stamp(c.After.From), stamp(c.After.To))
	ew.printf("group by %s\n", groupByLabel(c.GroupBy))
	for _, m := range c.DefinitionMismatches {
		ew.printf("WARNING: definitions differ, values are not comparable: %s\n", m)
	}
	ew.printf("(rows zero or undefined on both sides are omitted)\n\n")
	tw := tabwriter.NewWriter(ew, 0, 0, 2, ' ', 0)
	writeLeftRow(tw, []string{"GROUP", "METRIC", "BEFORE", "AFTER", "DELTA", "RATIO"})
	for _, gc := range append([]GroupComparison{c.Total}, c.Groups...) {
		label := groupLabel(gc)
		for _, m := range gc.Metrics {
			if isEmptyMetric(m) {
				continue
			}
			writeLeftRow(tw, []string{label, m.Metric, metricValue(m.Metric, m.Before), metricValue(m.Metric, m.After),
				metricDelta(m.Metric, m.Delta), ratio(m.Ratio)})
			label = ""
		}
	}
	ew.err = firstErr(ew.err, tw.Flush())
	return ew.err
}

// errWriter remembers the first write error so rendering code stays linear.
type errWriter struct {
	w   io.Writer
	err error
}

func (e *errWriter) Write(p []byte) (int, error) {
	if e.err != nil {
		return 0, e.err
	}
	n, err := e.w.Write(p)
	e.err = err
	return n, err
}

func (e *errWriter) printf(format string, args ...any) { fmt.Fprintf(e, format, args...) }

func firstErr(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

// writeRow writes one row of a right-aligned table: every cell, the last
// one included, is tab-terminated so that tabwriter aligns it.
func writeRow(w io.Writer, cells []string) {
	fmt.Fprintln(w, strings.Join(cells, "\t")+"\t")
}

// writeLeftRow writes one row of a left-aligned table; the last cell is not
// padded.
func writeLeftRow(w io.Writer, cells []string) {
	fmt.Fprintln(w, strings.Join(cells, "\t"))
}

func stamp(t time.Time) string { return t.UTC().Format(time.RFC3339) }

func groupByLabel(keys []string) string {
	if len(keys) == 0 {
		return "(nothing: total only)"
	}
	return strings.Join(keys, ", ")
}

func upper(ss []string) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = strings.ToUpper(s)
	}
	return out
}

// keyHeads returns the key column headings: the group-by keys, or GROUP
// when the report has only the total.
func keyHeads(groupBy []string) []string {
	if len(groupBy) == 0 {
		return []string{"GROUP"}
	}
	return upper(groupBy)
}

// keyCells returns the group's values in group-by order; the total (empty
// key) shows "total" in the first column.
func keyCells(groupBy []string, key map[string]string) []string {
	if len(groupBy) == 0 {
		return []string{"total"}
	}
	out := make([]string, len(groupBy))
	for i, k := range groupBy {
		out[i] = keyValueLabel(key[k])
	}
	if len(key) == 0 && len(out) > 0 {
		out[0] = "total"
		for i := 1; i < len(out); i++ {
			out[i] = ""
		}
	}
	return out
}

func groupLabel(gc GroupComparison) string {
	var parts []string
	for _, k := range GroupKeys {
		if v, ok := gc.Key[k]; ok {
			parts = append(parts, k+"="+keyValueLabel(v))
		}
	}
	label := strings.Join(parts, " ")
	if label == "" {
		label = "total"
	}
	switch {
	case !gc.InBefore:
		label += " (after only)"
	case !gc.InAfter:
		label += " (before only)"
	}
	return label
}

// floorLabel describes the starvation floor of Options.StarvationMinWaitS.
func floorLabel(minWaitS float64) string {
	if minWaitS <= 0 {
		return "the queue's objective"
	}
	return "max(the queue's objective, " + durString(minWaitS) + ")"
}

// NoValueLabel is how tables and comparison labels show an empty group-by
// value, such as the job type of a job submitted without the job_type label:
// "job_type=(none)" reads as a value that is absent, where "job_type=" reads
// as a rendering fault. JSON keeps the empty string.
const NoValueLabel = "(none)"

// keyValueLabel returns a group-by value as tables show it.
func keyValueLabel(v string) string {
	if v == "" {
		return NoValueLabel
	}
	return v
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func itoa(n int) string { return strconv.Itoa(n) }

func longest(g Group) string {
	s := dur(g.LongestWaitS)
	if g.LongestWaitS != nil && g.LongestWaitOngoing {
		s += "+" // still waiting
	}
	return s
}

// dur formats seconds for reading: 4.5s, 45s, 12m30s, 3h04m, 2d03h.
func dur(s *float64) string {
	if s == nil {
		return "-"
	}
	return durString(*s)
}

func durString(v float64) string {
	if v < 0 {
		return "-" + durString(-v)
	}
	switch {
	case v < 10:
		return strings.TrimSuffix(strconv.FormatFloat(v, 'f', 1, 64), ".0") + "s"
	case v < 60:
		return fmt.Sprintf("%.0fs", math.Floor(v))
	case v < 3600:
		m := int(v) / 60
		return fmt.Sprintf("%dm%02ds", m, int(v)%60)
	case v < 86400:
		return fmt.Sprintf("%dh%02dm", int(v)/3600, int(v)%3600/60)
	default:
		return fmt.Sprintf("%dd%02dh", int(v)/86400, int(v)%86400/3600)
	}
}

func pct(f *float64) string {
	if f == nil {
		return "-"
	}
	return strconv.FormatFloat(*f*100, 'f', 1, 64) + "%"
}

func hours(gpuSeconds float64) string {
	return strconv.FormatFloat(gpuSeconds/3600, 'f', 1, 64)
}

func ratio(f *float64) string {
	if f == nil {
		return "-"
	}
	return strconv.FormatFloat(*f, 'f', 2, 64) + "x"
}

func signalCounts(s StarvingJob) string {
	parts := make([]string, 0, len(s.Signals))
	for _, sig := range s.Signals {
		n := 0
		switch sig {
		case SignalOvertaken:
			n = s.Overtaken
		case SignalReleases:
			n = s.Releases
		case SignalHigherTierArrivals:
			n = s.HigherTierArrivals
		}
		parts = append(parts, fmt.Sprintf("%s=%d", sig, n))
	}
	return strings.Join(parts, " ")
}

func isEmptyMetric(m MetricComparison) bool {
	zero := func(f *float64) bool { return f == nil || *f == 0 }
	return zero(m.Before) && zero(m.After)
}

// metricKind says how a metric's values read: durations in seconds, fractions
// shown as percentages, or plain numbers.
func metricKind(name string) byte {
	switch {
	case strings.HasSuffix(name, "_s") || strings.HasPrefix(name, reasonMetricPrefix):
		return 'd'
	case name == "cancellation_rate" || name == "service_share" || name == "target_share":
		return '%'
	default:
		return 'n'
	}
}

func metricValue(name string, f *float64) string {
	if f == nil {
		return "-"
	}
	switch metricKind(name) {
	case 'd':
		return durString(*f)
	case '%':
		return pct(f)
	}
	return number(*f)
}

// number writes integers as such and other values with two decimals.
func number(v float64) string {
	if v == math.Trunc(v) && math.Abs(v) < 1e15 {
		return strconv.FormatFloat(v, 'f', 0, 64)
	}
	return strconv.FormatFloat(v, 'f', 2, 64)
}

func metricDelta(name string, f *float64) string {
	if f == nil {
		return "-"
	}
	sign := "+"
	if *f < 0 {
		sign = ""
	}
	switch metricKind(name) {
	case 'd':
		if *f < 0 {
			return durString(*f)
		}
		return sign + durString(*f)
	case '%':
		return sign + strconv.FormatFloat(*f*100, 'f', 1, 64) + "pp"
	}
	return sign + number(*f)
}
