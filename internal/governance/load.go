package governance

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"
)

// ValidationError lists every problem found in a configuration file, each
// with its line and the field it names.
type ValidationError struct {
	File     string
	Problems []Problem
}

// Problem is one invalid field: its line in the file (0 when unknown), its
// dotted path (e.g. "reclaim.rules[1].mode") and what is wrong.
type Problem struct {
	Line    int
	Field   string
	Message string
}

// Error renders "file:line: field: message" per problem, one a line.
func (e *ValidationError) Error() string {
	var b strings.Builder
	for i, p := range e.Problems {
		if i > 0 {
			b.WriteByte('\n')
		}
		fmt.Fprintf(&b, "%s:%d: %s", e.File, p.Line, p.Message)
	}
	return b.String()
}

// Load reads and validates the YAML file at path. It returns a
// *ValidationError naming the line and field of every invalid value, or the
// YAML decoder's error (which names the line) for a malformed file or an
// unknown field.
func Load(path string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("governance config: %w", err)
	}
	return Parse(path, data)
}

// Parse is Load on data already read; name is used in messages.
func Parse(name string, data []byte) (*Config, error) {
	var root yaml.Node
	if err := yaml.Unmarshal(data, &root); err != nil {
		return nil, fmt.Errorf("governance config %s: %w", name, err)
	}
	cfg := &Config{}
	if len(root.Content) > 0 {
		dec := yaml.NewDecoder(bytes.NewReader(data))
		dec.KnownFields(true)
		if err := dec.Decode(cfg); err != nil {
			return nil, fmt.Errorf("governance config %s: %w", name, err)
		}
	}
	if probs := cfg.validate(&root); len(probs) > 0 {
		return nil, &ValidationError{File: name, Problems: probs}
	}
	cfg.applyDefaults()
	return cfg, nil
}

// validate checks every field against its accepted values; root locates the
// lines.
func (c *Config) validate(root *yaml.Node) []Problem {
	v := validator{root: root}
	names := make([]string, 0, len(c.Pools))
	for n := range c.Pools {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		if s := c.Pools[n].Stage; !s.Valid() {
			v.add([]string{"pools", n, "stage"}, "%q is not observe, trial or automate", s)
		}
	}
	for i, q := range c.LowRiskQueues {
		if q == "" {
			v.add([]string{"low_risk_queues", strconv.Itoa(i)}, "empty queue name")
		}
	}
	for i, w := range c.ProtectionWindows {
		if !w.End.After(w.Start) {
			v.add([]string{"protection_windows", strconv.Itoa(i), "end"}, "must be after start (%s)", w.Start.Format("2006-01-02T15:04:05Z07:00"))
		}
	}
	v.nonNegative([]string{"preemption", "verify_resume_timeout_seconds"}, c.Preemption.VerifyResumeTimeoutSeconds)
	v.nonNegative([]string{"preemption", "recompute_timeout_seconds"}, c.Preemption.RecomputeTimeoutSeconds)
	r := &c.Reclaim
	v.nonNegative([]string{"reclaim", "scan_interval_seconds"}, r.ScanIntervalSeconds)
	v.nonNegative([]string{"reclaim", "observation_window_seconds"}, r.ObservationWindowSeconds)
	v.nonNegative([]string{"reclaim", "notify_window_seconds"}, r.NotifyWindowSeconds)
	v.nonNegative([]string{"reclaim", "confirm_window_seconds"}, r.ConfirmWindowSeconds)
	if r.IdleGPUPercent < 0 || r.IdleGPUPercent > 100 {
		v.add([]string{"reclaim", "idle_gpu_percent"}, "%d is outside 0..100", r.IdleGPUPercent)
	}
	if r.DefaultMode != "" && !r.DefaultMode.Valid() {
		v.add([]string{"reclaim", "default_mode"}, "%q is not report, notify, auto or confirm", r.DefaultMode)
	}
	for i, rule := range r.Rules {
		at := []string{"reclaim", "rules", strconv.Itoa(i)}
		if !rule.Mode.Valid() {
			v.add(append(at, "mode"), "%q is not report, notify, auto or confirm", rule.Mode)
		}
		if rule.Class != "" && !rule.Class.Valid() {
			v.add(append(at, "class"), "%q is not failed, idle or completed", rule.Class)
		}
	}
	return v.problems
}

// validator collects problems with the line of each field.
type validator struct {
	root     *yaml.Node
	problems []Problem
}

func (v *validator) add(path []string, format string, args ...any) {
	v.problems = append(v.problems, Problem{Line: lineOf(v.root, path), Field: fieldName(path),
		Message: errorf(fieldName(path), format, args...)})
}

func (v *validator) nonNegative(path []string, x float64) {
	if x < 0 {
		v.add(path, "%g is negative (seconds)", x)
	}
}

// fieldName renders a path as "a.b[2].c".
func fieldName(path []string) string {
	var b strings.Builder
	for i, p := range path {
		if _, err := strconv.Atoi(p); err == nil {
			b.WriteString("[" + p + "]")
			continue
		}
		if i > 0 {
			b.WriteByte('.')
		}
		b.WriteString(p)
	}
	return b.String()
}

// lineOf returns the line of the value at path (mapping keys, sequence
// indexes as decimal strings), or of the deepest node found on the way.
func lineOf(root *yaml.Node, path []string) int {
	n := root
	if n.Kind == yaml.DocumentNode && len(n.Content) > 0 {
		n = n.Content[0]
	}
	line := n.Line
	for _, p := range path {
		next, err := child(n, p)
		if err != nil {
			return line
		}
		n, line = next, next.Line
	}
	return line
}

var errNoChild = errors.New("no such child")

// child returns the value under key p of a mapping, or item p of a sequence.
func child(n *yaml.Node, p string) (*yaml.Node, error) {
	switch n.Kind {
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			if n.Content[i].Value == p {
				return n.Content[i+1], nil
			}
		}
	case yaml.SequenceNode:
		if i, err := strconv.Atoi(p); err == nil && i >= 0 && i < len(n.Content) {
			return n.Content[i], nil
		}
	}
	return nil, errNoChild
}
