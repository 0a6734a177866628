package api

import (
	"net/http"
	"strings"
	"testing"
)

// A body with a UTF-8 byte order mark, or YAML sent under a Content-Type
// other than JSON, is a 400 that says so: both were encoding/json's
// "invalid character 'ï' …" / "invalid character 'q' …". JSON sent without
// a Content-Type, or with a charset, is still read.
func TestBodyNotJSONIsNamed(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t)
	spec := `{"queue":"train","resources":{"gpus":1,"pool":"a100-east"},"run_seconds":60}`
	for _, c := range []struct {
		name, body, ct, says string
	}{
		{"BOM", "\xef\xbb\xbf" + spec, "application/json", "UTF-8 byte order mark"},
		{"YAML", "queue: train\nresources: {gpus: 1, pool: a100-east}\n", "application/yaml", `the body must be JSON (Content-Type: application/json); got Content-Type "application/yaml"`},
	} {
		r := e.do(http.MethodPost, "/v1/jobs", tokAlice, c.body, "Content-Type", c.ct)
		if r.status != http.StatusBadRequest {
			t.Errorf("%s: %d %s, want 400", c.name, r.status, r.body)
			continue
		}
		if b := r.apiError(t); b.Code != CodeMalformed || !strings.Contains(b.Message, c.says) {
			t.Errorf("%s: %+v, want it to say %q", c.name, b, c.says)
		}
	}
	for _, ct := range []string{"", "application/json; charset=utf-8", "text/plain"} {
		r := e.do(http.MethodPost, "/v1/jobs", tokAlice, spec, "Content-Type", ct)
		if r.status != http.StatusCreated && r.status != http.StatusOK {
			t.Errorf("JSON with Content-Type %q: %d %s", ct, r.status, r.body)
		}
	}
}
