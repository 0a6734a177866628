package api

import (
	"context"
	"maps"
	"net/http"
	"testing"
)

// A key given twice in one JSON object is a 400 naming it, at any depth,
// for every route that decodes through decodeStrict: encoding/json keeps
// the last one, so {"queue":"train",...,"queue":"inference"} was a 201 in
// the protected production queue while the body read as a train job.
// Nothing is stored on refusal.
func TestRepeatedJSONKeyIsRefusedNamingTheField(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t)
	before := env.counts()
	rest := `"resources":{"gpus":1,"pool":"a100-east"},"run_seconds":60`
	cases := []struct{ body, field string }{
		{`{"queue":"train",` + rest + `,"queue":"inference"}`, "queue"},
		{`{"queue":"train","resources":{"gpus":1,"pool":"a100-east","gpus":2},"run_seconds":60}`, "resources.gpus"},
		{`{"queue":"train",` + rest + `,"resources":{"gpus":2}}`, "resources"},
		{`{"queue":"train",` + rest + `,"prerequisites":[{"name":"a","ready":true},{"name":"b","ready":false,"ready":true}]}`, "prerequisites[1].ready"},
		{`{"queue":"train","resources":{"gpus":1,"pool":"a100-east","labels":{"x":"1","x":"2"}},"run_seconds":60}`, "resources.labels.x"},
	}
	for _, c := range cases {
		r := env.submit(tokOps, c.body, "")
		if r.status != http.StatusBadRequest {
			t.Fatalf("%s: status %d, want 400: %s", c.body, r.status, r.body)
		}
		if e := r.apiError(t); e.Field != c.field || e.Message != "repeated key" || e.Code != CodeMalformed {
			t.Errorf("%s: error %+v, want %s: repeated key", c.body, e, c.field)
		}
	}
	if after := env.counts(); !maps.Equal(before, after) {
		t.Fatalf("refused bodies changed the store: %v -> %v", before, after)
	}

	// Another decodeStrict route: PATCH /v1/jobs/{id} (the amend request).
	j := env.mustSubmit(tokAlice, validSpec())
	r := env.do(http.MethodPatch, "/v1/jobs/"+j.ID, tokAlice, `{"resources":{"gpus":1,"pool":"a100-east"},"reason":"a","reason":"b"}`)
	if r.status != http.StatusBadRequest {
		t.Fatalf("amend: status %d, want 400: %s", r.status, r.body)
	}
	if e := r.apiError(t); e.Field != "reason" || e.Message != "repeated key" {
		t.Errorf("amend: error %+v, want reason: repeated key", e)
	}
	got, err := env.store.GetJob(context.Background(), j.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.Request.GPUs != 2 {
		t.Errorf("refused amend changed the job's GPUs to %d", got.Request.GPUs)
	}

	// A key differing from a field's name only in case (which encoding/json
	// matches ignoring case, keeping the last) is refused naming it; a map's
	// keys are the caller's, so labels "x" and "X" are two labels.
	before = env.counts()
	for _, c := range []struct{ body, field string }{
		{`{"queue":"train",` + rest + `,"QUEUE":"inference"}`, "QUEUE"},
		{`{"Queue":"inference",` + rest + `}`, "Queue"},
		{`{"queue":"train","resources":{"GPUs":2,"pool":"a100-east"},"run_seconds":60}`, "resources.GPUs"},
	} {
		r := env.submit(tokOps, c.body, "")
		if r.status != http.StatusBadRequest {
			t.Fatalf("%s: status %d, want 400: %s", c.body, r.status, r.body)
		}
		if e := r.apiError(t); e.Field != c.field || e.Code != CodeMalformed {
			t.Errorf("%s: error %+v, want field %s", c.body, e, c.field)
		}
	}
	if after := env.counts(); !maps.Equal(before, after) {
		t.Fatalf("refused case-variant keys changed the store: %v -> %v", before, after)
	}
	labels := `{"queue":"train","resources":{"gpus":1,"pool":"a100-east","labels":{"x":"1","X":"2"}},"run_seconds":60}`
	if r := env.submit(tokAlice, labels, ""); r.status != http.StatusCreated {
		t.Fatalf("labels differing in case: status %d: %s", r.status, r.body)
	}

	// Equal keys in different objects are no repeat.
	ok := `{"queue":"train","resources":{"gpus":1,"pool":"a100-east","labels":{"queue":"x"}},"run_seconds":60,"prerequisites":[{"name":"a","ready":true},{"name":"b","ready":true}]}`
	if r := env.submit(tokAlice, ok, ""); r.status != http.StatusCreated {
		t.Fatalf("distinct objects: status %d: %s", r.status, r.body)
	}
}
