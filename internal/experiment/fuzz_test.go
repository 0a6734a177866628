package experiment

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"strings"
	"testing"
)

// FuzzExperimentSpec fuzzes the experiment spec parser (ParseSpec, the
// reader of `gpugov experiment create -f` and of POST /v1/experiments's
// YAML). Properties: no panic; a rejection is a *SpecError whose every
// problem names its line (≥ 1) and a field, unless it is a YAML syntax
// error or the document as a whole is not a mapping; an accepted spec
// round-trips (its JSON encoding, parsed again, encodes the same).
func FuzzExperimentSpec(f *testing.F) {
	f.Add([]byte(exampleSpec))
	if b, err := os.ReadFile("../../deploy/whatif/experiment.yaml"); err == nil {
		f.Add(b)
	}
	for _, s := range []string{
		"name: x\nwindow_s: 1e308\n", "name: x\nwindow_s: .nan\nmin_sample: 9223372036854775808\n",
		"name: x\nstart: '0000-01-01T00:00:00+01:00'\n", "name: x\nrollback: [{metric: wait_p95_s, above_baseline_factor: -1}]\n",
		"name: x\nexpected: {change: .inf}\n", "[]\n", "", "name: [\n", "name: x\nname: y\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := ParseSpec("fuzz.yaml", data)
		if err != nil {
			var se *SpecError
			if !errors.As(err, &se) || len(se.Problems) == 0 {
				t.Fatalf("rejection is not a *SpecError with problems: %v", err)
			}
			for _, p := range se.Problems {
				if p.Line < 1 {
					t.Fatalf("problem without a line: %+v", p)
				}
				if p.Field == "" && !strings.HasPrefix(p.Message, "yaml: ") && !strings.HasPrefix(p.Message, "want a mapping") &&
					!strings.HasPrefix(p.Message, "the file is empty") {
					t.Fatalf("problem names no field: %+v", p)
				}
			}
			return
		}
		body, err := json.Marshal(s)
		if err != nil {
			t.Fatalf("an accepted spec does not encode: %v", err)
		}
		again, err := ParseSpec("again.yaml", body)
		if err != nil {
			t.Fatalf("an accepted spec's encoding is rejected: %v\n%s", err, body)
		}
		if b2, _ := json.Marshal(again); !bytes.Equal(body, b2) {
			t.Fatalf("round trip changed the spec:\n%s\n%s", body, b2)
		}
	})
}
