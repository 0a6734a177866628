package api

import (
	"net/http"
	"testing"
)

// BenchmarkSubmitJob measures one POST /v1/jobs end to end on real
// PostgreSQL: decode, validate, queue lookup, the CreateJob transaction (row
// and audit entry) and the (recorded) workflow start.
func BenchmarkSubmitJob(b *testing.B) {
	env := newTestEnv(b)
	spec := validSpec()
	for b.Loop() {
		if r := env.submit(tokAlice, spec, ""); r.status != http.StatusCreated {
			b.Fatalf("%d %s", r.status, r.body)
		}
	}
}

// BenchmarkGetJob measures GET /v1/jobs/{id} of a waiting job: the job row
// plus its wait events.
func BenchmarkGetJob(b *testing.B) {
	env := newTestEnv(b)
	j := env.mustSubmit(tokAlice, validSpec())
	for b.Loop() {
		if r := env.do(http.MethodGet, "/v1/jobs/"+j.ID, tokAlice, nil); r.status != http.StatusOK {
			b.Fatalf("%d %s", r.status, r.body)
		}
	}
}
