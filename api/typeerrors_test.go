package api

import (
	"net/http"
	"strings"
	"testing"
)

// A value of the wrong JSON type is a 400 naming the field by its full
// path in the caller's words, not Go's: it was "run_seconds: expected
// float64, got JSON string", and "prerequisites.ready" without the index.
func TestTypeErrorsInTheCallersWords(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t)
	base := `"queue":"train","resources":{"gpus":1,"pool":"a100-east"},"run_seconds":60`
	for _, c := range []struct{ body, want string }{
		{`{"queue":"train","resources":{"gpus":1,"pool":"a100-east"},"run_seconds":"60"}`, "run_seconds: must be a number, got a string"},
		{`{"queue":5}`, "queue: must be a string, got a number"},
		// A bounded field is told its own range (vocab.Bounds), not its Go
		// type's: 1.0 (Python's json.dumps of a float) and 1e0 were "from
		// -9223372036854775808 to 9223372036854775807", and so was
		// 99999999999999999999, whose real bound is 1..4096.
		{`{"queue":"train","resources":{"gpus":1.5,"pool":"a100-east"}}`, "resources.gpus: must be a whole number from 1 to 4096, got 1.5"},
		{`{"queue":"train","resources":{"gpus":1.0,"pool":"a100-east"}}`, "resources.gpus: must be a whole number from 1 to 4096, got 1.0"},
		{`{"queue":"train","resources":{"gpus":1e0,"pool":"a100-east"}}`, "resources.gpus: must be a whole number from 1 to 4096, got 1e0"},
		{`{"queue":"train","resources":{"gpus":9223372036854775808,"pool":"a100-east"}}`,
			"resources.gpus: must be a whole number from 1 to 4096, got 9223372036854775808"},
		{`{"queue":"train","resources":{"gpus":99999999999999999999,"pool":"a100-east"}}`,
			"resources.gpus: must be a whole number from 1 to 4096, got 99999999999999999999"},
		{`{"queue":"train","resources":{"gpus":1,"pool":"a100-east","cpu_milli":0.5}}`,
			"resources.cpu_milli: must be a whole number from 0 to 1073741824, got 0.5"},
		{`{"queue":"train","resources":{"gpus":1,"pool":"a100-east"},"run_seconds":1e400}`,
			"run_seconds: must be a number from 0 to 315360000, got 1e400"},
		{`{"queue":"train","resources":{"gpus":"2","pool":"a100-east"}}`, "resources.gpus: must be a whole number, got a string"},
		{`{` + base + `,"command":"python train.py"}`, "command: must be a list, got a string"},
		{`{` + base + `,"command":["python",1]}`, "command[1]: must be a string, got a number"},
		{`{"queue":"train","resources":{"gpus":1,"pool":"a100-east","labels":{"a":"x","b":1}}}`, "resources.labels.b: must be a string, got a number"},
		{`{"queue":"train","resources":{"gpus":1,"pool":"a100-east","labels":[]}}`, "resources.labels: must be an object, got a list"},
		{`{"queue":"train","resources":"a100-east"}`, "resources: must be an object, got a string"},
		{`{` + base + `,"hold":"yes"}`, "hold: must be true or false, got a string"},
		{`{` + base + `,"prerequisites":[{"name":"a","ready":true},{"name":"b","ready":1}]}`, "prerequisites[1].ready: must be true or false, got a number"},
		{`{` + base + `,"run_seconds":true}`, "run_seconds: must be a number, got true or false"},
	} {
		r := env.submit(tokAlice, c.body, "")
		if r.status != http.StatusBadRequest {
			t.Errorf("%s: status %d, want 400: %s", c.body, r.status, r.body)
			continue
		}
		e := r.apiError(t)
		if got := e.Field + ": " + e.Message; got != c.want {
			t.Errorf("%s:\n got %q\nwant %q", c.body, got, c.want)
		}
		if strings.Contains(e.Message, "float64") || strings.Contains(e.Message, "JSON string") {
			t.Errorf("%s: Go words in %q", c.body, e.Message)
		}
	}

	// A checkpoint's time given as a number named no field ("invalid JSON:
	// Time.UnmarshalJSON: input is not a JSON string").
	var cp Checkpoint
	if e := decodeStrict(strings.NewReader(`{"at":5,"step":1,"location":"x"}`), &cp, false); e == nil ||
		e.Error() != "at: must be an RFC 3339 time string (e.g. 2026-01-05T00:00:00Z)" {
		t.Errorf("time as a number: %v", e)
	}
	if e := decodeStrict(strings.NewReader(`{"at":"2026-01-05T00:00:00Z","step":"1","location":"x"}`), &cp, false); e == nil ||
		e.Error() != "step: must be a whole number, got a string" {
		t.Errorf("step as a string: %v", e)
	}
	// A node report's bounded fields are told their range too, a list's
	// index read as "[]" against the bounds table's "samples[].gpu_percent".
	var rep SamplesReport
	if e := decodeStrict(strings.NewReader(`{"samples":[{"gpu_uuid":"G","at":"2026-01-05T00:00:00Z","gpu_percent":50.5}]}`), &rep, false); e == nil ||
		e.Error() != "samples[0].gpu_percent: must be a whole number from 0 to 100, got 50.5" {
		t.Errorf("gpu_percent 50.5: %v", e)
	}
}
