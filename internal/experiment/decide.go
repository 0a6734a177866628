package experiment

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	"github.com/gpugov/gpugov/internal/queuereport"
	"github.com/gpugov/gpugov/internal/vocab"
)

// changeTolerance absorbs the rounding of a relative change computed from
// decimal values (5400 → 3780 is a change of −0.3 up to a few ulps).
const changeTolerance = 1e-9

// Label renders the condition's predicate, its default name:
// "production tier wait_p95_s > 1.2 × baseline", "total false_reclaims > 0".
func (c Condition) Label() string {
	pr, ok := c.predicate()
	if !ok {
		return c.Target.label() + " " + c.Metric + " (no predicate)"
	}
	op := "<"
	if pr.above {
		op = ">"
	}
	if pr.factor {
		return fmt.Sprintf("%s %s %s %s × baseline", c.Target.label(), c.Metric, op, num(*pr.v))
	}
	return fmt.Sprintf("%s %s %s %s", c.Target.label(), c.Metric, op, withUnit(pr.v, unitOf(c.Metric)))
}

// read reads metric on t of m, nil and 0 when m is nil or the metric cannot
// be read there.
func read(m *Measurement, metric string, t Target) (*float64, int) {
	if m == nil {
		return nil, 0
	}
	v, n, err := m.Value(metric, t)
	if err != nil {
		return nil, 0
	}
	return v, n
}

func check(s *Spec, baseline, current *Measurement) []ConditionResult {
	out := make([]ConditionResult, 0, len(s.Rollback))
	for _, c := range s.Rollback {
		out = append(out, checkOne(c, baseline, current))
	}
	return out
}

// checkOne evaluates one condition.
func checkOne(c Condition, baseline, current *Measurement) ConditionResult {
	if c.Name == "" {
		c.Name = c.Label()
	}
	r := ConditionResult{Condition: c}
	what := c.Target.label() + " " + c.Metric
	unit := unitOf(c.Metric)
	var n int
	var err error
	if current != nil {
		r.Value, n, err = current.Value(c.Metric, c.Target)
	}
	r.Baseline, _ = read(baseline, c.Metric, c.Target)
	pr, ok := c.predicate()
	switch {
	case err != nil:
		r.Text = fmt.Sprintf("%s: %v; not checked", what, err)
		return r
	case !ok:
		r.Text = what + ": the condition has no predicate; not checked"
		return r
	case current == nil:
		r.Text = what + ": nothing measured yet; not checked"
		return r
	}
	if pr.factor {
		if r.Baseline != nil {
			r.Threshold = ptr(*pr.v * *r.Baseline)
		}
	} else {
		r.Threshold = ptr(*pr.v)
	}
	if r.Value == nil {
		r.Text = fmt.Sprintf("%s has no value in this window (%s measured); not checked", what, jobs(n))
		return r
	}
	if r.Threshold == nil {
		r.Text = fmt.Sprintf("%s %s; the baseline has no value, so %s × baseline is undefined; not checked",
			what, withUnit(r.Value, unit), num(*pr.v))
		return r
	}
	v, th := *r.Value, *r.Threshold
	if pr.above {
		r.Breached = v > th
	} else {
		r.Breached = v < th
	}
	op := map[[2]bool]string{{true, true}: ">", {true, false}: "≤", {false, true}: "<", {false, false}: "≥"}[[2]bool{pr.above, r.Breached}]
	if pr.factor {
		r.Text = fmt.Sprintf("%s %s %s %s × baseline %s = %s", what, withUnit(r.Value, unit), op, num(*pr.v),
			withUnit(r.Baseline, unit), withUnit(r.Threshold, unit))
	} else {
		r.Text = fmt.Sprintf("%s %s %s %s", what, withUnit(r.Value, unit), op, withUnit(r.Threshold, unit))
	}
	return r
}

func decide(s *Spec, baseline, candidate *Measurement, breaches []ConditionResult) Outcome {
	o := Outcome{Breaches: append([]ConditionResult{}, breaches...), Checks: check(s, baseline, candidate)}
	// A breach on the full window not already given (by its condition) is added.
	for _, c := range o.Checks {
		if c.Breached && !slices.ContainsFunc(o.Breaches, func(b ConditionResult) bool {
			return b.Condition.Name == c.Condition.Name && b.Condition.Label() == c.Condition.Label()
		}) {
			o.Breaches = append(o.Breaches, c)
		}
	}
	o.Expected = expected(s.Expected, baseline, candidate)
	o.Rows = rows(s, baseline, candidate)
	e := &o.Expected
	what := e.Target.label() + " " + e.Metric
	unit := unitOf(e.Metric)
	minSample := s.EffectiveMinSample()
	switch {
	case len(o.Breaches) > 0:
		o.Verdict = vocab.VerdictRolledBack
		texts := make([]string, len(o.Breaches))
		for i, b := range o.Breaches {
			texts[i] = b.Text
		}
		o.Reason = strings.Join(texts, "; ")
	case e.SampleBefore < minSample || e.SampleAfter < minSample:
		o.Verdict = vocab.VerdictInconclusive
		o.Reason = fmt.Sprintf("%s had %s in the baseline window and %s in the candidate window; a verdict needs at least %d in each (min_sample)",
			e.Target.label(), jobs(e.SampleBefore), jobs(e.SampleAfter), minSample)
	case e.Before == nil || e.After == nil:
		o.Verdict = vocab.VerdictInconclusive
		side := "the baseline window"
		switch {
		case e.Before == nil && e.After == nil:
			side = "either window"
		case e.Before != nil:
			side = "the candidate window"
		}
		o.Reason = fmt.Sprintf("%s has no value in %s (%s before, %s after, none measured for it); no rollback condition breached",
			what, side, jobs(e.SampleBefore), jobs(e.SampleAfter))
	default:
		o.Verdict = vocab.VerdictNotMet
		met := "not met"
		if e.Met {
			o.Verdict, met = vocab.VerdictKept, "met"
		}
		change := "the baseline is 0, so no relative change"
		if e.Change != nil {
			change = percent(*e.Change)
		}
		o.Reason = fmt.Sprintf("%s %s → %s (%s), expected %s of at least %s %%: %s; no rollback condition breached",
			what, withUnit(e.Before, unit), withUnit(e.After, unit), change, article(e.Direction), num(e.Expectation.Change*100), met)
	}
	return o
}

func article(d Direction) string {
	if d == Increase {
		return "an increase"
	}
	return "a " + string(d)
}

// expected measures the expected result. With a baseline of 0 there is no
// relative change: an increase is met by any positive value, a decrease
// never.
func expected(e Expectation, baseline, candidate *Measurement) ExpectedResult {
	r := ExpectedResult{Expectation: e}
	r.Before, r.SampleBefore = read(baseline, e.Metric, e.Target)
	r.After, r.SampleAfter = read(candidate, e.Metric, e.Target)
	if r.Before == nil || r.After == nil {
		return r
	}
	b, a := *r.Before, *r.After
	if b == 0 {
		r.Met = e.Direction == Increase && a > 0
		return r
	}
	ch := (a - b) / b
	r.Change = &ch
	switch e.Direction {
	case Decrease:
		r.Met = ch <= -e.Change+changeTolerance
	case Increase:
		r.Met = ch >= e.Change-changeTolerance
	}
	return r
}

// rows builds the comparison: the total, each tier and each queue of either
// measurement on CoreMetrics and the group metrics the spec names, then
// every governance metric on the total.
func rows(s *Spec, b, a *Measurement) []Row {
	metrics := slices.Clone(CoreMetrics)
	named := map[string]bool{s.Expected.Metric: true}
	for _, c := range s.Rollback {
		named[c.Metric] = true
	}
	for _, mi := range catalogue {
		if named[mi.Name] && !mi.Governance && !slices.Contains(metrics, mi.Name) {
			metrics = append(metrics, mi.Name)
		}
	}
	var out []Row
	add := func(metric string, t Target) {
		before, _ := read(b, metric, t)
		after, _ := read(a, metric, t)
		mc := queuereport.CompareMetric(metric, before, after)
		out = append(out, Row{Metric: metric, Target: t, Before: mc.Before, After: mc.After, Delta: mc.Delta, Ratio: mc.Ratio})
	}
	targets := []Target{{}}
	for _, tier := range groupValues(b, a, queuereport.KeyTier) {
		targets = append(targets, Target{Tier: tier})
	}
	for _, q := range groupValues(b, a, queuereport.KeyQueue) {
		targets = append(targets, Target{Queue: q})
	}
	for i, t := range targets {
		for _, m := range metrics {
			add(m, t)
		}
		if i == 0 {
			for _, d := range governanceMetrics {
				add(d.info.Name, t)
			}
		}
	}
	return out
}

// groupValues lists the tiers (highest first) or queues (by name) of the
// groups of either measurement.
func groupValues(b, a *Measurement, key string) []string {
	var out []string
	for _, m := range []*Measurement{b, a} {
		if m == nil {
			continue
		}
		gs := m.ByQueue
		if key == queuereport.KeyTier {
			gs = m.ByTier
		}
		for _, g := range gs {
			if v := g.Key[key]; !slices.Contains(out, v) {
				out = append(out, v)
			}
		}
	}
	slices.SortFunc(out, func(x, y string) int {
		if key == queuereport.KeyTier {
			if c := cmp.Compare(tierRank(y), tierRank(x)); c != 0 {
				return c
			}
		}
		return cmp.Compare(x, y)
	})
	return out
}

func ptr(v float64) *float64 { return &v }

func jobs(n int) string {
	if n == 1 {
		return "1 job"
	}
	return fmt.Sprintf("%d jobs", n)
}

// unitOf returns the metric's unit ("" when unknown).
func unitOf(metric string) string {
	mi, _ := LookupMetric(metric)
	return mi.Unit
}
