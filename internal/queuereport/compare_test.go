package queuereport

import (
	"bytes"
	"errors"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/gpugov/gpugov/internal/vocab"
)

func metricOf(t *testing.T, gc GroupComparison, name string) MetricComparison {
	t.Helper()
	for _, m := range gc.Metrics {
		if m.Metric == name {
			return m
		}
	}
	t.Fatalf("no metric %q in group %v", name, gc.Key)
	return MetricComparison{}
}

func compareReports() (Report, Report) {
	opts := Options{GroupBy: []string{KeyQueue}, OvertakenThreshold: 1, StarvationReleases: 3, TierArrivalThreshold: 3}
	before := Report{Options: opts,
		Total: Group{Key: map[string]string{}, Jobs: 12, WaitP50S: floatPtr(100)},
		Groups: []Group{
			{Key: map[string]string{"queue": "qa"}, Jobs: 10, WaitP50S: floatPtr(100), StillWaiting: 0,
				CancellationRate: floatPtr(0.2), WaitReasonSeconds: map[string]float64{"capacity_busy": 100}},
			{Key: map[string]string{"queue": "qb"}, Jobs: 2, WaitP50S: floatPtr(40)},
		}}
	after := Report{Options: opts,
		Total: Group{Key: map[string]string{}, Jobs: 9, WaitP50S: floatPtr(150)},
		Groups: []Group{
			{Key: map[string]string{"queue": "qa"}, Jobs: 5, WaitP50S: floatPtr(150), StillWaiting: 3,
				CancellationRate: floatPtr(0.1), WaitReasonSeconds: map[string]float64{"held": 30}},
			{Key: map[string]string{"queue": "qc"}, Jobs: 4},
		}}
	return before, after
}

func TestCompareDeltas(t *testing.T) {
	before, after := compareReports()
	c := Compare(before, after)
	if len(c.DefinitionMismatches) != 0 {
		t.Errorf("mismatches %v, want none", c.DefinitionMismatches)
	}
	if len(c.Groups) != 3 || c.Groups[0].Key["queue"] != "qa" || c.Groups[1].Key["queue"] != "qb" || c.Groups[2].Key["queue"] != "qc" {
		t.Fatalf("groups %+v, want qa, qb, qc", c.Groups)
	}
	qa := c.Groups[0]
	p50 := metricOf(t, qa, "wait_p50_s")
	if val(p50.Delta) != 50 || val(p50.Ratio) != 1.5 {
		t.Errorf("qa p50 delta %v ratio %v, want 50 and 1.5", val(p50.Delta), val(p50.Ratio))
	}
	jobs := metricOf(t, qa, "jobs")
	if val(jobs.Before) != 10 || val(jobs.After) != 5 || val(jobs.Delta) != -5 || val(jobs.Ratio) != 0.5 {
		t.Errorf("qa jobs %+v", jobs)
	}
	still := metricOf(t, qa, "still_waiting")
	if val(still.Delta) != 3 || still.Ratio != nil {
		t.Errorf("qa still waiting: delta %v ratio %v, want 3 and null (before is 0)", val(still.Delta), val(still.Ratio))
	}
	rate := metricOf(t, qa, "cancellation_rate")
	if d := val(rate.Delta); d > -0.1+1e-12 || d < -0.1-1e-12 {
		t.Errorf("qa cancellation rate delta %v, want -0.1", d)
	}
	busy := metricOf(t, qa, "wait_reason_seconds.capacity_busy")
	held := metricOf(t, qa, "wait_reason_seconds.held")
	if val(busy.After) != 0 || val(busy.Delta) != -100 || val(held.Before) != 0 || held.Ratio != nil {
		t.Errorf("reasons: busy %+v held %+v", busy, held)
	}
	p95 := metricOf(t, qa, "wait_p95_s")
	if p95.Before != nil || p95.Delta != nil {
		t.Errorf("undefined on both sides: %+v", p95)
	}

	qb, qc := c.Groups[1], c.Groups[2]
	if !qb.InBefore || qb.InAfter || qc.InBefore || !qc.InAfter {
		t.Errorf("presence: qb %v/%v qc %v/%v", qb.InBefore, qb.InAfter, qc.InBefore, qc.InAfter)
	}
	if m := metricOf(t, qb, "jobs"); val(m.Before) != 2 || m.After != nil || m.Delta != nil || m.Ratio != nil {
		t.Errorf("qb (before only) jobs %+v, want before 2 and nulls", m)
	}
	if m := metricOf(t, qc, "jobs"); m.Before != nil || val(m.After) != 4 || m.Delta != nil {
		t.Errorf("qc (after only) jobs %+v, want after 4 and nulls", m)
	}
	if m := metricOf(t, c.Total, "jobs"); val(m.Delta) != -3 {
		t.Errorf("total jobs delta %v, want -3", val(m.Delta))
	}
}

func TestCompareDefinitionMismatch(t *testing.T) {
	before, after := compareReports()
	after.Options.StarvationReleases = 5
	after.Options.GroupBy = []string{KeyQueue, KeyPool}
	c := Compare(before, after)
	if len(c.DefinitionMismatches) != 2 ||
		!strings.Contains(c.DefinitionMismatches[0], "group_by") || !strings.Contains(c.DefinitionMismatches[1], "starvation_releases") {
		t.Errorf("mismatches %v, want group_by and starvation_releases", c.DefinitionMismatches)
	}
}

// Two windows of the same records compare on identical definitions: each side
// of the comparison is exactly that window's report.
func TestCompareWindowsOfFixture(t *testing.T) {
	f := loadFixture(t)
	early, late := f.Options, f.Options
	early.Window.To, early.Now = early.Window.From.Add(7200e9), early.Window.From.Add(7200e9)
	late.Window.From = late.Window.From.Add(7200e9)
	b, a := mustCompute(t, f.Input, early), mustCompute(t, f.Input, late)
	c := Compare(b, a)
	for i, gc := range c.Groups {
		if !gc.InBefore || !gc.InAfter {
			continue
		}
		for _, name := range []string{"wait_p95_s", "gpu_seconds", "jobs"} {
			m := metricOf(t, gc, name)
			if val(m.Before) != val(groupMetric(t, b, gc.Key, name)) || val(m.After) != val(groupMetric(t, a, gc.Key, name)) {
				t.Errorf("group %d %s: %+v does not match the reports", i, name, m)
			}
		}
	}
	// J1 (group A) starts at 3600: inside the early window only.
	gA := map[string]string{"queue": "qa", "tier": "standard", "job_type": "train", "pool": "p1"}
	if m := metricOf(t, c.Groups[0], "started"); c.Groups[0].Key["pool"] != "p1" || val(m.Before) != 3 || val(m.After) != 0 {
		t.Errorf("group %v started %+v, want 3 before (J1, J2, J4) and 0 after", gA, m)
	}
}

func groupMetric(t *testing.T, r Report, key map[string]string, name string) *float64 {
	t.Helper()
	g := findGroup(t, r, key)
	for _, m := range groupMetrics {
		if m.name == name {
			return m.get(&g)
		}
	}
	t.Fatalf("unknown metric %s", name)
	return nil
}

func TestRenderReport(t *testing.T) {
	f := loadFixture(t)
	var buf bytes.Buffer
	if err := RenderReport(&buf, mustCompute(t, f.Input, f.Options)); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	for _, want := range []string{
		"window     2026-01-05T00:00:00Z – 2026-01-05T10:00:00Z (observed until 2026-01-05T08:00:00Z)",
		"WAIT_P50", "REQUEUE_P95", "CANCEL_RATE",
		"7h55m+",     // J3's 28500 s, still waiting
		"62.1%",      // group A's share of p1: 37800 / 60900
		"33.3%",      // group B's cancellation rate
		"FRAGMENTED", // a reason column
		"6h00m",      // group A's fragmented time, 21600 s
		"overtaken=3 releases=4 higher_tier_arrivals=3",
		"(still waiting)",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("report lacks %q:\n%s", want, out)
		}
	}
	// Aligned: every row of the first table is as wide as its header.
	lines := strings.Split(out, "\n")
	var head int
	for i, l := range lines {
		if strings.Contains(l, "WAIT_P50") {
			head = i
			break
		}
	}
	for _, l := range lines[head+1 : head+6] {
		if len(strings.TrimRight(l, " ")) != len(strings.TrimRight(lines[head], " ")) {
			t.Errorf("row not aligned with the header:\n%s\n%s", lines[head], l)
		}
	}
	if !strings.Contains(lines[head+5], "total") {
		t.Errorf("last row %q, want the total", lines[head+5])
	}
	// The cancelled jobs (Group.Cancelled, which the JSON report carries)
	// have their column, the total's cell the total's count.
	r := mustCompute(t, f.Input, f.Options)
	heads := strings.Fields(lines[head])
	col := slices.Index(heads, "CANCELLED")
	if col < 0 || r.Total.Cancelled == 0 {
		t.Fatalf("no CANCELLED column (%d cancelled in all):\n%s", r.Total.Cancelled, lines[head])
	}
	// The total's key cells are empty: count the columns from the right.
	if got := strings.Fields(lines[head+5]); len(got) < len(heads)-col || got[len(got)-(len(heads)-col)] != strconv.Itoa(r.Total.Cancelled) {
		t.Errorf("total's CANCELLED %v, want %d:\n%s\n%s", got, r.Total.Cancelled, lines[head], lines[head+5])
	}
}

func TestRenderComparison(t *testing.T) {
	before, after := compareReports()
	after.Options.TierArrivalThreshold = 9
	var buf bytes.Buffer
	if err := RenderComparison(&buf, Compare(before, after)); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	for _, want := range []string{
		"WARNING: definitions differ", "tier_arrival_threshold",
		"queue=qb (before only)", "queue=qc (after only)",
		"wait_p50_s", "1m40s", "2m30s", "+50s", "1.50x", // qa's p50 100 s → 150 s
		"-10.0pp", // cancellation rate 20% → 10%
	} {
		if !strings.Contains(out, want) {
			t.Errorf("comparison lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "wait_p95_s") {
		t.Errorf("a metric undefined on both sides was written:\n%s", out)
	}
}

func TestRenderTotalOnly(t *testing.T) {
	f := loadFixture(t)
	o := f.Options
	o.GroupBy = []string{}
	var buf bytes.Buffer
	if err := RenderReport(&buf, mustCompute(t, f.Input, o)); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	if !strings.Contains(out, "GROUP") || !strings.Contains(out, "total") || !strings.Contains(out, "(nothing: total only)") {
		t.Errorf("total-only report:\n%s", out)
	}
}

type failingWriter struct{}

func (failingWriter) Write([]byte) (int, error) { return 0, errors.New("disk full") }

func TestRenderReturnsWriteError(t *testing.T) {
	f := loadFixture(t)
	if err := RenderReport(failingWriter{}, mustCompute(t, f.Input, f.Options)); err == nil {
		t.Error("RenderReport: want the writer's error")
	}
	before, after := compareReports()
	if err := RenderComparison(failingWriter{}, Compare(before, after)); err == nil {
		t.Error("RenderComparison: want the writer's error")
	}
}

// TestRenderEmptyGroupValue checks that an empty group-by value (a job
// submitted without the job_type label) reads as (none) in tables and
// comparison labels, not as a blank.
func TestRenderEmptyGroupValue(t *testing.T) {
	in := Input{Jobs: []Job{testJob("a", 0, started(10)), testJob("b", 0, started(20))}, Runs: []Run{testRun("a", 10, -1), testRun("b", 20, -1)}}
	in.Jobs[1].JobType = ""
	o := window(0, 100, 100, []string{KeyQueue, KeyJobType})
	r := mustCompute(t, in, o)
	var table, cmp bytes.Buffer
	if err := RenderReport(&table, r); err != nil {
		t.Fatal(err)
	}
	if err := RenderComparison(&cmp, Compare(r, r)); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(table.String(), NoValueLabel) || !strings.Contains(cmp.String(), "job_type="+NoValueLabel) ||
		strings.Contains(cmp.String(), "job_type= ") {
		t.Errorf("empty job type rendered without %s:\n%s\n%s", NoValueLabel, table.String(), cmp.String())
	}
}

func TestGroupMetricCatalogue(t *testing.T) {
	defs := GroupMetricDefs()
	names := GroupMetricNames()
	if len(defs) != len(groupMetrics)+len(vocab.RecordedReasons) || len(names) != len(defs) {
		t.Fatalf("%d defs, %d names; want %d fixed metrics and %d reasons", len(defs), len(names), len(groupMetrics), len(vocab.RecordedReasons))
	}
	seen := map[string]bool{}
	for i, d := range defs {
		if names[i] != d.Name || seen[d.Name] || d.Description == "" {
			t.Errorf("def %d %+v: name %q, repeated %v", i, d, names[i], seen[d.Name])
		}
		seen[d.Name] = true
		switch d.Unit {
		case UnitSeconds, UnitJobs, UnitCount, UnitRatio, UnitGPUSeconds:
		default:
			t.Errorf("%s: unit %q", d.Name, d.Unit)
		}
	}
	g := Group{Jobs: 7, WaitP95S: floatPtr(42), WaitReasonSeconds: map[string]float64{"capacity_busy": 12}}
	for _, c := range []struct {
		name string
		want *float64
		ok   bool
	}{
		{"jobs", floatPtr(7), true},
		{"wait_p95_s", floatPtr(42), true},
		{"wait_p50_s", nil, true},
		{"wait_reason_seconds.capacity_busy", floatPtr(12), true},
		{"wait_reason_seconds.quota_exhausted", floatPtr(0), true},
		{"wait_reason_seconds.not_yet_evaluated", floatPtr(0), true},
		{"wait_reason_seconds.busy", nil, false},
		{"wait_p96_s", nil, false},
	} {
		v, ok := GroupMetric(&g, c.name)
		if ok != c.ok || (v == nil) != (c.want == nil) || (v != nil && *v != *c.want) {
			t.Errorf("GroupMetric(%s) = %v, %v; want %v, %v", c.name, v, ok, c.want, c.ok)
		}
	}
}

func TestCompareMetric(t *testing.T) {
	m := CompareMetric("x", floatPtr(4), floatPtr(3))
	if *m.Delta != -1 || *m.Ratio != 0.75 {
		t.Errorf("4 → 3: %+v", m)
	}
	if m := CompareMetric("x", floatPtr(0), floatPtr(3)); *m.Delta != 3 || m.Ratio != nil {
		t.Errorf("0 → 3: %+v, want delta 3 and no ratio", m)
	}
	if m := CompareMetric("x", nil, floatPtr(3)); m.Delta != nil || m.Ratio != nil {
		t.Errorf("nil → 3: %+v, want no delta nor ratio", m)
	}
}
