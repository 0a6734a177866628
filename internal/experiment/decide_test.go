package experiment

import (
	"bytes"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/gpugov/gpugov/internal/queuereport"
	"github.com/gpugov/gpugov/internal/vocab"
)

// tierVals describes one tier of a hand-made measurement: its jobs, longest
// and P95 waits (negative: undefined), starving jobs and jobs over objective.
type tierVals struct {
	tier           string
	jobs           int
	longest, p95   float64
	starving, over int
}

func opt(v float64) *float64 {
	if v < 0 {
		return nil
	}
	return &v
}

func measurement(gov Governance, tiers ...tierVals) *Measurement {
	m := &Measurement{Window: fixtureWindow, Governance: gov, Total: queuereport.Group{Key: map[string]string{}},
		ByTier: []queuereport.Group{}, ByQueue: []queuereport.Group{}}
	for _, tv := range tiers {
		g := queuereport.Group{Key: map[string]string{"tier": tv.tier}, Jobs: tv.jobs, Started: tv.jobs,
			LongestWaitS: opt(tv.longest), WaitP95S: opt(tv.p95), StarvingJobs: tv.starving, JobsOverObjective: tv.over}
		m.ByTier = append(m.ByTier, g)
		m.Total.Jobs += tv.jobs
		m.Total.StarvingJobs += tv.starving
		if tv.longest > val(m.Total.LongestWaitS) {
			m.Total.LongestWaitS = opt(tv.longest)
		}
	}
	m.ByQueue = append(m.ByQueue, queuereport.Group{Key: map[string]string{"queue": "batch"}, Jobs: m.Total.Jobs})
	return m
}

func TestCheckPredicates(t *testing.T) {
	base := measurement(Governance{FalseReclaims: 0}, tierVals{"production", 20, 900, 300, 0, 0}, tierVals{"experiment", 10, 5400, -1, 4, 2})
	cur := measurement(Governance{FalseReclaims: 2, ResumeSuccessRate: ptr(0.9)},
		tierVals{"production", 22, 950, 412, 0, 0}, tierVals{"experiment", 9, 3100, 2000, 1, 0})
	for _, c := range []struct {
		name     string
		cond     Condition
		breached bool
		value    *float64
		baseline *float64
		thr      *float64
		text     string
	}{
		{"factor above, breached", Condition{Metric: "wait_p95_s", Target: Target{Tier: "production"}, AboveBaselineFactor: ptr(1.2)},
			true, ptr(412), ptr(300), ptr(360), "production tier wait_p95_s 412 s > 1.2 × baseline 300 s = 360 s"},
		{"factor above, held", Condition{Metric: "wait_p95_s", Target: Target{Tier: "production"}, AboveBaselineFactor: ptr(1.5)},
			false, ptr(412), ptr(300), ptr(450), "production tier wait_p95_s 412 s ≤ 1.5 × baseline 300 s = 450 s"},
		{"factor below, breached", Condition{Metric: "jobs", Target: Target{Tier: "production"}, BelowBaselineFactor: ptr(1.2)},
			true, ptr(22), ptr(20), ptr(24), "production tier jobs 22 jobs < 1.2 × baseline 20 jobs = 24 jobs"},
		{"factor below, held", Condition{Metric: "jobs", Target: Target{Tier: "production"}, BelowBaselineFactor: ptr(0.5)},
			false, ptr(22), ptr(20), ptr(10), "production tier jobs 22 jobs ≥ 0.5 × baseline 20 jobs = 10 jobs"},
		{"above, breached", Condition{Metric: "false_reclaims", Above: ptr(0)},
			true, ptr(2), ptr(0), ptr(0), "total false_reclaims 2 > 0"},
		{"above at the threshold holds", Condition{Metric: "longest_wait_s", Target: Target{Tier: "production"}, Above: ptr(950)},
			false, ptr(950), ptr(900), ptr(950), "production tier longest_wait_s 950 s ≤ 950 s"},
		{"below, breached", Condition{Metric: "resume_success_rate", Below: ptr(0.95)},
			true, ptr(0.9), nil, ptr(0.95), "total resume_success_rate 0.9 < 0.95"},
		{"below, held", Condition{Metric: "starving_jobs", Target: Target{Tier: "experiment"}, Below: ptr(1)},
			false, ptr(1), ptr(4), ptr(1), "experiment tier starving_jobs 1 job ≥ 1 job"},
		{"no value now", Condition{Metric: "wait_p95_s", Target: Target{Tier: "standard"}, Above: ptr(10)},
			false, nil, nil, ptr(10), "standard tier wait_p95_s has no value in this window (0 jobs measured); not checked"},
		{"baseline without a value", Condition{Metric: "wait_p95_s", Target: Target{Tier: "experiment"}, AboveBaselineFactor: ptr(1.2)},
			false, ptr(2000), nil, nil, "experiment tier wait_p95_s 2000 s; the baseline has no value, so 1.2 × baseline is undefined; not checked"},
	} {
		s := &Spec{Rollback: []Condition{c.cond}}
		rs := Check(s, base, cur)
		if len(rs) != 1 {
			t.Fatalf("%s: %d results", c.name, len(rs))
		}
		r := rs[0]
		if r.Breached != c.breached || !sameFloat(r.Value, c.value) || !sameFloat(r.Baseline, c.baseline) || !sameFloat(r.Threshold, c.thr) || r.Text != c.text {
			t.Errorf("%s: breached %v value %v baseline %v threshold %v text %q;\n want %v %v %v %v %q", c.name,
				r.Breached, fv(r.Value), fv(r.Baseline), fv(r.Threshold), r.Text, c.breached, fv(c.value), fv(c.baseline), fv(c.thr), c.text)
		}
		if r.Condition.Name != c.cond.Label() || s.Rollback[0].Name != "" {
			t.Errorf("%s: result named %q, want the label %q (and the spec left alone)", c.name, r.Condition.Name, c.cond.Label())
		}
	}
}

func TestCheckEdges(t *testing.T) {
	cur := measurement(Governance{}, tierVals{"production", 5, 100, 50, 0, 0})
	s := &Spec{Rollback: []Condition{
		{Name: "prod p95", Metric: "wait_p95_s", Target: Target{Tier: "production"}, AboveBaselineFactor: ptr(1.2)},
		{Metric: "wait_p96_s", Above: ptr(1)},
		{Metric: "jobs"},
	}}
	rs := Check(s, nil, cur)
	if rs[0].Breached || rs[0].Threshold != nil || rs[0].Condition.Name != "prod p95" || !strings.Contains(rs[0].Text, "baseline has no value") {
		t.Errorf("no baseline: %+v", rs[0])
	}
	if rs[1].Breached || !strings.Contains(rs[1].Text, "unknown metric") {
		t.Errorf("unknown metric: %+v", rs[1])
	}
	if rs[2].Breached || !strings.Contains(rs[2].Text, "no predicate") || rs[2].Condition.Name != "total jobs (no predicate)" {
		t.Errorf("no predicate: %+v", rs[2])
	}
	if rs := Check(s, cur, nil); rs[0].Breached || !strings.Contains(rs[0].Text, "nothing measured") {
		t.Errorf("nothing measured: %+v", rs[0])
	}
	if rs := Check(&Spec{}, cur, cur); rs == nil || len(rs) != 0 {
		t.Errorf("no conditions: %#v, want an empty list", rs)
	}
}

func TestLabel(t *testing.T) {
	for _, c := range []struct {
		c    Condition
		want string
	}{
		{Condition{Metric: "wait_p95_s", Target: Target{Tier: "production"}, AboveBaselineFactor: ptr(1.2)}, "production tier wait_p95_s > 1.2 × baseline"},
		{Condition{Metric: "false_reclaims", Above: ptr(0)}, "total false_reclaims > 0"},
		{Condition{Metric: "resume_success_rate", Below: ptr(0.95)}, "total resume_success_rate < 0.95"},
		{Condition{Metric: "longest_wait_s", Target: Target{Queue: "batch"}, Above: ptr(3600)}, "queue batch longest_wait_s > 3600 s"},
		{Condition{Metric: "recompute_gpu_s", BelowBaselineFactor: ptr(0.5)}, "total recompute_gpu_s < 0.5 × baseline"},
	} {
		if got := c.c.Label(); got != c.want {
			t.Errorf("Label = %q, want %q", got, c.want)
		}
	}
}

// agingSpec is the example: the experiment tier's longest wait down
// 30 %, production's P95 wait not above 1.2 × baseline, no false reclaim.
func agingSpec() *Spec {
	return &Spec{
		Name: "aging-cap", Hypothesis: "a higher aging cap lets experiment jobs through", Candidate: Candidate{Hash: "0123456789abcdef"},
		Scope: Scope{Pools: []string{"p1"}}, WindowSeconds: 3600,
		Expected: Expectation{Metric: "longest_wait_s", Target: Target{Tier: "experiment"}, Direction: Decrease, Change: 0.3},
		Rollback: []Condition{
			{Name: "production p95", Metric: "wait_p95_s", Target: Target{Tier: "production"}, AboveBaselineFactor: ptr(1.2)},
			{Metric: "false_reclaims", Above: ptr(0)},
		},
	}
}

func TestDecide(t *testing.T) {
	base := measurement(Governance{}, tierVals{"production", 20, 900, 300, 0, 0}, tierVals{"experiment", 10, 5400, 4000, 4, 2})
	for _, c := range []struct {
		name     string
		spec     func(*Spec)
		cand     *Measurement
		breaches []ConditionResult
		verdict  vocab.ExperimentVerdict
		reason   string
	}{
		{"kept", nil, measurement(Governance{}, tierVals{"production", 22, 950, 330, 0, 0}, tierVals{"experiment", 9, 3100, 2000, 1, 0}),
			nil, vocab.VerdictKept,
			"experiment tier longest_wait_s 5400 s → 3100 s (−42.6 %), expected a decrease of at least 30 %: met; no rollback condition breached"},
		{"kept at exactly the change", nil, measurement(Governance{}, tierVals{"production", 22, 950, 330, 0, 0}, tierVals{"experiment", 9, 3780, 2000, 1, 0}),
			nil, vocab.VerdictKept,
			"experiment tier longest_wait_s 5400 s → 3780 s (−30.0 %), expected a decrease of at least 30 %: met; no rollback condition breached"},
		{"not met", nil, measurement(Governance{}, tierVals{"production", 22, 950, 330, 0, 0}, tierVals{"experiment", 9, 5000, 2000, 1, 0}),
			nil, vocab.VerdictNotMet,
			"experiment tier longest_wait_s 5400 s → 5000 s (−7.4 %), expected a decrease of at least 30 %: not met; no rollback condition breached"},
		{"not met: moved the wrong way", nil, measurement(Governance{}, tierVals{"production", 22, 950, 330, 0, 0}, tierVals{"experiment", 9, 6000, 2000, 1, 0}),
			nil, vocab.VerdictNotMet,
			"experiment tier longest_wait_s 5400 s → 6000 s (+11.1 %), expected a decrease of at least 30 %: not met; no rollback condition breached"},
		{"rolled back mid-window", nil, measurement(Governance{}, tierVals{"production", 5, 950, 330, 0, 0}, tierVals{"experiment", 2, 3100, 2000, 1, 0}),
			[]ConditionResult{{Condition: Condition{Name: "production p95", Metric: "wait_p95_s", Target: Target{Tier: "production"}, AboveBaselineFactor: ptr(1.2)},
				Value: ptr(412), Baseline: ptr(300), Threshold: ptr(360), Breached: true, Text: "production tier wait_p95_s 412 s > 1.2 × baseline 300 s = 360 s"}},
			vocab.VerdictRolledBack, "production tier wait_p95_s 412 s > 1.2 × baseline 300 s = 360 s"},
		{"rolled back on the full window", nil, measurement(Governance{FalseReclaims: 1}, tierVals{"production", 22, 950, 400, 0, 0}, tierVals{"experiment", 9, 3100, 2000, 1, 0}),
			nil, vocab.VerdictRolledBack,
			"production tier wait_p95_s 400 s > 1.2 × baseline 300 s = 360 s; total false_reclaims 1 > 0"},
		{"inconclusive: too few jobs", nil, measurement(Governance{}, tierVals{"production", 22, 950, 330, 0, 0}, tierVals{"experiment", 3, 100, 50, 0, 0}),
			nil, vocab.VerdictInconclusive,
			"experiment tier had 10 jobs in the baseline window and 3 jobs in the candidate window; a verdict needs at least 5 in each (min_sample)"},
		{"inconclusive: the stated minimum", func(s *Spec) { s.MinSample = 12 }, measurement(Governance{}, tierVals{"production", 22, 950, 330, 0, 0}, tierVals{"experiment", 20, 100, 50, 0, 0}),
			nil, vocab.VerdictInconclusive,
			"experiment tier had 10 jobs in the baseline window and 20 jobs in the candidate window; a verdict needs at least 12 in each (min_sample)"},
		{"inconclusive: no value", func(s *Spec) { s.Expected.Metric = "wait_p95_s" },
			measurement(Governance{}, tierVals{"production", 22, 950, 330, 0, 0}, tierVals{"experiment", 9, 3100, -1, 1, 0}),
			nil, vocab.VerdictInconclusive,
			"experiment tier wait_p95_s has no value in the candidate window (10 jobs before, 9 jobs after, none measured for it); no rollback condition breached"},
		{"increase from 0", func(s *Spec) {
			s.Expected = Expectation{Metric: "jobs_over_objective", Target: Target{Tier: "production"}, Direction: Increase, Change: 0.5}
		},
			measurement(Governance{}, tierVals{"production", 22, 950, 330, 0, 3}, tierVals{"experiment", 9, 3100, 2000, 1, 0}),
			nil, vocab.VerdictKept,
			"production tier jobs_over_objective 0 jobs → 3 jobs (the baseline is 0, so no relative change), expected an increase of at least 50 %: met; no rollback condition breached"},
		{"governance metric", func(s *Spec) { s.Expected = Expectation{Metric: "preemptions", Direction: Decrease, Change: 0.5} },
			measurement(Governance{Preemptions: 1}, tierVals{"production", 22, 950, 330, 0, 0}, tierVals{"experiment", 9, 3100, 2000, 1, 0}),
			nil, vocab.VerdictNotMet,
			"total preemptions 0 → 1 (the baseline is 0, so no relative change), expected a decrease of at least 50 %: not met; no rollback condition breached"},
	} {
		s := agingSpec()
		if c.spec != nil {
			c.spec(s)
		}
		o := Decide(s, base, c.cand, c.breaches)
		if o.Verdict != c.verdict || o.Reason != c.reason {
			t.Errorf("%s: %s, %q\n want %s, %q", c.name, o.Verdict, o.Reason, c.verdict, c.reason)
		}
		if len(o.Checks) != len(s.Rollback) || o.Breaches == nil {
			t.Errorf("%s: %d checks, breaches %v", c.name, len(o.Checks), o.Breaches)
		}
		if o.Verdict != vocab.VerdictRolledBack && len(o.Breaches) > 0 {
			t.Errorf("%s: verdict %s with breaches %v", c.name, o.Verdict, o.Breaches)
		}
	}
}

func TestDecideBreachNotRepeated(t *testing.T) {
	base := measurement(Governance{}, tierVals{"production", 20, 900, 300, 0, 0}, tierVals{"experiment", 10, 5400, 4000, 4, 2})
	cand := measurement(Governance{}, tierVals{"production", 20, 900, 500, 0, 0}, tierVals{"experiment", 10, 3000, 2000, 0, 0})
	s := agingSpec()
	mid := Check(s, base, measurement(Governance{}, tierVals{"production", 8, 900, 400, 0, 0}))[:1]
	o := Decide(s, base, cand, mid)
	if len(o.Breaches) != 1 || o.Breaches[0].Text != "production tier wait_p95_s 400 s > 1.2 × baseline 300 s = 360 s" {
		t.Errorf("breaches %+v: want the mid-window breach once (the full window's breach of the same condition is not added)", o.Breaches)
	}
	if !o.Checks[0].Breached || *o.Checks[0].Value != 500 {
		t.Errorf("full-window check %+v", o.Checks[0])
	}
}

func TestExpectedResult(t *testing.T) {
	base := measurement(Governance{}, tierVals{"experiment", 10, 5400, 4000, 4, 2})
	cand := measurement(Governance{}, tierVals{"experiment", 9, 3100, 2000, 1, 0})
	o := Decide(agingSpec(), base, cand, nil)
	e := o.Expected
	if *e.Before != 5400 || *e.After != 3100 || e.SampleBefore != 10 || e.SampleAfter != 9 || !e.Met ||
		e.Change == nil || *e.Change != (3100.0-5400)/5400 || e.Metric != "longest_wait_s" || e.Tier != "experiment" {
		t.Errorf("expected result %+v", e)
	}
	b, err := json.Marshal(e)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{`"metric":"longest_wait_s"`, `"tier":"experiment"`, `"change":0.3`, `"observed_change":-0.4259`, `"sample_before":10`} {
		if !bytes.Contains(b, []byte(k)) {
			t.Errorf("JSON %s lacks %s", b, k)
		}
	}
}

func TestRows(t *testing.T) {
	base := measurement(Governance{Preemptions: 2}, tierVals{"production", 20, 900, 300, 0, 0}, tierVals{"experiment", 10, 5400, 4000, 4, 2})
	cand := measurement(Governance{Preemptions: 3, Measured: []string{"preemptions"}}, tierVals{"experiment", 9, 3100, 2000, 1, 0}, tierVals{"standard", 1, 10, 10, 0, 0})
	s := agingSpec()
	s.Rollback = append(s.Rollback, Condition{Metric: "wait_p99_s", Target: Target{Tier: "production"}, Above: ptr(1)})
	o := Decide(s, base, cand, nil)
	type key struct{ target, metric string }
	got := map[key]Row{}
	var order []string
	for _, r := range o.Rows {
		k := key{r.Target.label(), r.Metric}
		if _, dup := got[k]; dup {
			t.Errorf("row %v twice", k)
		}
		got[k] = r
		if len(order) == 0 || order[len(order)-1] != k.target {
			order = append(order, k.target)
		}
	}
	if strings.Join(order, ",") != "total,production tier,standard tier,experiment tier,queue batch" {
		t.Errorf("targets in order %v", order)
	}
	for _, target := range []string{"total", "production tier", "standard tier", "experiment tier", "queue batch"} {
		for _, m := range append(slices.Clone(CoreMetrics), "wait_p99_s") {
			if _, ok := got[key{target, m}]; !ok {
				t.Errorf("no row %s %s", target, m)
			}
		}
	}
	for _, d := range governanceMetrics {
		if _, ok := got[key{"total", d.info.Name}]; !ok {
			t.Errorf("no governance row %s", d.info.Name)
		}
		if _, ok := got[key{"experiment tier", d.info.Name}]; ok {
			t.Errorf("governance row %s on a tier", d.info.Name)
		}
	}
	r := got[key{"experiment tier", "longest_wait_s"}]
	if *r.Before != 5400 || *r.After != 3100 || *r.Delta != -2300 || *r.Ratio != 3100.0/5400 {
		t.Errorf("experiment longest wait row %+v", r)
	}
	if r := got[key{"production tier", "wait_p95_s"}]; *r.Before != 300 || r.After != nil || r.Delta != nil || r.Ratio != nil {
		t.Errorf("production p95 (no production job after) %+v", r)
	}
	if r := got[key{"total", "preemptions"}]; *r.Before != 2 || *r.After != 3 || *r.Delta != 1 {
		t.Errorf("preemptions %+v", r)
	}
	if r := got[key{"total", "recompute_gpu_s"}]; *r.Before != 0 || r.After != nil {
		t.Errorf("recompute (not measured after) %+v", r)
	}
}

func sameFloat(a, b *float64) bool {
	if a == nil || b == nil {
		return a == b
	}
	return *a-*b < 1e-9 && *b-*a < 1e-9
}

func TestWriteText(t *testing.T) {
	base := measurement(Governance{}, tierVals{"production", 20, 900, 300, 0, 0}, tierVals{"experiment", 10, 5400, 4000, 4, 2})
	cand := measurement(Governance{FalseReclaims: 1, Measured: []string{"false_reclaims"}},
		tierVals{"production", 22, 950, 412, 0, 0}, tierVals{"experiment", 9, 3100, 2000, 1, 0})
	o := Decide(agingSpec(), base, cand, nil)
	var a, b bytes.Buffer
	if err := o.WriteText(&a); err != nil {
		t.Fatal(err)
	}
	if err := o.WriteText(&b); err != nil || a.String() != b.String() {
		t.Fatalf("two writes differ (%v)", err)
	}
	out := a.String()
	lines := strings.Split(out, "\n")
	for _, want := range []string{
		"verdict:  rolled_back",
		"reason:   production tier wait_p95_s 412 s > 1.2 × baseline 300 s = 360 s; total false_reclaims 1 > 0",
		"expected: experiment tier longest_wait_s, a decrease of at least 30 %: 5400 s → 3100 s (−42.6 %), sample 10 jobs → 9 jobs: met",
		"breaches:",
		"  production p95: production tier wait_p95_s 412 s > 1.2 × baseline 300 s = 360 s",
		"checks (full window):",
		"  CONDITION                 VALUE  BASELINE  THRESHOLD  BREACHED",
		"  production p95            412 s  300 s     360 s      yes",
		"  total false_reclaims > 0  1      0         0          yes",
		"comparison (before: baseline, after: candidate):",
		"  TARGET           METRIC                    UNIT   BEFORE  AFTER  DELTA  RATIO",
		"  total            longest_wait_s            s      5400    3100   -2300  0.574",
		"  total            recompute_gpu_s           GPU-s  0       -      -      -",
		"  total            false_reclaims            count  0       1      1      -",
		"  production tier  wait_p95_s                s      300     412    112    1.37",
		"  experiment tier  longest_wait_s            s      5400    3100   -2300  0.574",
		"  queue batch      jobs                      jobs   30      31     1      1.03",
	} {
		if !slices.Contains(lines, want) {
			t.Errorf("no line %q in\n%s", want, out)
		}
	}

	kept := Decide(agingSpec(), base, measurement(Governance{}, tierVals{"production", 22, 950, 330, 0, 0}, tierVals{"experiment", 9, 3100, 2000, 1, 0}), nil)
	var k bytes.Buffer
	if err := kept.WriteText(&k); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(k.String(), "breaches:") || !strings.HasPrefix(k.String(), "verdict:  kept\n") ||
		!strings.Contains(k.String(), "  production p95            330 s  300 s     360 s      no\n") {
		t.Errorf("kept:\n%s", k.String())
	}
	none := Decide(&Spec{Expected: Expectation{Metric: "jobs", Direction: Increase, Change: 1}}, base, base, nil)
	var n bytes.Buffer
	if err := none.WriteText(&n); err != nil || !strings.Contains(n.String(), "checks (full window):\n  no rollback condition\n") {
		t.Errorf("no conditions (%v):\n%s", err, n.String())
	}
}

type failWriter struct{}

func (failWriter) Write([]byte) (int, error) { return 0, errors.New("disk full") }

func TestWriteTextError(t *testing.T) {
	base := measurement(Governance{}, tierVals{"experiment", 10, 5400, 4000, 4, 2})
	o := Decide(agingSpec(), base, base, nil)
	if err := o.WriteText(failWriter{}); err == nil || !strings.Contains(err.Error(), "disk full") {
		t.Errorf("write error: %v", err)
	}
}
