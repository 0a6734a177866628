package queuereport

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	"github.com/gpugov/gpugov/internal/vocab"
)

// Comparison sets two reports (before and after a policy change) side by side,
// group by group, on the same metrics.
type Comparison struct {
	Before  Window   `json:"before_window"`
	After   Window   `json:"after_window"`
	GroupBy []string `json:"group_by"` // the after report's grouping
	// DefinitionMismatches names each option that differs between the two
	// reports and changes a metric's definition (group_by, thresholds). Empty
	// when the reports are comparable.
	DefinitionMismatches []string          `json:"definition_mismatches"`
	Total                GroupComparison   `json:"total"`
	Groups               []GroupComparison `json:"groups"` // union of both reports' groups, in report order
}

// GroupComparison compares one group. A group present in only one report has
// null values on the other side (and null deltas and ratios).
type GroupComparison struct {
	Key      map[string]string  `json:"key"`
	InBefore bool               `json:"in_before"`
	InAfter  bool               `json:"in_after"`
	Metrics  []MetricComparison `json:"metrics"`
}

// MetricComparison is one metric of one group: after − before and after ÷ before.
type MetricComparison struct {
	Metric string   `json:"metric"` // the Group JSON field, or wait_reason_seconds.<reason>
	Before *float64 `json:"before"`
	After  *float64 `json:"after"`
	Delta  *float64 `json:"delta"` // after − before; null when either is null
	Ratio  *float64 `json:"ratio"` // after ÷ before; null when either is null or before is 0
}

// metricDef reads one metric of a group; nil means undefined. unit and desc
// describe it for catalogues (GroupMetricDefs).
type metricDef struct {
	name, unit, desc string
	get              func(*Group) *float64
}

func countMetric(name, unit, desc string, f func(*Group) int) metricDef {
	return metricDef{name, unit, desc, func(g *Group) *float64 { return floatPtr(float64(f(g))) }}
}

func ptrMetric(name, unit, desc string, f func(*Group) *float64) metricDef {
	return metricDef{name, unit, desc, f}
}

// Metric units, as GroupMetricDef.Unit names them.
const (
	UnitSeconds    = "s"     // seconds
	UnitJobs       = "jobs"  // a number of jobs
	UnitCount      = "count" // a number of events (waits, starts)
	UnitRatio      = "ratio" // a fraction, 0..1 unless said otherwise
	UnitGPUSeconds = "GPU-s" // GPU-seconds
)

// groupMetrics lists the compared metrics in the order they are written.
var groupMetrics = []metricDef{
	countMetric("jobs", UnitJobs, "jobs submitted before the report end and not ended before the window", func(g *Group) int { return g.Jobs }),
	countMetric("submitted", UnitJobs, "jobs submitted in the window", func(g *Group) int { return g.Submitted }),
	countMetric("cancelled", UnitJobs, "cancelled jobs whose end is in the window", func(g *Group) int { return g.Cancelled }),
	countMetric("started", UnitJobs, "initial waits ended by a start in the window (the wait samples)", func(g *Group) int { return g.Started }),
	ptrMetric("wait_p50_s", UnitSeconds, "median initial wait of the jobs started in the window", func(g *Group) *float64 { return g.WaitP50S }),
	ptrMetric("wait_p95_s", UnitSeconds, "95th percentile initial wait of the jobs started in the window", func(g *Group) *float64 { return g.WaitP95S }),
	ptrMetric("wait_p99_s", UnitSeconds, "99th percentile initial wait of the jobs started in the window", func(g *Group) *float64 { return g.WaitP99S }),
	ptrMetric("wait_max_s", UnitSeconds, "longest initial wait of the jobs started in the window", func(g *Group) *float64 { return g.WaitMaxS }),
	countMetric("requeue_starts", UnitCount, "requeue waits ended by a start in the window", func(g *Group) int { return g.RequeueStarts }),
	ptrMetric("requeue_wait_p50_s", UnitSeconds, "median requeue wait ended by a start in the window", func(g *Group) *float64 { return g.RequeueWaitP50S }),
	ptrMetric("requeue_wait_p95_s", UnitSeconds, "95th percentile requeue wait ended by a start in the window", func(g *Group) *float64 { return g.RequeueWaitP95S }),
	ptrMetric("requeue_wait_p99_s", UnitSeconds, "99th percentile requeue wait ended by a start in the window", func(g *Group) *float64 { return g.RequeueWaitP99S }),
	ptrMetric("requeue_wait_max_s", UnitSeconds, "longest requeue wait ended by a start in the window", func(g *Group) *float64 { return g.RequeueWaitMaxS }),
	ptrMetric("longest_wait_s", UnitSeconds, "longest continuous wait overlapping the window, to its end or the report end (open waits included)", func(g *Group) *float64 { return g.LongestWaitS }),
	countMetric("still_waiting", UnitJobs, "jobs with a wait open at the report end", func(g *Group) int { return g.StillWaiting }),
	countMetric("jobs_over_objective", UnitJobs, "jobs whose wait exceeded their queue's wait objective (max_wait_s)", func(g *Group) int { return g.JobsOverObjective }),
	countMetric("waits_ended", UnitCount, "waits ended in the window by a start or a cancellation", func(g *Group) int { return g.WaitsEnded }),
	countMetric("cancelled_while_waiting", UnitCount, "waits ended in the window by a cancellation", func(g *Group) int { return g.CancelledWhileWaiting }),
	ptrMetric("cancellation_rate", UnitRatio, "cancelled_while_waiting ÷ waits_ended (abandonment)", func(g *Group) *float64 { return g.CancellationRate }),
	metricDef{"gpu_seconds", UnitGPUSeconds, "GPU-seconds of runs clipped to the window", func(g *Group) *float64 { return floatPtr(g.GPUSeconds) }},
	ptrMetric("service_share", UnitRatio, "delivered share of the report's (or the pool's) GPU-seconds", func(g *Group) *float64 { return g.ServiceShare }),
	ptrMetric("target_share", UnitRatio, "the queue's normalised service share (grouped by queue)", func(g *Group) *float64 { return g.TargetShare }),
	ptrMetric("share_vs_target", UnitRatio, "the queue's delivered share ÷ its target share (1 = as promised)", func(g *Group) *float64 { return g.ShareVsTarget }),
	ptrMetric("pool_share", UnitRatio, "the queue's time-averaged share of the pools' usable GPUs (grouped by queue)", func(g *Group) *float64 { return g.PoolShare }),
	ptrMetric("project_share", UnitRatio, "the project's share of the report's GPU-seconds (grouped by project)", func(g *Group) *float64 { return g.ProjectShare }),
	countMetric("starving_jobs", UnitJobs, "jobs with at least one starvation signal", func(g *Group) int { return g.StarvingJobs }),
	countMetric("overtaken_jobs", UnitJobs, "jobs with the overtaken signal", func(g *Group) int { return g.OvertakenJobs }),
	countMetric("release_starved_jobs", UnitJobs, "jobs with the releases signal", func(g *Group) int { return g.ReleaseStarvedJobs }),
	countMetric("tier_starved_jobs", UnitJobs, "jobs with the higher_tier_arrivals signal", func(g *Group) int { return g.TierStarvedJobs }),
	countMetric("stuck_jobs", UnitJobs, "jobs stuck, needing action, at the report end", func(g *Group) int { return g.StuckJobs }),
}

// GroupMetricDef describes one metric of a Group as Compare names it: its
// name (the Group JSON field, or wait_reason_seconds.<reason>), its unit
// (one of the Unit constants) and what it measures (the package
// documentation has the definitions).
type GroupMetricDef struct {
	Name        string `json:"name"`
	Unit        string `json:"unit"`
	Description string `json:"description"`
}

// GroupMetricDefs lists every group metric in the order Compare writes
// them: the fixed metrics, then wait_reason_seconds.<reason> for each
// recorded wait reason (vocab.RecordedReasons) in the catalogue's order.
func GroupMetricDefs() []GroupMetricDef {
	out := make([]GroupMetricDef, 0, len(groupMetrics)+len(vocab.RecordedReasons))
	for _, m := range groupMetrics {
		out = append(out, GroupMetricDef{Name: m.name, Unit: m.unit, Description: m.desc})
	}
	for _, r := range vocab.RecordedReasons {
		out = append(out, GroupMetricDef{Name: reasonMetricPrefix + string(r), Unit: UnitSeconds,
			Description: "seconds of " + string(r) + " wait events clipped to the window"})
	}
	return out
}

// GroupMetricNames returns the names of GroupMetricDefs, in its order.
func GroupMetricNames() []string {
	defs := GroupMetricDefs()
	out := make([]string, len(defs))
	for i, d := range defs {
		out[i] = d.Name
	}
	return out
}

// GroupMetric reads the metric called name (a GroupMetricDefs name) of g, as
// Compare reads it: nil where the value is undefined (no sample, zero
// denominator, no target); a wait reason without time reads 0 s. ok is false
// for an unknown name.
func GroupMetric(g *Group, name string) (v *float64, ok bool) {
	for _, m := range groupMetrics {
		if m.name == name {
			return m.get(g), true
		}
	}
	if r, found := strings.CutPrefix(name, reasonMetricPrefix); found && slices.Contains(vocab.RecordedReasons, vocab.WaitReason(r)) {
		return floatPtr(g.WaitReasonSeconds[r]), true
	}
	return nil, false
}

// reasonMetricPrefix prefixes the per-reason metrics of a comparison.
const reasonMetricPrefix = "wait_reason_seconds."

// Compare compares two reports on the same metrics, group by group. Groups are
// matched by key; a group found in only one report is included with nulls on
// the other side. Definition differences (group_by, thresholds) are listed in
// DefinitionMismatches rather than refused, so that a caller can still show
// the data with a warning.
func Compare(before, after Report) Comparison {
	c := Comparison{
		Before: before.Options.Window, After: after.Options.Window,
		GroupBy:              slices.Clone(after.Options.GroupBy),
		DefinitionMismatches: definitionMismatches(before.Options, after.Options),
		Total:                compareGroups(&before.Total, &after.Total),
		Groups:               []GroupComparison{},
	}
	type pair struct{ b, a *Group }
	byKey := map[string]*pair{}
	var keys []map[string]string
	for _, side := range []struct {
		groups []Group
		after  bool
	}{{before.Groups, false}, {after.Groups, true}} {
		for i := range side.groups {
			g := &side.groups[i]
			k := keyString(g.Key)
			p, ok := byKey[k]
			if !ok {
				p = &pair{}
				byKey[k] = p
				keys = append(keys, g.Key)
			}
			if side.after {
				p.a = g
			} else {
				p.b = g
			}
		}
	}
	slices.SortStableFunc(keys, compareKeyMaps)
	for _, k := range keys {
		p := byKey[keyString(k)]
		c.Groups = append(c.Groups, compareGroups(p.b, p.a))
	}
	return c
}

// definitionMismatches lists the options that change metric definitions and
// differ between two reports.
func definitionMismatches(b, a Options) []string {
	out := []string{}
	if !slices.Equal(b.GroupBy, a.GroupBy) {
		out = append(out, fmt.Sprintf("group_by: before %v, after %v", b.GroupBy, a.GroupBy))
	}
	if b.StarvationMinWaitS != a.StarvationMinWaitS {
		out = append(out, fmt.Sprintf("starvation_min_wait_s: before %v, after %v", b.StarvationMinWaitS, a.StarvationMinWaitS))
	}
	for _, t := range []struct {
		name   string
		bv, av int
	}{
		{"overtaken_threshold", b.OvertakenThreshold, a.OvertakenThreshold},
		{"starvation_releases", b.StarvationReleases, a.StarvationReleases},
		{"tier_arrival_threshold", b.TierArrivalThreshold, a.TierArrivalThreshold},
	} {
		if t.bv != t.av {
			out = append(out, fmt.Sprintf("%s: before %d, after %d", t.name, t.bv, t.av))
		}
	}
	return out
}

// compareGroups compares one group; b or a is nil where the group is absent.
func compareGroups(b, a *Group) GroupComparison {
	gc := GroupComparison{InBefore: b != nil, InAfter: a != nil}
	if a != nil {
		gc.Key = a.Key
	} else {
		gc.Key = b.Key
	}
	for _, m := range groupMetrics {
		gc.Metrics = append(gc.Metrics, CompareMetric(m.name, read(b, m.get), read(a, m.get)))
	}
	for _, r := range reasonsOf(b, a) {
		get := func(g *Group) *float64 { return floatPtr(g.WaitReasonSeconds[r]) } // absent reason: 0 s
		gc.Metrics = append(gc.Metrics, CompareMetric(reasonMetricPrefix+r, read(b, get), read(a, get)))
	}
	return gc
}

func read(g *Group, get func(*Group) *float64) *float64 {
	if g == nil {
		return nil
	}
	return get(g)
}

// CompareMetric compares one metric as Compare does: Delta is after −
// before (nil when either is nil) and Ratio after ÷ before (nil when either
// is nil or before is 0).
func CompareMetric(name string, b, a *float64) MetricComparison {
	m := MetricComparison{Metric: name, Before: b, After: a}
	if b != nil && a != nil {
		m.Delta = floatPtr(*a - *b)
		if *b != 0 {
			m.Ratio = floatPtr(*a / *b)
		}
	}
	return m
}

// reasonsOf returns the wait reasons with time in either group: the known
// reasons in docs/design.md's order, then any others alphabetically.
func reasonsOf(gs ...*Group) []string {
	seen := map[string]bool{}
	for _, g := range gs {
		if g == nil {
			continue
		}
		for r := range g.WaitReasonSeconds {
			seen[r] = true
		}
	}
	return orderReasons(seen)
}

func orderReasons(seen map[string]bool) []string {
	var out, other []string
	for _, r := range vocab.WaitReasons {
		if seen[string(r)] {
			out = append(out, string(r))
			delete(seen, string(r))
		}
	}
	for r := range seen {
		other = append(other, r)
	}
	slices.Sort(other)
	return append(out, other...)
}

// keyString identifies a group key: name=value pairs in canonical order.
func keyString(k map[string]string) string {
	var b strings.Builder
	for _, name := range GroupKeys {
		if v, ok := k[name]; ok {
			fmt.Fprintf(&b, "%s=%q;", name, v)
		}
	}
	return b.String()
}

// compareKeyMaps orders keys as reports do: canonical dimensions, tiers
// highest first, other values alphabetically.
func compareKeyMaps(a, b map[string]string) int {
	for _, name := range GroupKeys {
		va, oka := a[name]
		vb, okb := b[name]
		if oka != okb {
			if oka {
				return -1
			}
			return 1
		}
		if name == KeyTier {
			ta, ea := vocab.ParseTier(va)
			tb, eb := vocab.ParseTier(vb)
			if ea == nil && eb == nil {
				if ta != tb {
					return cmp.Compare(tb, ta)
				}
				continue
			}
		}
		if r := cmp.Compare(va, vb); r != 0 {
			return r
		}
	}
	return 0
}
