package api

import (
	"fmt"
	"maps"
	"net/http"
	"strings"
	"testing"

	"github.com/gpugov/gpugov/internal/vocab"
)

// TestSpecListAndTextBounds sends specs whose lists and free text exceed
// their bounds (docs/design.md "Job spec bounds", issue #17): each used to
// be a 201 (50,000 prerequisites, a 989 KB body whose `gpugov why` printed
// 5.5 MB; 20,000 gpu_models or labels; a 100 KB command argument). Each is
// now a 422 naming the field, and nothing is stored.
func TestSpecListAndTextBounds(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t)
	env.mustSubmit(tokAlice, validSpec())
	before := env.counts()
	long := func(n int) string { return strings.Repeat("x", n) }
	items := func(n int, item func(i int) any) []any {
		out := make([]any, n)
		for i := range out {
			out[i] = item(i)
		}
		return out
	}
	pairs := func(n int, key func(i int) string, value string) map[string]string {
		out := map[string]string{}
		for i := range n {
			out[key(i)] = value
		}
		return out
	}
	for _, c := range []struct {
		name       string
		spec       map[string]any
		field, msg string
	}{
		{"50000 prerequisites", with(func(s map[string]any) {
			s["prerequisites"] = items(50000, func(i int) any { return map[string]any{"name": fmt.Sprintf("p%d", i)} })
		}), "prerequisites", "at most 64 items, got 50000"},
		{"65 prerequisites", with(func(s map[string]any) {
			s["prerequisites"] = items(vocab.MaxPrerequisites+1, func(i int) any { return map[string]any{"name": fmt.Sprintf("p%d", i), "ready": true} })
		}), "prerequisites", "at most 64 items, got 65"},
		{"long prerequisite name", with(func(s map[string]any) {
			s["prerequisites"] = []any{map[string]any{"name": long(100_000), "ready": true}}
		}), "prerequisites[0].name", "at most 253 bytes, got 100000"},
		{"long prerequisite message", with(func(s map[string]any) {
			s["prerequisites"] = []any{map[string]any{"name": "image", "ready": false, "message": long(100_000)}}
		}), "prerequisites[0].message", "at most 1024 bytes, got 100000"},
		{"20000 gpu_models", with(func(s map[string]any) {
			res(s)["gpu_models"] = items(20000, func(i int) any { return fmt.Sprintf("m%d", i) })
		}), "resources.gpu_models", "at most 32 items, got 20000"},
		{"20000 labels", with(func(s map[string]any) {
			res(s)["labels"] = pairs(20000, func(i int) string { return fmt.Sprintf("k%d", i) }, "v")
		}), "resources.labels", "20000 pairs, at most 64 allowed"},
		{"long label key", with(func(s map[string]any) {
			res(s)["labels"] = map[string]string{long(64): "v"}
		}), "resources.labels", `key "` + long(64) + `" must be a non-blank string of at most 63 bytes`},
		{"long label value", with(func(s map[string]any) {
			res(s)["labels"] = map[string]string{"team": long(257)}
		}), "resources.labels.team", "value of 257 bytes, at most 256 allowed"},
		{"10 KB command argument", with(func(s map[string]any) {
			s["command"] = []string{"python", long(10_000)}
		}), "command[1]", "at most 4096 bytes, got 10000"},
		{"257 command words", with(func(s map[string]any) {
			s["command"] = items(vocab.MaxCommandArgs+1, func(int) any { return "a" })
		}), "command", "at most 256 items, got 257"},
		{"command over 64 KiB in all", with(func(s map[string]any) {
			s["command"] = items(17, func(int) any { return long(4000) })
		}), "command", "at most 65536 bytes in all, got 68000"},
		{"129 env variables", with(func(s map[string]any) {
			s["env"] = pairs(vocab.MaxEnvVars+1, func(i int) string { return fmt.Sprintf("V%d", i) }, "1")
		}), "env", "129 variables, at most 128 allowed"},
		{"long env value", with(func(s map[string]any) {
			s["env"] = map[string]string{"TOKEN": long(4097)}
		}), "env.TOKEN", "at most 4096 bytes, got 4097"},
	} {
		r := env.submit(tokAlice, c.spec, "")
		if r.status != http.StatusUnprocessableEntity {
			t.Errorf("%s: status %d, want 422: %.300s", c.name, r.status, r.body)
			continue
		}
		if e := r.apiError(t); e.Field != c.field || e.Message != c.msg || len(e.Details) > 1 {
			t.Errorf("%s: %s: %s (%d details), want %s: %s", c.name, e.Field, e.Message, len(e.Details), c.field, c.msg)
		}
	}
	if after := env.counts(); !maps.Equal(before, after) {
		t.Errorf("refused submissions changed the database: %v → %v", before, after)
	}
	// At the bounds a spec is accepted.
	env.mustSubmit(tokAlice, with(func(s map[string]any) {
		s["prerequisites"] = items(vocab.MaxPrerequisites, func(i int) any { return map[string]any{"name": fmt.Sprintf("p%d", i), "ready": true} })
		res(s)["gpu_models"] = items(vocab.MaxGPUModels, func(i int) any { return fmt.Sprintf("m%d", i) })
		res(s)["labels"] = pairs(vocab.MaxJobLabels, func(i int) string { return fmt.Sprintf("k%d", i) }, long(vocab.MaxLabelValueLength))
		s["command"] = items(16, func(int) any { return long(vocab.MaxCommandArgLength) })
	}))
}

// TestActionReasonBound checks that a cancel, hold, release or amend
// reason over vocab.MaxReasonLength bytes is a 422 naming `reason` and
// changes nothing: a 100 KB hold reason was copied into the held wait's
// detail and the audit log.
func TestActionReasonBound(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t)
	j := env.mustSubmit(tokAlice, validSpec())
	before := env.counts()
	reason := strings.Repeat("r", 100_000)
	for _, c := range []struct {
		method, path string
		body         any
	}{
		{http.MethodPost, "/v1/jobs/" + j.ID + "/hold", ActionRequest{Reason: reason}},
		{http.MethodPost, "/v1/jobs/" + j.ID + "/release", ActionRequest{Reason: reason}},
		{http.MethodPost, "/v1/jobs/" + j.ID + "/cancel", ActionRequest{Reason: reason}},
		{http.MethodPatch, "/v1/jobs/" + j.ID, map[string]any{"resources": validSpec()["resources"], "reason": reason}},
	} {
		r := env.do(c.method, c.path, tokAlice, c.body)
		if r.status != http.StatusUnprocessableEntity {
			t.Errorf("%s %s: status %d, want 422: %.300s", c.method, c.path, r.status, r.body)
			continue
		}
		if e := r.apiError(t); e.Field != "reason" || e.Message != "at most 1024 bytes, got 100000" {
			t.Errorf("%s %s: %s: %s", c.method, c.path, e.Field, e.Message)
		}
	}
	if after := env.counts(); !maps.Equal(before, after) {
		t.Errorf("refused actions changed the database: %v → %v", before, after)
	}
	var got Job
	env.do(http.MethodGet, "/v1/jobs/"+j.ID, tokAlice, nil).decode(t, &got)
	if got.State != j.State {
		t.Errorf("job state %s after refused actions, want %s", got.State, j.State)
	}
	// A reason at the bound is taken.
	if r := env.do(http.MethodPost, "/v1/jobs/"+j.ID+"/hold", tokAlice, ActionRequest{Reason: reason[:vocab.MaxReasonLength]}); r.status != http.StatusOK {
		t.Errorf("hold with a %d-byte reason: %d %.300s", vocab.MaxReasonLength, r.status, r.body)
	}
}

// TestSubmitProjectName checks that an operator's or admin's project is a
// name by the recovery profile's rule: {"project":"a b/c"} was a 201 whose
// recovery profile became "a b/c/simulated".
func TestSubmitProjectName(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t)
	before := env.counts()
	for _, p := range []string{"a b/c", "-lead", ".", strings.Repeat("p", 129), "a/b"} {
		r := env.submit(tokAdmin, with(func(s map[string]any) { s["project"] = p }), "")
		if r.status != http.StatusUnprocessableEntity {
			t.Errorf("project %.40q: status %d, want 422: %.300s", p, r.status, r.body)
			continue
		}
		if e := r.apiError(t); e.Field != "project" || !strings.Contains(e.Message, "is not a project name") {
			t.Errorf("project %.40q: %s: %s", p, e.Field, e.Message)
		}
	}
	if after := env.counts(); !maps.Equal(before, after) {
		t.Errorf("refused submissions changed the database: %v → %v", before, after)
	}
	j := env.mustSubmit(tokOps, with(func(s map[string]any) { s["project"] = "team-a.v2_x" }))
	if j.Project != "team-a.v2_x" {
		t.Errorf("project = %q", j.Project)
	}
}

// TestRunSecondsAndGPUsWording checks two refusals of issue #17: a
// positive run_seconds below one second (1e-300 was a 201: a simulated job
// that computes nothing), and a missing resources.gpus, which was told
// "must be ≥ 1 …, got 0" as if the caller had written 0.
func TestRunSecondsAndGPUsWording(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t)
	before := env.counts()
	for _, c := range []struct {
		name       string
		spec       map[string]any
		field, msg string
	}{
		{"tiny run_seconds", with(func(s map[string]any) { s["run_seconds"] = 1e-300 }),
			"run_seconds", "must be 0 or 1..315360000 seconds, got 1e-300 (a run time is declared in seconds)"},
		{"half a second with a command", with(func(s map[string]any) { s["run_seconds"] = 0.5; s["command"] = []string{"true"} }),
			"run_seconds", "must be 0 or 1..315360000 seconds, got 0.5 (a run time is declared in seconds)"},
		{"gpus absent", with(func(s map[string]any) { delete(res(s), "gpus") }),
			"resources.gpus", "required: a whole number from 1 to 4096 (gpugov schedules GPU jobs only)"},
	} {
		r := env.submit(tokAlice, c.spec, "")
		if r.status != http.StatusUnprocessableEntity {
			t.Errorf("%s: status %d, want 422: %.300s", c.name, r.status, r.body)
			continue
		}
		if e := r.apiError(t); e.Field != c.field || e.Message != c.msg {
			t.Errorf("%s: %s: %s, want %s: %s", c.name, e.Field, e.Message, c.field, c.msg)
		}
	}
	if after := env.counts(); !maps.Equal(before, after) {
		t.Errorf("refused submissions changed the database: %v → %v", before, after)
	}
	env.mustSubmit(tokAlice, with(func(s map[string]any) { s["run_seconds"] = 1.5 }))
}

// TestInvalidUTF8Refused checks that a body with invalid UTF-8 in a string
// is a 422 naming the field: encoding/json stored {"gpu_models":["A100\xff"]}
// as "A100\uFFFD" with a 201.
func TestInvalidUTF8Refused(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t)
	j := env.mustSubmit(tokAlice, validSpec())
	before := env.counts()
	base := `"queue":"train","run_seconds":60`
	for _, c := range []struct{ method, path, body, field string }{
		{http.MethodPost, "/v1/jobs", `{` + base + `,"resources":{"gpus":1,"pool":"a100-east","gpu_models":["A100","H100` + "\xff" + `"]}}`, "resources.gpu_models[1]"},
		{http.MethodPost, "/v1/jobs", `{` + base + `,"resources":{"gpus":1,"pool":"a100-east","labels":{"team":"` + "\xc3(" + `"}}}`, "resources.labels.team"},
		{http.MethodPost, "/v1/jobs", `{` + base + `,"resources":{"gpus":1,"pool":"a100-east"},"prerequisites":[{"name":"im` + "\xe2\x82" + `age","ready":true}]}`, "prerequisites[0].name"},
		{http.MethodPost, "/v1/jobs/" + j.ID + "/hold", `{"reason":"` + "\xff" + `"}`, "reason"},
		{http.MethodPut, "/v1/jobs/" + j.ID + "/prerequisites/image", `{"ready":false,"message":"bad ` + "\xfe" + `"}`, "message"},
	} {
		r := env.do(c.method, c.path, tokAlice, c.body)
		if r.status != http.StatusUnprocessableEntity {
			t.Errorf("%q: status %d, want 422: %.300s", c.body, r.status, r.body)
			continue
		}
		if e := r.apiError(t); e.Field != c.field || !strings.HasPrefix(e.Message, "not valid UTF-8") {
			t.Errorf("%q: %s: %s, want %s: not valid UTF-8", c.body, e.Field, e.Message, c.field)
		}
	}
	if after := env.counts(); !maps.Equal(before, after) {
		t.Errorf("refused requests changed the database: %v → %v", before, after)
	}
	// A U+FFFD the caller wrote (valid UTF-8, or the \ufffd escape) is theirs.
	env.mustSubmit(tokAlice, `{`+base+`,"resources":{"gpus":1,"pool":"a100-east","labels":{"a":"\uFFFD","b":"\ufffd"}}}`)
}
