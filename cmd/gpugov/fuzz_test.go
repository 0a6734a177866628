package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"testing"

	"github.com/gpugov/gpugov/api"
)

// yamlProblemAt matches a YAML problem that names its line.
var yamlProblemAt = regexp.MustCompile(`(line |-:)\d+`)

// wholeDocument are the rejections of a job file that need no field or
// line: the file as a whole is empty, holds several documents, or is not one
// JSON object (as the API says).
var wholeDocument = []string{" is empty", "more than one YAML document", "invalid JSON at byte", "truncated JSON",
	"unexpected data after the JSON object", "body larger than", "the body must be a JSON object"}

// FuzzJobSpecYAML fuzzes `gpugov submit -f`'s reader of YAML (and JSON) job
// files, then the API's validator on what it accepts. Properties: no panic;
// a rejection is a usage error (exit 2) naming a field or a line; an
// accepted spec round-trips through JSON (what submit sends).
func FuzzJobSpecYAML(f *testing.F) {
	for _, s := range []string{
		"queue: standard\nresources:\n  gpus: 4\n  gpu_memory_mib: 81920\n  pool: a100-east\n  topology: same-node\ncommand: [python, train.py]\nrecovery: {checkpointable: true, checkpoint_interval_s: 600}\n",
		"queue: standard\nresources: {gpus: 1, pool: p}\nrun_seconds: 1e308\n",
		"queue: standard\nresources: {gpus: 1, pool: p}\nrun_seconds: .nan\n",
		"queue: standard\nresources: {gpus: 1, pool: p}\nrun_seconds: .inf\n",
		"queue: standard\nresources: {gpus: 1, pool: p, labels: {1: x}}\nrun_seconds: 5\n",
		"queue: standard\nresources: {gpus: 18446744073709551616, pool: p}\n",
		"queue: standard\nresources: {gpus: 1, pool: p}\nrun_seconds: 2026-12-01\n",
		"a: &x [*x]\n", "queue: [\n", "---\nqueue: a\n---\nqueue: b\n", "", "# only a comment\n",
		`{"queue":"standard","resources":{"gpus":1,"pool":"p"},"run_seconds":60}`,
		"queue: standard\nresources: {gpus: 1, pool: p, gpu_mili: 5}\n",
		"? [a, b]\n: c\n", "queue: !!binary aGVsbG8=\n", "env: {A: null}\n",
	} {
		f.Add([]byte(s))
	}
	known := func(q string) bool { return q == "standard" }
	f.Fuzz(func(t *testing.T, data []byte) {
		spec, err := readJobSpec(bytes.NewReader(data), "-")
		if err != nil {
			checkFileRejection(t, err)
			return
		}
		body, err := json.Marshal(spec)
		if err != nil {
			t.Fatalf("an accepted spec does not encode: %v", err)
		}
		again, apiErr := api.DecodeJobSpec(bytes.NewReader(body))
		if apiErr != nil {
			t.Fatalf("an accepted spec's encoding %s is rejected: %v", body, apiErr)
		}
		if b2, _ := json.Marshal(again); !bytes.Equal(body, b2) {
			t.Fatalf("round trip changed the spec:\n%s\n%s", body, b2)
		}
		for _, fe := range api.ValidateJobSpec(spec, known) {
			if fe.Field == "" {
				t.Fatalf("validation error without a field: %q", fe.Message)
			}
		}
	})
}

// checkFileRejection fails t unless err is a usage error naming a field, a
// line, or a whole-document problem.
func checkFileRejection(t *testing.T, err error) {
	t.Helper()
	var ue usageError
	if !errors.As(err, &ue) {
		t.Fatalf("rejection is not a usage error (exit 2): %v", err)
	}
	var apiErr *api.Error
	if errors.As(err, &apiErr) && apiErr.Body.Field != "" {
		return
	}
	msg := err.Error()
	if yamlProblemAt.MatchString(msg) {
		return
	}
	for _, p := range wholeDocument {
		if strings.Contains(msg, p) {
			return
		}
	}
	t.Fatalf("rejection names no field or line: %q", msg)
}

// aliasBomb is a YAML document of levels anchors, each a list of nine
// aliases of the one before: 9^levels values once expanded.
func aliasBomb(levels int) string {
	var b strings.Builder
	b.WriteString("a0: &a0 [x, x, x, x, x, x, x, x, x]\n")
	for i := 1; i <= levels; i++ {
		fmt.Fprintf(&b, "a%d: &a%d [", i, i)
		for j := range 9 {
			if j > 0 {
				b.WriteString(", ")
			}
			fmt.Fprintf(&b, "*a%d", i-1)
		}
		b.WriteString("]\n")
	}
	return b.String()
}

// TestReadJobSpecYAMLProblems holds what FuzzJobSpecYAML's seeds found:
// YAML that JSON cannot carry was a usage error naming neither field nor
// line ("json: unsupported value: NaN"), and a merge key must still merge.
func TestReadJobSpecYAMLProblems(t *testing.T) {
	for _, c := range []struct{ yaml, want string }{
		{"queue: standard\nresources: {gpus: 1, pool: p}\nrun_seconds: .nan\n", "submit: -:3: run_seconds: .nan is not a finite number"},
		{"queue: standard\nresources: {gpus: 1, pool: p}\nrun_seconds: -.inf\n", "submit: -:3: run_seconds: -.inf is not a finite number"},
		{"queue: standard\nresources: {gpus: 1, pool: p, labels: {1: x}}\n", `submit: -:2: resources.labels: key "1" is not a string (quote it)`},
		{"queue: standard\nqueue: batch\n", "submit: -:2: queue: repeated key"},
		{"a: &x [*x]\n", "submit: -:1: a[0][0]"}, // … a[0] 17 times: aliases nested more than 16 deep
		{"? [a, b]\n: c\n", "submit: -:1: key a list is not a string"},
		// 8 levels of 9 aliases expand to 9^8 = 43 million values: refused
		// once 65,536 are built, not after gigabytes (found by the newcomer check).
		{aliasBomb(8), "submit: -:"},
	} {
		_, err := readJobSpec(strings.NewReader(c.yaml), "-")
		var ue usageError
		if err == nil || !errors.As(err, &ue) || !strings.HasPrefix(err.Error(), c.want) {
			t.Errorf("%q: err = %v, want a usage error starting %q", c.yaml, err, c.want)
		}
	}
	if _, err := readJobSpec(strings.NewReader(aliasBomb(8)), "-"); err == nil || !strings.Contains(err.Error(), "expands to more than 65536 values") {
		t.Errorf("alias bomb: err %v, want the expansion bound named", err)
	}
	spec, err := readJobSpec(strings.NewReader("base: &b {gpus: 2, pool: p}\n"), "-")
	if err == nil || spec != nil || !strings.Contains(err.Error(), "base") {
		t.Errorf("unknown top-level key: spec %v, err %v", spec, err)
	}
	spec, err = readJobSpec(strings.NewReader("queue: standard\nrun_seconds: 5\nresources:\n  <<: {gpus: 2, pool: p}\n  gpus: 4\n"), "-")
	if err != nil || spec.Resources.GPUs != 4 || spec.Resources.Pool != "p" {
		t.Errorf("merge key: spec %+v, err %v; want gpus 4 (own key wins) and pool p (merged)", spec, err)
	}
}

// TestReadJobSpecSyntaxErrorLine: a YAML syntax error names the line it is
// on. yaml.v3 names one line early for its parser's problems (a key
// indented one space too few, an unclosed flow list), its scanner's
// right (a tab, a missing ':'); yamlnode.Syntax corrects the former.
func TestReadJobSpecSyntaxErrorLine(t *testing.T) {
	for _, c := range []struct{ yaml, want string }{
		{"queue: train\nresources:\n  gpus: 2\n gpu_memory_mib: 1\n", "submit: -: yaml: line 4: did not find expected key"},
		{"queue: train\nresources:\n  gpus: 2\n  gpu_models: [A100\nrun_seconds: 5\n", "submit: -: yaml: line 4: did not find expected ',' or ']'"},
		{"queue: train\nresources\n  gpus: 2\n", "submit: -: yaml: line 2: could not find expected ':'"},
		{"queue: train\n\tresources: 1\n", "submit: -: yaml: line 2: found a tab character that violates indentation"},
	} {
		_, err := readJobSpec(strings.NewReader(c.yaml), "-")
		var ue usageError
		if err == nil || !errors.As(err, &ue) || err.Error() != c.want {
			t.Errorf("%q: err = %v, want a usage error %q", c.yaml, err, c.want)
		}
	}
}
