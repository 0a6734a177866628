package experiment

import (
	"fmt"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gpugov/gpugov/internal/vocab"
)

// Limits of a spec.
const (
	// MaxNameLength is the longest experiment name, in bytes (a DNS label).
	MaxNameLength = 63
	// MaxHypothesisLength is the longest hypothesis, in bytes.
	MaxHypothesisLength = 4096
	// MaxPolicyLength is the longest candidate policy text, in bytes.
	MaxPolicyLength = 1 << 20
	// MaxScopeNames is the most pools, and the most queues, a scope lists.
	MaxScopeNames = 256
	// MaxConditions is the most rollback conditions a spec has.
	MaxConditions = 32
	// MaxConditionNameLength is the longest condition name, in bytes.
	MaxConditionNameLength = 200
	// MaxWindow is the longest observation window.
	MaxWindow = 30 * 24 * time.Hour
	// MaxChange is the largest expected change, as a fraction of the
	// baseline (10 = a tenfold change).
	MaxChange = 10
)

var (
	// slugPattern is an experiment name: a DNS label.
	slugPattern = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]*[a-z0-9])?$`)
	// poolPattern is a pool name, as a job's pool (api.JobSpec) must be.
	poolPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,252}$`)
	// hashPattern is a policy version's hash or a prefix of it of at least 8 digits.
	hashPattern = regexp.MustCompile(`^[0-9a-f]{8,64}$`)
)

// problems collects FieldErrors.
type problems []FieldError

func (p *problems) add(field, format string, args ...any) {
	*p = append(*p, FieldError{Field: field, Message: fmt.Sprintf(format, args...)})
}

// validate is Validate; allowFile accepts candidate.file (a spec file the
// CLI has not resolved yet, for ParseSpec).
func (s *Spec) validate(cycleInterval time.Duration, allowFile bool) []FieldError {
	var p problems
	switch {
	case s.Name == "":
		p.add("name", "is required")
	case len(s.Name) > MaxNameLength || !slugPattern.MatchString(s.Name):
		p.add("name", "%q is not a slug: 1-%d lower-case letters, digits or '-', starting and ending with a letter or digit", s.Name, MaxNameLength)
	}
	switch {
	case strings.TrimSpace(s.Hypothesis) == "":
		p.add("hypothesis", "is required: say what the candidate should change and why")
	case len(s.Hypothesis) > MaxHypothesisLength:
		p.add("hypothesis", "%d bytes, at most %d allowed", len(s.Hypothesis), MaxHypothesisLength)
	}
	s.validateCandidate(&p, allowFile)
	watched := s.validateScope(&p)
	if s.Start != nil && s.Start.IsZero() {
		p.add("start", "is the zero time; leave it out to start now")
	}
	s.validateWindows(&p, cycleInterval)
	s.validateExpected(&p, watched)
	switch {
	case len(s.Rollback) > MaxConditions:
		p.add("rollback", "%d conditions, at most %d allowed", len(s.Rollback), MaxConditions)
	default:
		for i := range s.Rollback {
			s.Rollback[i].validate(&p, fmt.Sprintf("rollback[%d]", i), watched)
		}
	}
	if s.MinSample < 0 {
		p.add("min_sample", "%d is negative; 0 means the default %d", s.MinSample, DefaultMinSample)
	}
	if s.Override != nil && strings.TrimSpace(s.Override.Reason) == "" {
		p.add("override.reason", "is required: an override of the one-variable rule is audited with its reason")
	}
	if len(p) == 0 {
		return nil
	}
	return p
}

func (s *Spec) validateCandidate(p *problems, allowFile bool) {
	c := s.Candidate
	var set []string
	for _, f := range []struct {
		name string
		on   bool
	}{{"hash", c.Hash != ""}, {"policy", c.Policy != ""}, {"file", c.File != ""}} {
		if f.on {
			set = append(set, f.name)
		}
	}
	switch {
	case len(set) == 0 && allowFile:
		p.add("candidate", "set one of hash (a stored policy version), policy (the policy text) or file (a policy file)")
		return
	case len(set) == 0:
		p.add("candidate", "set one of hash (a stored policy version) or policy (the policy text)")
		return
	case len(set) > 1:
		p.add("candidate", "sets %s; set exactly one", strings.Join(set, " and "))
		return
	}
	switch {
	case c.Hash != "" && !hashPattern.MatchString(c.Hash):
		p.add("candidate.hash", "%q is not a policy version hash: 8 to 64 lower-case hex digits (a unique prefix of the SHA-256)", c.Hash)
	case c.Policy != "" && strings.TrimSpace(c.Policy) == "":
		p.add("candidate.policy", "is blank")
	case len(c.Policy) > MaxPolicyLength:
		p.add("candidate.policy", "%d bytes, at most %d allowed", len(c.Policy), MaxPolicyLength)
	case c.File != "" && !allowFile:
		p.add("candidate.file", "is read by the CLI (gpugov experiment create -f): send the policy's text as candidate.policy")
	}
}

// validateScope checks the scope and returns the watched queues (nil: all).
func (s *Spec) validateScope(p *problems) []string {
	sc := s.Scope
	switch {
	case len(sc.Pools) == 0:
		p.add("scope.pools", "is required: name the pools the experiment applies to")
	case len(sc.Pools) > MaxScopeNames:
		p.add("scope.pools", "%d pools, at most %d allowed", len(sc.Pools), MaxScopeNames)
	default:
		for i, pool := range sc.Pools {
			at := fmt.Sprintf("scope.pools[%d]", i)
			switch {
			case !poolPattern.MatchString(pool):
				p.add(at, "%q is not a pool name: 1-253 letters, digits, '.', '_' or '-' starting with a letter or digit", pool)
			case slices.Index(sc.Pools, pool) < i:
				p.add(at, "%q repeats scope.pools[%d]", pool, slices.Index(sc.Pools, pool))
			}
		}
	}
	if len(sc.Queues) > MaxScopeNames {
		p.add("scope.queues", "%d queues, at most %d allowed", len(sc.Queues), MaxScopeNames)
		return nil
	}
	for i, q := range sc.Queues {
		at := fmt.Sprintf("scope.queues[%d]", i)
		switch {
		case strings.TrimSpace(q) == "":
			p.add(at, "is empty")
		case len(q) > 253:
			p.add(at, "queue name of %d bytes, at most 253 allowed", len(q))
		case slices.Index(sc.Queues, q) < i:
			p.add(at, "%q repeats scope.queues[%d]", q, slices.Index(sc.Queues, q))
		}
	}
	return sc.Queues
}

func (s *Spec) validateWindows(p *problems, cycle time.Duration) {
	w := s.WindowSeconds
	switch {
	case math.IsNaN(w) || math.IsInf(w, 0):
		p.add("window_s", "want a finite number of seconds, got %s", plain(w))
	case w <= 0:
		p.add("window_s", "is required: the observation window in seconds, more than 0 (got %s)", plain(w))
	case cycle > 0 && seconds(w) < cycle:
		p.add("window_s", "%s s is shorter than one scheduling cycle (%s s): nothing could be observed", plain(w), plain(cycle.Seconds()))
	case w > MaxWindow.Seconds():
		p.add("window_s", "%s s is longer than %s s (30 days)", plain(w), plain(MaxWindow.Seconds()))
	}
	ci := s.CheckIntervalSeconds
	switch {
	case math.IsNaN(ci) || math.IsInf(ci, 0):
		p.add("check_interval_s", "want a finite number of seconds, got %s", plain(ci))
	case ci < 0:
		p.add("check_interval_s", "%s is negative; 0 means %d checks per window", plain(ci), DefaultChecks)
	case ci == 0:
	case cycle > 0 && seconds(ci) < cycle:
		p.add("check_interval_s", "%s s is shorter than one scheduling cycle (%s s)", plain(ci), plain(cycle.Seconds()))
	case w > 0 && ci > w:
		p.add("check_interval_s", "%s s is longer than the window (window_s %s): the conditions would never be checked during it", plain(ci), plain(w))
	}
	b := s.Baseline
	switch {
	case b.From == nil && b.To == nil:
	case b.From == nil:
		p.add("baseline.from", "is required with baseline.to (or leave both out: the baseline is the equally long window before the start)")
	case b.To == nil:
		p.add("baseline.to", "is required with baseline.from (or leave both out: the baseline is the equally long window before the start)")
	case !b.To.After(*b.From):
		p.add("baseline.to", "%s is not after baseline.from %s", b.To.UTC().Format(time.RFC3339), b.From.UTC().Format(time.RFC3339))
	case s.Start != nil && b.To.After(*s.Start):
		p.add("baseline.to", "%s is after start %s: the baseline is measured before the candidate is switched in", b.To.UTC().Format(time.RFC3339), s.Start.UTC().Format(time.RFC3339))
	}
}

func (s *Spec) validateExpected(p *problems, watched []string) {
	e := s.Expected
	validateMetric(p, "expected", e.Metric, e.Target, watched)
	switch e.Direction {
	case Decrease, Increase:
	case "":
		p.add("expected.direction", "is required: decrease or increase")
	default:
		p.add("expected.direction", "%q is not decrease or increase", e.Direction)
	}
	switch c := e.Change; {
	case math.IsNaN(c) || math.IsInf(c, 0):
		p.add("expected.change", "want a finite fraction of the baseline, got %s", plain(c))
	case c <= 0 || c > MaxChange:
		p.add("expected.change", "%s is outside (0, %d]: the change is a fraction of the baseline (0.3 = 30 %%)", plain(c), MaxChange)
	case e.Direction == Decrease && c > 1:
		p.add("expected.change", "a decrease by %s (%s %%) cannot be met: no metric falls below 0", plain(c), plain(c*100))
	}
}

// validateMetric checks a metric name and its target at path (expected,
// rollback[i]); watched are the scope's queues (nil: any).
func validateMetric(p *problems, path, metric string, t Target, watched []string) {
	mi, known := LookupMetric(metric)
	switch {
	case metric == "":
		p.add(path+".metric", "is required")
	case !known:
		p.add(path+".metric", "%s", unknownMetric(metric))
	}
	if t.Tier != "" {
		if _, err := vocab.ParseTier(t.Tier); err != nil {
			p.add(path+".tier", "%v", err)
		}
	}
	switch {
	case t.Tier != "" && t.Queue != "":
		p.add(path+".queue", "is set with tier %q: a target is a tier, a queue, or neither (the scope's total)", t.Tier)
	case t.Queue != "" && strings.TrimSpace(t.Queue) == "":
		p.add(path+".queue", "is blank")
	case t.Queue != "" && len(watched) > 0 && !slices.Contains(watched, t.Queue):
		p.add(path+".queue", "queue %q is not watched: scope.queues lists %s", t.Queue, strings.Join(watched, ", "))
	}
	if known && mi.Governance && (t.Tier != "" || t.Queue != "") {
		field := path + ".tier"
		if t.Tier == "" {
			field = path + ".queue"
		}
		p.add(field, "governance metric %s is read on the scope's total only: leave tier and queue out", metric)
	}
}

func (c *Condition) validate(p *problems, path string, watched []string) {
	if len(c.Name) > MaxConditionNameLength {
		p.add(path+".name", "%d bytes, at most %d allowed", len(c.Name), MaxConditionNameLength)
	}
	validateMetric(p, path, c.Metric, c.Target, watched)
	var set []string
	for _, pr := range c.predicates() {
		if pr.v == nil {
			continue
		}
		set = append(set, pr.name)
		switch v := *pr.v; {
		case math.IsNaN(v) || math.IsInf(v, 0):
			p.add(path+"."+pr.name, "want a finite number, got %s", plain(v))
		case pr.factor && v <= 0:
			p.add(path+"."+pr.name, "%s, want a factor > 0 of the baseline's value", plain(v))
		}
	}
	switch len(set) {
	case 1:
	case 0:
		p.add(path, "has no predicate: set exactly one of above, below, above_baseline_factor or below_baseline_factor")
	default:
		p.add(path, "sets %s: set exactly one predicate (a second condition holds another)", strings.Join(set, " and "))
	}
}

// predicate is one of a condition's four predicates.
type predicate struct {
	name   string // JSON name
	v      *float64
	factor bool // a factor of the baseline's value
	above  bool // breached above the threshold (else below)
}

func (c *Condition) predicates() []predicate {
	return []predicate{
		{"above", c.Above, false, true},
		{"below", c.Below, false, false},
		{"above_baseline_factor", c.AboveBaselineFactor, true, true},
		{"below_baseline_factor", c.BelowBaselineFactor, true, false},
	}
}

// predicate returns the condition's predicate: the first set (a valid
// condition has exactly one); ok is false when none is set.
func (c *Condition) predicate() (predicate, bool) {
	for _, pr := range c.predicates() {
		if pr.v != nil {
			return pr, true
		}
	}
	return predicate{}, false
}

// unknownMetric says a metric name is unknown, suggesting the closest known
// name when one is near, else listing them all.
func unknownMetric(name string) string {
	best, bestD := "", math.MaxInt
	for _, mi := range catalogue {
		if d := editDistance(name, mi.Name); d < bestD {
			best, bestD = mi.Name, d
		}
	}
	if bestD <= max(2, len(name)/4) {
		return fmt.Sprintf("unknown metric %q: did you mean %s?", name, best)
	}
	names := make([]string, len(catalogue))
	for i, mi := range catalogue {
		names[i] = mi.Name
	}
	return fmt.Sprintf("unknown metric %q: want one of %s", name, strings.Join(names, ", "))
}

// editDistance is the Levenshtein distance between a and b, in bytes.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// oneVariable is CheckOneVariable's rule on the groups a diff found.
func oneVariable(s *Spec, groups []vocab.PolicyGroup) *FieldError {
	names := make([]string, len(groups))
	for i, g := range groups {
		names[i] = string(g)
	}
	switch {
	case len(groups) == 0:
		return &FieldError{Field: "candidate", Message: "candidate is the same as the baseline (no variable group differs): an experiment changes one"}
	case len(groups) > 1 && s.Override == nil:
		return &FieldError{Field: "candidate", Message: fmt.Sprintf(
			"candidate differs from the baseline in %d variable groups (%s); an experiment changes one, or an admin passes override.reason",
			len(groups), strings.Join(names, ", "))}
	}
	return nil
}

// plain renders a number as validation messages give it: every digit, no
// exponent ("2592001", "0.00001", "NaN", "+Inf").
func plain(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) }
