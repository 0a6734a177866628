package api

import (
	"net/http"
	"testing"
)

// TestNULCharacterIsRefusedNamingTheField: PostgreSQL text cannot hold U+0000,
// so a NUL in a body string, a path parameter or a query parameter is a 4xx
// naming where it was (not a 500 from the store), and nothing is stored.
func TestNULCharacterIsRefusedNamingTheField(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t)
	before := e.counts()
	body := `{"queue":"train","resources":{"gpus":1,"pool":"a\u0000b"},"run_seconds":60}`
	cases := []struct {
		method, path string
		body         any
		status       int
		field        string
	}{
		{http.MethodPost, "/v1/jobs", body, http.StatusUnprocessableEntity, "resources.pool"},
		{http.MethodPost, "/v1/jobs", `{"queue":"train","resources":{"gpus":1,"pool":"p"},"command":["run","x\u0000"]}`,
			http.StatusUnprocessableEntity, "command[1]"},
		{http.MethodGet, "/v1/jobs/%00", nil, http.StatusBadRequest, "id"},
		{http.MethodGet, "/v1/jobs?queue=%00", nil, http.StatusBadRequest, "queue"},
		{http.MethodGet, "/v1/preemptions/%00", nil, http.StatusBadRequest, "id"},
	}
	for _, c := range cases {
		r := e.do(c.method, c.path, "tok-admin", c.body)
		if r.status != c.status {
			t.Errorf("%s %s: status %d %s, want %d", c.method, c.path, r.status, r.body, c.status)
			continue
		}
		if got := r.apiError(t).Field; got != c.field {
			t.Errorf("%s %s: field %q, want %q", c.method, c.path, got, c.field)
		}
	}
	after := e.counts()
	for k, v := range before {
		if after[k] != v {
			t.Errorf("%s rows %d -> %d after refused requests", k, v, after[k])
		}
	}
}

// TestNULFieldPath checks the path nulField reports, and that documents with
// no NUL are not flagged (an escaped backslash before "u0000" is not a NUL).
func TestNULFieldPath(t *testing.T) {
	for doc, want := range map[string]string{
		`{"a":{"b":["x","y\u0000"]}}`: "a.b[1]",
		`{"k\u0000":1}`:               "k\u0000",
		`{"a":"\\u0000"}`:             "",
		`{"a":"plain"}`:               "",
	} {
		if got := nulField([]byte(doc)); got != want {
			t.Errorf("nulField(%s) = %q, want %q", doc, got, want)
		}
	}
}
