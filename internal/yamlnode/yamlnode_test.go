package yamlnode

import (
	"testing"

	"gopkg.in/yaml.v3"
)

// TestSyntaxLine: Syntax names the line a syntax error is on, for yaml.v3's
// parser problems (which yaml.v3 names one line early, counting from 0) and
// its scanner problems (named right) alike, and line 1 when yaml.v3 names
// none.
func TestSyntaxLine(t *testing.T) {
	for _, c := range []struct {
		doc  string
		line int
		msg  string
	}{
		{"a: 1\nb:\n  c: 2\n d: 3\n", 4, "yaml: line 4: did not find expected key"},
		{"a: 1\nb:\n  c: 2\n  d: [x\ne: 5\n", 4, "yaml: line 4: did not find expected ',' or ']'"},
		{"a: 1\nb: {x: 1\n", 2, "yaml: line 2: did not find expected ',' or '}'"},
		// A problem inside a construct is named at the construct's line
		// (yaml.v3's context, here the list's), as for scanner problems.
		{"a:\n  - x\n  y: 1\n", 2, "yaml: line 2: did not find expected '-' indicator"},
		{"a: 1\nb\n  c: 2\n", 2, "yaml: line 2: could not find expected ':'"},
		{"a: 1\n\tb: 1\n", 2, "yaml: line 2: found a tab character that violates indentation"},
		{"a: 1\nb: x: y\n", 2, "yaml: line 2: mapping values are not allowed in this context"},
		{"a: \x01\n", 1, ""},
	} {
		var n yaml.Node
		err := yaml.Unmarshal([]byte(c.doc), &n)
		if err == nil {
			t.Fatalf("%q: no error", c.doc)
		}
		se := Syntax(err)
		if se.Line != c.line || (c.msg != "" && se.Msg != c.msg) {
			t.Errorf("%q: yaml.v3 %q: Syntax gives line %d %q, want %d %q", c.doc, err, se.Line, se.Msg, c.line, c.msg)
		}
	}
}
