package experiment

import (
	"fmt"
	"math"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/gpugov/gpugov/internal/policy"
	"github.com/gpugov/gpugov/internal/vocab"
)

const cycle = 5 * time.Second

func validSpec() *Spec {
	s := agingSpec()
	s.Scope.Queues = []string{"batch", "prod"}
	s.Rollback = append(s.Rollback,
		Condition{Metric: "resume_success_rate", Below: ptr(0.95)},
		Condition{Metric: "longest_wait_s", Target: Target{Queue: "batch"}, BelowBaselineFactor: ptr(0.1)},
	)
	return s
}

func TestValidateAccepts(t *testing.T) {
	for name, mutate := range map[string]func(*Spec){
		"the example":          func(*Spec) {},
		"policy text":          func(s *Spec) { s.Candidate = Candidate{Policy: "version: gpugov.policy/v1\n"} },
		"one cycle":            func(s *Spec) { s.WindowSeconds = 5 },
		"30 days":              func(s *Spec) { s.WindowSeconds = 30 * 86400 },
		"check every cycle":    func(s *Spec) { s.CheckIntervalSeconds = 5 },
		"check once":           func(s *Spec) { s.CheckIntervalSeconds = 3600 },
		"stated baseline":      func(s *Spec) { s.Baseline = BaselineWindow{From: atp(-7200), To: atp(-3600)}; s.Start = atp(0) },
		"baseline up to start": func(s *Spec) { s.Baseline = BaselineWindow{From: atp(-7200), To: atp(0)}; s.Start = atp(0) },
		"no rollback":          func(s *Spec) { s.Rollback = nil },
		"an increase ×10":      func(s *Spec) { s.Expected.Direction, s.Expected.Change = Increase, 10 },
		"a decrease to 0":      func(s *Spec) { s.Expected.Change = 1 },
		"total, governance":    func(s *Spec) { s.Expected = Expectation{Metric: "recompute_gpu_s", Direction: Decrease, Change: 0.2} },
		"queue target":         func(s *Spec) { s.Expected.Target = Target{Queue: "batch"} },
		"any queue, no watch":  func(s *Spec) { s.Scope.Queues = nil; s.Expected.Target = Target{Queue: "other"} },
		"wait reason metric":   func(s *Spec) { s.Expected.Metric = "wait_reason_seconds.quota_exhausted" },
		"override":             func(s *Spec) { s.Override = &Override{Reason: "aging and quota move together here"} },
		"min sample":           func(s *Spec) { s.MinSample = 50 },
		"a long pool name":     func(s *Spec) { s.Scope.Pools = []string{"A100_east.zone-1", strings.Repeat("p", 253)} },
		"a 63-byte name":       func(s *Spec) { s.Name = strings.Repeat("a", 62) + "1" },
		"no cycle known":       func(s *Spec) { s.WindowSeconds, s.CheckIntervalSeconds = 1, 0.5 },
	} {
		s := validSpec()
		mutate(s)
		c := cycle
		if name == "no cycle known" {
			c = 0
		}
		if errs := s.Validate(c); errs != nil {
			t.Errorf("%s: %v", name, errs)
		}
	}
}

func TestValidateRefuses(t *testing.T) {
	for _, c := range []struct {
		mutate func(*Spec)
		field  string
		msg    string
	}{
		{func(s *Spec) { s.Name = "" }, "name", "is required"},
		{func(s *Spec) { s.Name = "Aging Cap" }, "name", "not a slug"},
		{func(s *Spec) { s.Name = "aging-" }, "name", "not a slug"},
		{func(s *Spec) { s.Name = strings.Repeat("a", 64) }, "name", "1-63"},
		{func(s *Spec) { s.Hypothesis = "  " }, "hypothesis", "is required"},
		{func(s *Spec) { s.Hypothesis = strings.Repeat("h", MaxHypothesisLength+1) }, "hypothesis", "at most 4096"},
		{func(s *Spec) { s.Candidate = Candidate{} }, "candidate", "set one of hash"},
		{func(s *Spec) { s.Candidate.Policy = "version: gpugov.policy/v1" }, "candidate", "sets hash and policy; set exactly one"},
		{func(s *Spec) { s.Candidate = Candidate{Hash: "XYZ"} }, "candidate.hash", "8 to 64 lower-case hex"},
		{func(s *Spec) { s.Candidate = Candidate{Hash: strings.Repeat("a", 65)} }, "candidate.hash", "not a policy version hash"},
		{func(s *Spec) { s.Candidate = Candidate{Policy: " \n"} }, "candidate.policy", "is blank"},
		{func(s *Spec) { s.Candidate = Candidate{Policy: strings.Repeat("x", MaxPolicyLength+1)} }, "candidate.policy", "at most"},
		{func(s *Spec) { s.Candidate = Candidate{File: "cand.yaml"} }, "candidate.file", "read by the CLI"},
		{func(s *Spec) { s.Scope.Pools = nil }, "scope.pools", "is required"},
		{func(s *Spec) { s.Scope.Pools = []string{"p1", "-p2"} }, "scope.pools[1]", "not a pool name"},
		{func(s *Spec) { s.Scope.Pools = []string{"p1", "a b"} }, "scope.pools[1]", "not a pool name"},
		{func(s *Spec) { s.Scope.Pools = []string{strings.Repeat("p", 254)} }, "scope.pools[0]", "not a pool name"},
		{func(s *Spec) { s.Scope.Pools = []string{"p1", "p1"} }, "scope.pools[1]", "repeats scope.pools[0]"},
		{func(s *Spec) { s.Scope.Pools = make([]string, MaxScopeNames+1) }, "scope.pools", "at most 256"},
		{func(s *Spec) { s.Scope.Queues = []string{"batch", ""} }, "scope.queues[1]", "is empty"},
		{func(s *Spec) { s.Scope.Queues = []string{"batch", "prod", "batch"} }, "scope.queues[2]", "repeats scope.queues[0]"},
		{func(s *Spec) { s.Scope.Queues = []string{"batch", strings.Repeat("q", 254)} }, "scope.queues[1]", "at most 253"},
		{func(s *Spec) { s.Start = &time.Time{} }, "start", "zero time"},
		{func(s *Spec) { s.WindowSeconds = 0 }, "window_s", "is required"},
		{func(s *Spec) { s.WindowSeconds = -60 }, "window_s", "more than 0"},
		{func(s *Spec) { s.WindowSeconds = math.NaN() }, "window_s", "finite"},
		{func(s *Spec) { s.WindowSeconds = 4.5 }, "window_s", "shorter than one scheduling cycle (5 s)"},
		{func(s *Spec) { s.WindowSeconds = 30*86400 + 1 }, "window_s", "2592001 s is longer than 2592000 s (30 days)"},
		{func(s *Spec) { s.CheckIntervalSeconds = -1 }, "check_interval_s", "negative"},
		{func(s *Spec) { s.CheckIntervalSeconds = 2 }, "check_interval_s", "shorter than one scheduling cycle"},
		{func(s *Spec) { s.CheckIntervalSeconds = 3601 }, "check_interval_s", "longer than the window"},
		{func(s *Spec) { s.CheckIntervalSeconds = math.Inf(1) }, "check_interval_s", "finite"},
		{func(s *Spec) { s.Baseline.From = atp(-3600) }, "baseline.to", "required with baseline.from"},
		{func(s *Spec) { s.Baseline.To = atp(-3600) }, "baseline.from", "required with baseline.to"},
		{func(s *Spec) { s.Baseline = BaselineWindow{From: atp(0), To: atp(0)} }, "baseline.to", "not after baseline.from"},
		{func(s *Spec) { s.Baseline = BaselineWindow{From: atp(0), To: atp(-10)} }, "baseline.to", "not after baseline.from"},
		{func(s *Spec) { s.Baseline = BaselineWindow{From: atp(-100), To: atp(10)}; s.Start = atp(0) }, "baseline.to", "after start"},
		{func(s *Spec) { s.Expected.Metric = "" }, "expected.metric", "is required"},
		{func(s *Spec) { s.Expected.Metric = "wait_p96_s" }, "expected.metric", `unknown metric "wait_p96_s": did you mean wait_p95_s?`},
		{func(s *Spec) { s.Expected.Metric = "utilisation" }, "expected.metric", "want one of jobs, submitted"},
		{func(s *Spec) { s.Expected.Direction = "" }, "expected.direction", "is required"},
		{func(s *Spec) { s.Expected.Direction = "down" }, "expected.direction", `"down" is not decrease or increase`},
		{func(s *Spec) { s.Expected.Change = 0 }, "expected.change", "outside (0, 10]"},
		{func(s *Spec) { s.Expected.Change = -0.3 }, "expected.change", "outside (0, 10]"},
		{func(s *Spec) { s.Expected.Direction, s.Expected.Change = Increase, 10.5 }, "expected.change", "outside (0, 10]"},
		{func(s *Spec) { s.Expected.Change = math.NaN() }, "expected.change", "finite"},
		{func(s *Spec) { s.Expected.Change = 1.5 }, "expected.change", "cannot be met"},
		{func(s *Spec) { s.Expected.Tier = "gold" }, "expected.tier", `unknown tier "gold"`},
		{func(s *Spec) { s.Expected.Queue = "batch" }, "expected.queue", "is set with tier"},
		{func(s *Spec) { s.Expected.Target = Target{Queue: "other"} }, "expected.queue", `queue "other" is not watched: scope.queues lists batch, prod`},
		{func(s *Spec) { s.Expected.Target = Target{Queue: " "} }, "expected.queue", "is blank"},
		{func(s *Spec) { s.Expected.Metric = "preemptions" }, "expected.tier", "read on the scope's total only"},
		{func(s *Spec) {
			s.Expected = Expectation{Metric: "cancel_rate", Target: Target{Queue: "batch"}, Direction: Decrease, Change: 0.1}
		},
			"expected.queue", "governance metric cancel_rate is read on the scope's total only"},
		{func(s *Spec) { s.Rollback[2].Metric = "" }, "rollback[2].metric", "is required"},
		{func(s *Spec) { s.Rollback[2].Metric = "resume_rate" }, "rollback[2].metric", "unknown metric"},
		{func(s *Spec) { s.Rollback[0].Tier = "prod" }, "rollback[0].tier", `unknown tier "prod"`},
		{func(s *Spec) { s.Rollback[3].Queue = "nope" }, "rollback[3].queue", "not watched"},
		{func(s *Spec) { s.Rollback[2].Tier = "production" }, "rollback[2].tier", "total only"},
		{func(s *Spec) { s.Rollback[1].Above = nil }, "rollback[1]", "has no predicate"},
		{func(s *Spec) { s.Rollback[2].AboveBaselineFactor = ptr(2) }, "rollback[2]", "sets below and above_baseline_factor"},
		{func(s *Spec) { s.Rollback[0].AboveBaselineFactor = ptr(0) }, "rollback[0].above_baseline_factor", "want a factor > 0"},
		{func(s *Spec) { s.Rollback[3].BelowBaselineFactor = ptr(-1) }, "rollback[3].below_baseline_factor", "want a factor > 0"},
		{func(s *Spec) { s.Rollback[1].Above = ptr(math.Inf(1)) }, "rollback[1].above", "finite"},
		{func(s *Spec) { s.Rollback[1].Name = strings.Repeat("n", 201) }, "rollback[1].name", "at most 200"},
		{func(s *Spec) { s.Rollback = make([]Condition, MaxConditions+1) }, "rollback", "at most 32"},
		{func(s *Spec) { s.MinSample = -1 }, "min_sample", "negative"},
		{func(s *Spec) { s.Override = &Override{} }, "override.reason", "is required"},
	} {
		s := validSpec()
		c.mutate(s)
		errs := s.Validate(cycle)
		found := false
		for _, e := range errs {
			if e.Field == c.field && strings.Contains(e.Message, c.msg) {
				found = true
			}
		}
		if !found {
			t.Errorf("want %s: …%s…; got %v", c.field, c.msg, errs)
		}
	}
}

func TestValidateEveryProblem(t *testing.T) {
	s := &Spec{Rollback: []Condition{{Metric: "x", Above: ptr(1), Below: ptr(2)}}, MinSample: -2}
	var fields []string
	for _, e := range s.Validate(cycle) {
		fields = append(fields, e.Field)
	}
	want := "name hypothesis candidate scope.pools window_s expected.metric expected.direction expected.change rollback[0].metric rollback[0] min_sample"
	if strings.Join(fields, " ") != want {
		t.Errorf("fields %v\n want %s", fields, want)
	}
	if e := (FieldError{Field: "rollback[2].above_baseline_factor", Message: "-1, want a factor > 0 of the baseline's value"}); e.Error() != "rollback[2].above_baseline_factor: -1, want a factor > 0 of the baseline's value" {
		t.Errorf("FieldError renders %q", e.Error())
	}
}

func TestOneVariableRule(t *testing.T) {
	s := validSpec()
	if fe := oneVariable(s, []vocab.PolicyGroup{vocab.PolicyAging}); fe != nil {
		t.Errorf("one group: %v", fe)
	}
	fe := oneVariable(s, []vocab.PolicyGroup{vocab.PolicyAging, vocab.PolicyQuota})
	want := "candidate differs from the baseline in 2 variable groups (aging, quota); an experiment changes one, or an admin passes override.reason"
	if fe == nil || fe.Field != "candidate" || fe.Message != want {
		t.Errorf("two groups: %v, want candidate: %s", fe, want)
	}
	if fe := oneVariable(s, nil); fe == nil || fe.Field != "candidate" || !strings.Contains(fe.Message, "same as the baseline") {
		t.Errorf("no group: %v", fe)
	}
	s.Override = &Override{Reason: "the quota change needs the aging change"}
	if fe := oneVariable(s, []vocab.PolicyGroup{vocab.PolicyAging, vocab.PolicyQuota, vocab.PolicyReclaim}); fe != nil {
		t.Errorf("three groups with an override: %v", fe)
	}
	if fe := oneVariable(s, []vocab.PolicyGroup{}); fe == nil {
		t.Error("no group with an override: accepted")
	}
}

func TestCheckInterval(t *testing.T) {
	s := validSpec()
	for _, c := range []struct {
		window, check float64
		want          time.Duration
	}{
		{3600, 0, 300 * time.Second},
		{3600, 60, 60 * time.Second},
		{30, 0, 5 * time.Second}, // 2.5 s is under a cycle
		{5, 0, 5 * time.Second},
	} {
		s.WindowSeconds, s.CheckIntervalSeconds = c.window, c.check
		if got := s.CheckInterval(cycle); got != c.want {
			t.Errorf("window %v check %v: %v, want %v", c.window, c.check, got, c.want)
		}
	}
	s.WindowSeconds = 3600
	if w := s.BaselineWindow(at(0)); !w.From.Equal(at(-3600)) || !w.To.Equal(at(0)) {
		t.Errorf("default baseline %v", w)
	}
	s.Baseline = BaselineWindow{From: atp(-86400), To: atp(-82800)}
	if w := s.BaselineWindow(at(0)); !w.From.Equal(at(-86400)) || !w.To.Equal(at(-82800)) {
		t.Errorf("stated baseline %v", w)
	}
	if w := s.ObservationWindow(at(0)); !w.From.Equal(at(0)) || !w.To.Equal(at(3600)) {
		t.Errorf("observation %v", w)
	}
	if s.EffectiveMinSample() != DefaultMinSample {
		t.Error(s.EffectiveMinSample())
	}
	s.MinSample = 3
	if s.EffectiveMinSample() != 3 {
		t.Error(s.EffectiveMinSample())
	}
}

func TestMetricsCatalogue(t *testing.T) {
	ms := Metrics()
	seen := map[string]bool{}
	var gov []string
	for _, m := range ms {
		if seen[m.Name] || m.Unit == "" || m.Description == "" {
			t.Errorf("metric %+v (repeated %v)", m, seen[m.Name])
		}
		seen[m.Name] = true
		if m.Governance {
			gov = append(gov, m.Name)
		}
	}
	for _, name := range append([]string{"wait_p95_s", "longest_wait_s", "starving_jobs", "wait_reason_seconds.capacity_busy"}, CoreMetrics...) {
		if mi, ok := LookupMetric(name); !ok || mi.Governance {
			t.Errorf("%s: %+v, %v", name, mi, ok)
		}
	}
	// The governance metrics are Governance's JSON fields, in order.
	want := govJSONNames(t)
	if fmt.Sprint(gov) != fmt.Sprint(want) {
		t.Errorf("governance metrics %v\n want Governance's fields %v", gov, want)
	}
	ms[0].Name = "changed"
	if Metrics()[0].Name == "changed" {
		t.Error("Metrics shares its slice")
	}
}

// govJSONNames lists Governance's JSON field names but measured.
func govJSONNames(t *testing.T) []string {
	t.Helper()
	var out []string
	typ := reflect.TypeOf(Governance{})
	for i := range typ.NumField() {
		name, _, _ := strings.Cut(typ.Field(i).Tag.Get("json"), ",")
		if name != "measured" {
			out = append(out, name)
		}
	}
	return out
}

func TestCheckOneVariable(t *testing.T) {
	base, err := policy.Load(filepath.Join("..", "..", "deploy", "gpugov", "policy.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	aging := *base
	aging.Aging.CapPoints += 1000
	groups, fe := CheckOneVariable(validSpec(), base, &aging)
	if fe != nil || fmt.Sprint(groups) != "[aging]" {
		t.Errorf("aging only: %v, %v", groups, fe)
	}
	both := aging
	both.FairShare.Weight += 1
	groups, fe = CheckOneVariable(validSpec(), base, &both)
	want := "candidate differs from the baseline in 2 variable groups (aging, fair_share); an experiment changes one, or an admin passes override.reason"
	if fmt.Sprint(groups) != "[aging fair_share]" || fe == nil || fe.Field != "candidate" || fe.Message != want {
		t.Errorf("aging and fair share: %v, %v", groups, fe)
	}
	s := validSpec()
	s.Override = &Override{Reason: "the weight compensates the cap"}
	if groups, fe = CheckOneVariable(s, base, &both); fe != nil || len(groups) != 2 {
		t.Errorf("with an override: %v, %v", groups, fe)
	}
	if groups, fe = CheckOneVariable(validSpec(), base, base); fe == nil || len(groups) != 0 {
		t.Errorf("the baseline itself: %v, %v", groups, fe)
	}
}
