package main

import (
	"errors"
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
