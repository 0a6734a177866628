package main

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestReadDocumentTakesExactlyOneDocument: a file with two YAML documents is
// a usage error (exit 2) rather than a submission of the first alone; an
// empty one too; a single document is read whole.
func TestReadDocumentTakesExactlyOneDocument(t *testing.T) {
	id := func(v any) any { return v }
	for name, tc := range map[string]struct {
		in, wantErr string
	}{
		"one":   {in: "queue: standard\nresources: {gpus: 1}\n"},
		"two":   {in: "queue: standard\n---\nqueue: experiment\n", wantErr: "more than one YAML document"},
		"empty": {in: "", wantErr: "is empty"},
		"bad":   {in: "queue: [\n", wantErr: "submit: -: yaml"},
	} {
		body, err := readDocument(strings.NewReader(tc.in), "-", "submit", id)
		if tc.wantErr == "" {
			if err != nil || !strings.Contains(string(body), `"standard"`) {
				t.Errorf("%s: body %s, err %v", name, body, err)
			}
			continue
		}
		var ue usageError
		if err == nil || !errors.As(err, &ue) {
			t.Errorf("%s: err %v, want a usage error", name, err)
			continue
		}
		if !strings.Contains(err.Error(), tc.wantErr) {
			t.Errorf("%s: err %q, want it to say %q", name, err, tc.wantErr)
		}
	}
}

// A bad field of a YAML job spec is reported with the file and the line of
// its key, besides the field path the API's decoder names: an unknown
// nested field, a mistyped value, a list holding a non-string (named by
// its index and line: api.typeError finds the value the decoder stopped at).
func TestReadJobSpecNamesTheYAMLLine(t *testing.T) {
	for _, tc := range []struct{ doc, want string }{
		{"project: vision\nqueue: train\nresources:\n  pool: a100-east\n  gpu_mili: 500\n", "job.yaml:5: resources.gpu_mili: unknown field"},
		{"project: vision\nresources:\n  pool: a100-east\n  gpus: two\n", "job.yaml:4: resources.gpus: must be a whole number, got a string"},
		{"project: vision\ncommand:\n  - python\n  - [x]\n", "job.yaml:4: command[1]: must be a string, got a list"},
	} {
		path := filepath.Join(t.TempDir(), "job.yaml")
		if err := os.WriteFile(path, []byte(tc.doc), 0o600); err != nil {
			t.Fatal(err)
		}
		_, err := readJobSpec(nil, path)
		var ue usageError
		if !errors.As(err, &ue) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: %v, want a usage error with %q", tc.doc, err, tc.want)
		}
	}
}
