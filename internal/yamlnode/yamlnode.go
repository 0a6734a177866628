// Package yamlnode holds the yaml.v3 node-walking helpers that the policy
// loader (internal/policy) and the experiment spec parser
// (internal/experiment) share: following aliases, naming a node's value for
// messages, field paths, the line of a syntax error (Syntax), and walking mappings,
// lists and scalars while reporting each bad node with its path.
package yamlnode

import (
	"fmt"
	"maps"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// Problem is one problem of a YAML file: its line (1-based), the field's
// path ("reclaim.rules[1].mode"; "" for a YAML syntax error) and what is
// wrong.
type Problem struct {
	Line    int
	Field   string
	Message string
}

// Render writes problems as "file:line: field: message" ("file:line:
// message" without a field), one a line.
func Render(file string, problems []Problem) string {
	var b strings.Builder
	for i, p := range problems {
		if i > 0 {
			b.WriteByte('\n')
		}
		if p.Field == "" {
			fmt.Fprintf(&b, "%s:%d: %s", file, p.Line, p.Message)
		} else {
			fmt.Fprintf(&b, "%s:%d: %s: %s", file, p.Line, p.Field, p.Message)
		}
	}
	return b.String()
}

// Report records a problem at node n (its Line) for the field at path;
// msg is the whole message ("want a mapping, got a list").
type Report func(n *yaml.Node, path, msg string)

// SyntaxError is a YAML syntax error of yaml.v3 with the line it is on.
type SyntaxError struct {
	Line int    // 1-based; 1 when yaml.v3 names none
	Msg  string // yaml.v3's message ("yaml: line 4: did not find expected key"), its line corrected
}

func (e *SyntaxError) Error() string { return e.Msg }

// yamlLine is the line yaml.v3 names in a syntax error: "yaml: line 3: …".
var yamlLine = regexp.MustCompile(`^yaml: line ([0-9]+): `)

// parserProblems are the problems yaml.v3's parser (rather than its
// scanner) reports. For those it names the line counted from 0, one before
// the line meant (v3.0.1's (*parser).fail adds 1 for scanner errors only):
// a mapping key indented one space too few on line 4 is "line 3: did not
// find expected key".
var parserProblems = []string{
	"did not find expected <stream-start>", "did not find expected <document start>", "did not find expected node content",
	"did not find expected key", "did not find expected '-' indicator", "did not find expected ',' or ']'",
	"did not find expected ',' or '}'", "found undefined tag handle", "found duplicate %YAML directive",
	"found duplicate %TAG directive", "found incompatible YAML document",
}

// Syntax is err, a syntax error of yaml.v3's Unmarshal or Decode, with its
// line: the one yaml.v3 names, plus 1 for a parser problem (parserProblems),
// whose message is rewritten to name it too; 1 when it names none (control
// characters, bad UTF-8, a problem on the first line).
func Syntax(err error) *SyntaxError {
	msg := err.Error()
	m := yamlLine.FindStringSubmatchIndex(msg)
	if m == nil {
		return &SyntaxError{Line: 1, Msg: msg}
	}
	line, _ := strconv.Atoi(msg[m[2]:m[3]])
	if slices.Contains(parserProblems, msg[m[1]:]) {
		line++
		msg = msg[:m[2]] + strconv.Itoa(line) + msg[m[3]:]
	}
	return &SyntaxError{Line: max(line, 1), Msg: msg}
}

// Deref follows alias nodes to the node they name.
func Deref(n *yaml.Node) *yaml.Node {
	for n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	return n
}

// Describe names a node's value for messages: "a mapping", "a list",
// "no value", or the scalar's text quoted.
func Describe(n *yaml.Node) string {
	switch {
	case n.Kind == yaml.MappingNode:
		return "a mapping"
	case n.Kind == yaml.SequenceNode:
		return "a list"
	case n.Kind == yaml.ScalarNode && n.Tag == "!!null":
		return "no value"
	default:
		return fmt.Sprintf("%q", n.Value)
	}
}

// Join is the path of field key under path ("" is the root). The empty
// key, which would name nothing, is written `""` (found by FuzzPolicy: an
// unknown empty key was a problem naming no field).
func Join(path, key string) string {
	if key == "" {
		key = `""`
	}
	if path == "" {
		return key
	}
	return path + "." + key
}

// Fields walks mapping node n (aliases followed) at path, calling each
// with the key node, the value node (dereferenced), the key's path and its
// entry in fs, once per known key in file order. A node that is not a
// mapping is reported ("want a mapping, got …") and Fields returns false;
// a repeated key ("repeats an earlier key") and a key not in fs ("unknown
// field (want one of a, b, c)") are reported at the key and skipped.
func Fields[F any](n *yaml.Node, path string, fs map[string]F, report Report, each func(k, v *yaml.Node, at string, f F)) bool {
	n = Deref(n)
	if n.Kind != yaml.MappingNode {
		report(n, path, "want a mapping, got "+Describe(n))
		return false
	}
	seen := map[string]bool{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], Deref(n.Content[i+1])
		at := Join(path, k.Value)
		switch f, ok := fs[k.Value]; {
		case seen[k.Value]:
			report(k, at, "repeats an earlier key")
		case !ok:
			report(k, at, "unknown field (want one of "+strings.Join(slices.Sorted(maps.Keys(fs)), ", ")+")")
		default:
			seen[k.Value] = true
			each(k, v, at, f)
		}
	}
	return true
}

// Entries walks mapping node n (aliases followed) at path whose keys are
// free names (pools, tiers, projects), calling each with the key node, the
// value node (dereferenced) and the key's path, in file order. A node that
// is not a mapping is reported ("want a mapping, got …"); a repeated key is
// reported at the key ("repeats an earlier key") and skipped.
func Entries(n *yaml.Node, path string, report Report, each func(k, v *yaml.Node, at string)) {
	n = Deref(n)
	if n.Kind != yaml.MappingNode {
		report(n, path, "want a mapping, got "+Describe(n))
		return
	}
	seen := map[string]bool{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], Deref(n.Content[i+1])
		at := Join(path, k.Value)
		if seen[k.Value] {
			report(k, at, "repeats an earlier key")
			continue
		}
		seen[k.Value] = true
		each(k, v, at)
	}
}

// List walks sequence node n (aliases followed) at path, calling each with
// every item (dereferenced) and its path ("path[2]"). A node that is not a
// sequence is reported as "want <want>, got …" (want: "a list", "a list of
// names") and List returns false.
func List(n *yaml.Node, path, want string, report Report, each func(c *yaml.Node, at string)) bool {
	n = Deref(n)
	if n.Kind != yaml.SequenceNode {
		report(n, path, "want "+want+", got "+Describe(n))
		return false
	}
	for i, c := range n.Content {
		each(Deref(c), fmt.Sprintf("%s[%d]", path, i))
	}
	return true
}

// Scalar decodes scalar node n into dst; a mapping, a list, no value or a
// value that does not decode is reported as "want <want>, got …" and
// Scalar returns false.
func Scalar(n *yaml.Node, path, want string, dst any, report Report) bool {
	if n.Kind != yaml.ScalarNode || n.Tag == "!!null" || n.Decode(dst) != nil {
		report(n, path, fmt.Sprintf("want %s, got %s", want, Describe(n)))
		return false
	}
	return true
}

// Number decodes a finite number; anything else is reported and Number
// returns false.
func Number(n *yaml.Node, path string, report Report) (float64, bool) {
	var v float64
	if !Scalar(n, path, "a number", &v, report) {
		return 0, false
	}
	if math.IsNaN(v) || math.IsInf(v, 0) {
		report(n, path, "want a finite number, got "+Describe(n))
		return 0, false
	}
	return v, true
}

// Integer decodes a whole number (a !!int scalar: yaml.v3 would truncate
// a float); anything else is reported and Integer returns false.
func Integer[T int | int64 | uint64](n *yaml.Node, path string, report Report) (T, bool) {
	var v T
	if n.Kind == yaml.ScalarNode && n.Tag != "!!int" && n.Tag != "!!null" {
		report(n, path, "want a whole number, got "+Describe(n))
		return v, false
	}
	if !Scalar(n, path, "a whole number", &v, report) {
		return v, false
	}
	return v, true
}

// Time decodes an RFC 3339 time; anything else is reported and Time
// returns false.
func Time(n *yaml.Node, path string, report Report) (time.Time, bool) {
	var s string
	if !Scalar(n, path, "an RFC 3339 time", &s, report) {
		return time.Time{}, false
	}
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		report(n, path, fmt.Sprintf("want an RFC 3339 time (2026-01-02T15:04:05Z), got %q", s))
		return time.Time{}, false
	}
	return t, true
}
