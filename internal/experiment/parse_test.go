package experiment

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpugov/gpugov/internal/queuereport/reporttest"
)

const exampleSpec = `name: aging-cap
hypothesis: >
  Raising the experiment queue's aging cap lets its jobs past the standard
  stream without hurting production.
candidate:
  hash: 0123456789abcdef
scope:
  pools: [a100]
  queues: [experiment, inference]
start: 2026-03-02T12:00:00Z
window_s: 7200
check_interval_s: 600
expected:
  metric: longest_wait_s
  tier: experiment
  direction: decrease
  change: 0.3
rollback:
  - name: production p95
    metric: wait_p95_s
    tier: production
    above_baseline_factor: 1.2
  - metric: false_reclaims
    above: 0
  - metric: starving_jobs
    tier: experiment
    above: 10
min_sample: 8
`

func TestParseSpecExample(t *testing.T) {
	s, err := ParseSpec("exp.yaml", []byte(exampleSpec))
	if err != nil {
		t.Fatal(err)
	}
	if s.Name != "aging-cap" || !strings.HasPrefix(s.Hypothesis, "Raising") || s.Candidate.Hash != "0123456789abcdef" ||
		strings.Join(s.Scope.Pools, ",") != "a100" || strings.Join(s.Scope.Queues, ",") != "experiment,inference" ||
		s.Start == nil || !s.Start.Equal(at(12*3600)) || s.WindowSeconds != 7200 || s.CheckIntervalSeconds != 600 ||
		s.Expected != (Expectation{Metric: "longest_wait_s", Target: Target{Tier: "experiment"}, Direction: Decrease, Change: 0.3}) ||
		len(s.Rollback) != 3 || s.Rollback[0].Name != "production p95" || *s.Rollback[0].AboveBaselineFactor != 1.2 ||
		*s.Rollback[1].Above != 0 || s.Rollback[2].Tier != "experiment" || s.MinSample != 8 {
		t.Errorf("parsed %+v", s)
	}
	if errs := s.Validate(cycle); errs != nil {
		t.Errorf("the example does not validate: %v", errs)
	}
}

// TestParseSpecJSONNames checks that the YAML names are the JSON names: a
// spec with every field set, written as JSON (which is YAML), parses back
// to itself.
func TestParseSpecJSONNames(t *testing.T) {
	s := validSpec()
	s.Start = atp(7200)
	s.Baseline = BaselineWindow{From: atp(-7200), To: atp(-3600)}
	s.CheckIntervalSeconds, s.MinSample = 600, 7
	s.Override = &Override{Reason: "both"}
	s.Rollback = append(s.Rollback, Condition{Name: "n", Metric: "jobs", Target: Target{Queue: "prod"}, Below: ptr(3)})
	b, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	back, err := ParseSpec("spec.json", b)
	if err != nil {
		t.Fatalf("%s\n%v", b, err)
	}
	if d := reporttest.DiffReports(t, s, back); len(d) > 0 {
		t.Errorf("JSON → ParseSpec differs: %v", d)
	}
	var viaJSON Spec
	if err := json.Unmarshal(b, &viaJSON); err != nil {
		t.Fatal(err)
	}
	if d := reporttest.DiffReports(t, &viaJSON, back); len(d) > 0 {
		t.Errorf("ParseSpec and encoding/json disagree: %v", d)
	}
}

func TestParseSpecProblems(t *testing.T) {
	for _, c := range []struct {
		name, old, new, want string
	}{
		{"unknown field", "min_sample: 8", "min_samples: 8",
			"exp.yaml:28: min_samples: unknown field (want one of baseline, candidate, check_interval_s, expected, hypothesis, min_sample, name, override, rollback, scope, start, window_s)"},
		{"unknown nested field", "    above_baseline_factor: 1.2", "    above_factor: 1.2",
			"exp.yaml:22: rollback[0].above_factor: unknown field (want one of above, above_baseline_factor, below, below_baseline_factor, metric, name, queue, tier)"},
		{"a factor of 0", "    above_baseline_factor: 1.2", "    above_baseline_factor: 0",
			"exp.yaml:22: rollback[0].above_baseline_factor: 0, want a factor > 0 of the baseline's value"},
		{"two predicates", "    above: 0", "    above: 0\n    below: 5",
			"exp.yaml:23: rollback[1]: sets above and below: set exactly one predicate (a second condition holds another)"},
		{"no predicate", "    above: 10\n", "",
			"exp.yaml:25: rollback[2]: has no predicate: set exactly one of above, below, above_baseline_factor or below_baseline_factor"},
		{"a string for a number", "window_s: 7200", "window_s: 2h",
			`exp.yaml:11: window_s: want a number, got "2h"`},
		{"a fraction for a count", "min_sample: 8", "min_sample: 8.5",
			`exp.yaml:28: min_sample: want a whole number, got "8.5"`},
		{"a bad time", "start: 2026-03-02T12:00:00Z", "start: tomorrow",
			`exp.yaml:10: start: want an RFC 3339 time (2026-01-02T15:04:05Z), got "tomorrow"`},
		{"a list wanted", "  pools: [a100]", "  pools: a100",
			`exp.yaml:8: scope.pools: want a list of names, got "a100"`},
		{"a bad pool", "  pools: [a100]", `  pools: [a100, "a 100"]`,
			`exp.yaml:8: scope.pools[1]: "a 100" is not a pool name: 1-253 letters, digits, '.', '_' or '-' starting with a letter or digit`},
		{"unknown metric", "  metric: longest_wait_s", "  metric: longest_wait",
			`exp.yaml:14: expected.metric: unknown metric "longest_wait": did you mean longest_wait_s?`},
		{"unknown tier", "  tier: experiment\n  direction", "  tier: best-effort\n  direction",
			`exp.yaml:15: expected.tier: unknown tier "best-effort"`},
		{"repeated key", "window_s: 7200", "window_s: 7200\nwindow_s: 60",
			"exp.yaml:12: window_s: repeats an earlier key"},
		{"missing field: its mapping's line", "  direction: decrease\n", "",
			"exp.yaml:13: expected.direction: is required: decrease or increase"},
		{"missing top-level field: line 1", "window_s: 7200\n", "",
			"exp.yaml:1: window_s: is required"},
		{"candidate both ways", "  hash: 0123456789abcdef", "  hash: 0123456789abcdef\n  file: cand.yaml",
			"exp.yaml:5: candidate: sets hash and file; set exactly one"},
		{"override without a reason", "min_sample: 8", "min_sample: 8\noverride: {}",
			"exp.yaml:29: override.reason: is required"},
		{"not a mapping", "", "- a list\n", "exp.yaml:1: want a mapping, got a list"},
		// The unclosed [ is on line 8 (yaml.v3 itself says line 7: yamlnode.Syntax).
		{"syntax", "scope:\n", "scope:\n   - [\n", "exp.yaml:8: yaml: line 8: did not find expected ',' or ']'"},
	} {
		data := exampleSpec
		switch {
		case c.old == "":
			data = c.new
		case !strings.Contains(data, c.old):
			t.Fatalf("%s: %q is not in the example", c.name, c.old)
		default:
			data = strings.Replace(data, c.old, c.new, 1)
		}
		_, err := ParseSpec("exp.yaml", []byte(data))
		var se *SpecError
		if !errors.As(err, &se) {
			t.Errorf("%s: error %v, want a *SpecError", c.name, err)
			continue
		}
		if !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s:\n%v\n want %s", c.name, err, c.want)
		}
	}
	if _, err := ParseSpec("empty.yaml", nil); err == nil || !strings.HasPrefix(err.Error(), "empty.yaml:1: the file is empty") {
		t.Errorf("empty file: %v", err)
	}
}

func TestParseSpecOrdersProblems(t *testing.T) {
	data := strings.Replace(strings.Replace(exampleSpec, "name: aging-cap", "name: Aging", 1), "min_sample: 8", "min_sample: -1", 1)
	data = strings.Replace(data, "  change: 0.3", "  change: 0", 1)
	_, err := ParseSpec("exp.yaml", []byte(data))
	want := "exp.yaml:1: name: \"Aging\" is not a slug: 1-63 lower-case letters, digits or '-', starting and ending with a letter or digit\n" +
		"exp.yaml:17: expected.change: 0 is outside (0, 10]: the change is a fraction of the baseline (0.3 = 30 %)\n" +
		"exp.yaml:28: min_sample: -1 is negative; 0 means the default 5"
	if err == nil || err.Error() != want {
		t.Errorf("got\n%v\nwant\n%s", err, want)
	}
}

func TestParseSpecFile(t *testing.T) {
	dir := t.TempDir()
	pol, err := os.ReadFile(filepath.Join("..", "..", "deploy", "gpugov", "policy.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "cand.yaml"), pol, 0o600); err != nil {
		t.Fatal(err)
	}
	spec := strings.Replace(exampleSpec, "  hash: 0123456789abcdef", "  file: cand.yaml", 1)
	path := filepath.Join(dir, "exp.yaml")
	if err := os.WriteFile(path, []byte(spec), 0o600); err != nil {
		t.Fatal(err)
	}
	s, err := ParseSpecFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if s.Candidate.File != "" || s.Candidate.Policy != string(pol) || s.Candidate.Hash != "" {
		t.Errorf("candidate %+v: want the file's text as policy", s.Candidate)
	}
	if errs := s.Validate(cycle); errs != nil {
		t.Errorf("resolved spec: %v", errs)
	}

	for _, c := range []struct{ name, file, body, want string }{
		{"missing", "nope.yaml", "", "exp.yaml:6: candidate.file: cannot read the policy"},
		{"does not load", "bad.yaml", "version: gpugov.policy/v1\naging:\n  cap: 3\n", "exp.yaml:6: candidate.file: the policy does not load:\n"},
	} {
		if c.body != "" {
			if err := os.WriteFile(filepath.Join(dir, c.file), []byte(c.body), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		spec := strings.Replace(exampleSpec, "  hash: 0123456789abcdef", "  file: "+c.file, 1)
		if err := os.WriteFile(path, []byte(spec), 0o600); err != nil {
			t.Fatal(err)
		}
		_, err := ParseSpecFile(path)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %s", c.name, err, c.want)
		}
	}
	if _, err := ParseSpecFile(filepath.Join(dir, "absent.yaml")); err == nil || !errors.Is(err, os.ErrNotExist) {
		t.Errorf("absent spec: %v", err)
	}
}
