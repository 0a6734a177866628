package dupkey

import (
	"testing"

	"github.com/gpugov/gpugov/internal/yamlnode"
)

func TestInJSON(t *testing.T) {
	for _, c := range []struct {
		in    string
		path  string
		found bool
	}{
		{`{"a":1,"b":2}`, "", false},
		{`{"a":1,"a":2}`, "a", true},
		{`{"a":{"b":1,"b":2}}`, "a.b", true},
		{`{"a":[{"b":1},{"c":1,"c":2}]}`, "a[1].c", true},
		{`[[{"x":1,"y":{"":1,"":2}}]]`, `[0][0].y.""`, true},
		{`{"a":{"k":1},"b":{"k":1}}`, "", false}, // the same key in two objects
		{`{"a":1,"A":2}`, "", false},             // keys compare exactly
		{`{"a":"{\"b\":1,\"b\":2}"}`, "", false}, // a string is no object
		{`{"a":1,"b":2,"a"`, "a", true},          // found before the malformation
		{`{"a":1,`, "", false},                   // malformed: the decoder's to report
		{`"s"`, "", false}, {`null`, "", false}, {`[]`, "", false},
	} {
		if path, found := InJSON([]byte(c.in)); path != c.path || found != c.found {
			t.Errorf("InJSON(%s) = %q, %v; want %q, %v", c.in, path, found, c.path, c.found)
		}
	}
}

func TestKeysAndPaths(t *testing.T) {
	k := Keys{}
	if k.Repeats("a") || k.Repeats("b") || !k.Repeats("a") {
		t.Fatal("Repeats: want false, false, true")
	}
	if got := yamlnode.Join(index(yamlnode.Join("", "cmd"), 2), ""); got != `cmd[2].""` {
		t.Fatalf("path %q", got)
	}
}
