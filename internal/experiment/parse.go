package experiment

import (
	"cmp"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/gpugov/gpugov/internal/policy"
	"github.com/gpugov/gpugov/internal/yamlnode"
)

// SpecError lists every problem found in an experiment spec file, ordered
// by line.
type SpecError struct {
	File     string
	Problems []SpecProblem
}

// SpecProblem is one problem of a spec file: its line (1-based), the
// field's JSON path (`rollback[2].above_baseline_factor`; "" for a YAML
// syntax error) and what is wrong.
type SpecProblem = yamlnode.Problem

// Error renders "file:line: field: message", one problem a line.
func (e *SpecError) Error() string {
	return yamlnode.Render(e.File, e.Problems)
}

// ParseSpec reads an experiment spec from YAML (JSON is YAML too) with the
// JSON field names, and validates it as Validate does without the
// service's cycle interval (the server checks the minimum window), with
// candidate.file accepted (ParseSpecFile reads it). name stands for the
// file in errors. An invalid spec is a *SpecError naming the line and field
// of every problem: a YAML syntax error, an unknown or repeated field, a
// value of the wrong type (a number for window_s, an RFC 3339 time for
// start, a whole number for min_sample), and every Validate problem, at the
// line of the field (or of the mapping that lacks it).
func ParseSpec(name string, data []byte) (*Spec, error) {
	s, d := parseSpec(name, data)
	if len(d.probs) > 0 {
		return nil, d.err(name)
	}
	return s, nil
}

// ParseSpecFile reads the spec file at path (ParseSpec) and, when it names
// candidate.file, reads that policy file (relative to the spec's folder
// unless absolute) into candidate.policy, clearing candidate.file. A policy
// file that cannot be read, or does not load (policy.Parse), is a problem
// at candidate.file's line. A spec file that cannot be read is an error
// wrapping the os error.
func ParseSpecFile(path string) (*Spec, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("experiment spec: %w", err)
	}
	s, d := parseSpec(path, data)
	if len(d.probs) > 0 {
		return nil, d.err(path)
	}
	if s.Candidate.File == "" {
		return s, nil
	}
	file := s.Candidate.File
	if !filepath.IsAbs(file) {
		file = filepath.Join(filepath.Dir(path), file)
	}
	line := d.line("candidate.file")
	body, err := os.ReadFile(file)
	if err != nil {
		return nil, &SpecError{File: path, Problems: []SpecProblem{{Line: line, Field: "candidate.file", Message: fmt.Sprintf("cannot read the policy: %v", err)}}}
	}
	if _, err := policy.Parse(file, body); err != nil {
		return nil, &SpecError{File: path, Problems: []SpecProblem{{Line: line, Field: "candidate.file", Message: "the policy does not load:\n" + err.Error()}}}
	}
	s.Candidate.Policy, s.Candidate.File = string(body), ""
	if fe := s.validate(0, false); len(fe) > 0 { // the policy's size
		for _, e := range fe {
			d.fail(line, e.Field, "%s", e.Message)
		}
		return nil, d.err(path)
	}
	return s, nil
}

// specDecoder walks the YAML node tree into a Spec, collecting a problem
// with the node's line for each bad field, and the line of each decoded
// field (its key's, or a list item's) by path, for Validate's problems: a
// field the spec lacks is reported at its mapping's key.
type specDecoder struct {
	probs []SpecProblem
	at    map[string]int
}

func (d *specDecoder) fail(line int, path, format string, args ...any) {
	d.probs = append(d.probs, SpecProblem{Line: line, Field: path, Message: fmt.Sprintf(format, args...)})
}

// report is fail at node n's line, as a yamlnode.Report.
func (d *specDecoder) report(n *yaml.Node, path, msg string) {
	d.probs = append(d.probs, SpecProblem{Line: n.Line, Field: path, Message: msg})
}

// line returns the line of path, or of its nearest recorded parent, or 1.
func (d *specDecoder) line(path string) int {
	for path != "" {
		if l, ok := d.at[path]; ok {
			return l
		}
		i := strings.LastIndexAny(path, ".[")
		if i < 0 {
			break
		}
		path = path[:i]
	}
	return 1
}

func (d *specDecoder) err(name string) *SpecError {
	slices.SortStableFunc(d.probs, func(a, b SpecProblem) int { return cmp.Compare(a.Line, b.Line) })
	return &SpecError{File: name, Problems: d.probs}
}

func parseSpec(name string, data []byte) (*Spec, *specDecoder) {
	d := &specDecoder{at: map[string]int{}}
	s := &Spec{}
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		se := yamlnode.Syntax(err)
		d.fail(se.Line, "", "%s", se.Msg)
		return nil, d
	}
	root := &doc
	if root.Kind == yaml.DocumentNode && len(root.Content) > 0 {
		root = yamlnode.Deref(root.Content[0])
	}
	if root.Kind == yaml.DocumentNode || root.Kind == 0 {
		d.fail(1, "", "the file is empty: want an experiment spec (name, hypothesis, candidate, scope, window_s, expected, rollback)")
		return nil, d
	}
	d.mapping(root, "", specFields{
		"name":             d.str(&s.Name),
		"hypothesis":       d.str(&s.Hypothesis),
		"candidate":        d.candidate(&s.Candidate),
		"scope":            d.scope(&s.Scope),
		"start":            d.timePtr(&s.Start),
		"window_s":         d.number(&s.WindowSeconds),
		"baseline":         d.baseline(&s.Baseline),
		"check_interval_s": d.number(&s.CheckIntervalSeconds),
		"expected":         d.expected(&s.Expected),
		"rollback":         d.rollback(&s.Rollback),
		"min_sample":       d.integer(&s.MinSample),
		"override":         d.override(&s.Override),
	})
	if len(d.probs) > 0 {
		return nil, d
	}
	for _, fe := range s.validate(0, true) {
		d.fail(d.line(fe.Field), fe.Field, "%s", fe.Message)
	}
	if len(d.probs) > 0 {
		return nil, d
	}
	return s, d
}

// fieldFunc decodes the value node n of the field at path.
type fieldFunc func(n *yaml.Node, path string)

// specFields are a mapping's known keys.
type specFields map[string]fieldFunc

// mapping decodes a mapping node with the known keys fs; an unknown or
// repeated key is a problem at the key's line.
func (d *specDecoder) mapping(n *yaml.Node, path string, fs specFields) {
	yamlnode.Fields(n, path, fs, d.report, func(k, v *yaml.Node, at string, f fieldFunc) {
		d.at[at] = k.Line
		f(v, at)
	})
}

// scalar decodes a scalar node into dst; want names the expected kind.
func (d *specDecoder) scalar(n *yaml.Node, path, want string, dst any) bool {
	return yamlnode.Scalar(n, path, want, dst, d.report)
}

func (d *specDecoder) str(dst *string) fieldFunc {
	return func(n *yaml.Node, path string) { d.scalar(n, path, "a string", dst) }
}

func (d *specDecoder) strs(dst *[]string) fieldFunc {
	return func(n *yaml.Node, path string) {
		out := []string{}
		if !yamlnode.List(n, path, "a list of names", d.report, func(c *yaml.Node, at string) {
			d.at[at] = c.Line
			var v string
			if d.scalar(c, at, "a name", &v) {
				out = append(out, v)
			}
		}) {
			return
		}
		*dst = out
	}
}

func (d *specDecoder) number(dst *float64) fieldFunc {
	return func(n *yaml.Node, path string) {
		if v, ok := yamlnode.Number(n, path, d.report); ok {
			*dst = v
		}
	}
}

func (d *specDecoder) numberPtr(dst **float64) fieldFunc {
	return func(n *yaml.Node, path string) {
		var v float64
		d.number(&v)(n, path)
		*dst = &v
	}
}

func (d *specDecoder) integer(dst *int) fieldFunc {
	return func(n *yaml.Node, path string) {
		if v, ok := yamlnode.Integer[int](n, path, d.report); ok {
			*dst = v
		}
	}
}

func (d *specDecoder) timePtr(dst **time.Time) fieldFunc {
	return func(n *yaml.Node, path string) {
		if t, ok := yamlnode.Time(n, path, d.report); ok {
			*dst = &t
		}
	}
}

func (d *specDecoder) candidate(c *Candidate) fieldFunc {
	return func(n *yaml.Node, path string) {
		d.mapping(n, path, specFields{"hash": d.str(&c.Hash), "policy": d.str(&c.Policy), "file": d.str(&c.File)})
	}
}

func (d *specDecoder) scope(s *Scope) fieldFunc {
	return func(n *yaml.Node, path string) {
		d.mapping(n, path, specFields{"pools": d.strs(&s.Pools), "queues": d.strs(&s.Queues)})
	}
}

func (d *specDecoder) baseline(b *BaselineWindow) fieldFunc {
	return func(n *yaml.Node, path string) {
		d.mapping(n, path, specFields{"from": d.timePtr(&b.From), "to": d.timePtr(&b.To)})
	}
}

func (d *specDecoder) expected(e *Expectation) fieldFunc {
	return func(n *yaml.Node, path string) {
		var dir string
		d.mapping(n, path, specFields{
			"metric": d.str(&e.Metric), "tier": d.str(&e.Tier), "queue": d.str(&e.Queue),
			"direction": d.str(&dir), "change": d.number(&e.Change),
		})
		e.Direction = Direction(dir)
	}
}

func (d *specDecoder) rollback(dst *[]Condition) fieldFunc {
	return func(n *yaml.Node, path string) {
		out := []Condition{}
		if !yamlnode.List(n, path, "a list of conditions", d.report, func(item *yaml.Node, at string) {
			d.at[at] = item.Line
			var c Condition
			d.mapping(item, at, specFields{
				"name": d.str(&c.Name), "metric": d.str(&c.Metric), "tier": d.str(&c.Tier), "queue": d.str(&c.Queue),
				"above": d.numberPtr(&c.Above), "below": d.numberPtr(&c.Below),
				"above_baseline_factor": d.numberPtr(&c.AboveBaselineFactor), "below_baseline_factor": d.numberPtr(&c.BelowBaselineFactor),
			})
			out = append(out, c)
		}) {
			return
		}
		*dst = out
	}
}

func (d *specDecoder) override(dst **Override) fieldFunc {
	return func(n *yaml.Node, path string) {
		o := &Override{}
		d.mapping(n, path, specFields{"reason": d.str(&o.Reason)})
		*dst = o
	}
}
