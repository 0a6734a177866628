package api

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"reflect"
	"strings"
	"testing"

	"github.com/gpugov/gpugov/internal/vocab"
	"github.com/gpugov/gpugov/store"
)

// newActionTestEnv is newTestEnv whose server also knows tokAgent.
func newActionTestEnv(t *testing.T) *testEnv {
	t.Helper()
	env := newTestEnv(t)
	toks, err := NewTokens(map[string]Principal{
		tokAlice: {Name: "alice", Project: "vision", Role: vocab.RoleSubmitter},
		tokBob:   {Name: "bob", Project: "speech", Role: vocab.RoleSubmitter},
		tokOps:   {Name: "olga", Project: "platform", Role: vocab.RoleOperator},
		tokAdmin: {Name: "root", Project: "platform", Role: vocab.RoleAdmin},
		tokAgent: {Name: "agent-node-1", Project: "platform", Role: vocab.RoleAgent, Node: "node-1"},
	})
	if err != nil {
		t.Fatal(err)
	}
	env.server = New(StoreFrom(env.store), env.wf, toks, WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	return env
}

// jobState is what a rejected action must leave as it was: the stored job
// (less its update time, which only a change moves anyway) and its audit.
type jobState struct {
	job   store.Job
	audit []store.AuditEntry
}

func (e *testEnv) jobState(id string) jobState {
	e.t.Helper()
	ctx := context.Background()
	j, err := e.store.GetJob(ctx, id)
	if err != nil {
		e.t.Fatal(err)
	}
	a, err := e.store.AuditFor(ctx, id, 0)
	if err != nil {
		e.t.Fatal(err)
	}
	return jobState{job: *j, audit: a}
}

// badCase is one rejected request: its answer's status, code and field.
type badCase struct {
	name          string
	token, method string
	path          string
	body          any
	status        int
	field         string
}

// checkRejected sends each case and checks it is answered status with the
// field named, and that the job, its audit and the table counts are unchanged
// and the scheduler was not woken.
func (e *testEnv) checkRejected(t *testing.T, jobID string, cases []badCase) {
	t.Helper()
	before, counts, notified := e.jobState(jobID), e.counts(), e.wf.notified
	for _, c := range cases {
		r := e.do(c.method, c.path, c.token, c.body)
		if r.status != c.status {
			t.Errorf("%s: status %d, want %d: %s", c.name, r.status, c.status, r.body)
			continue
		}
		if got := r.apiError(t); got.Field != c.field {
			t.Errorf("%s: field %q, want %q (%s)", c.name, got.Field, c.field, got.Message)
		}
	}
	if after := e.jobState(jobID); !reflect.DeepEqual(before, after) {
		t.Errorf("a rejected request changed the job:\nbefore %+v\nafter  %+v", before, after)
	}
	if got := e.counts(); !reflect.DeepEqual(got, counts) {
		t.Errorf("row counts %v, want %v", got, counts)
	}
	if e.wf.notified != notified {
		t.Errorf("the scheduler was woken %d times by rejected requests", e.wf.notified-notified)
	}
}

func notReadySpec() map[string]any {
	spec := validSpec()
	spec["prerequisites"] = []any{
		map[string]any{"name": "image", "ready": true},
		map[string]any{"name": "data", "ready": false, "message": "not staged"},
	}
	return spec
}

// TestSetPrerequisiteRoute sets a prerequisite ready through the API: the
// job shows it, the audit has who with before and after, the scheduler is
// woken, and the roles the route allows may call it.
func TestSetPrerequisiteRoute(t *testing.T) {
	t.Parallel()
	env := newActionTestEnv(t)
	j := env.mustSubmit(tokAlice, notReadySpec())
	path := "/v1/jobs/" + j.ID + "/prerequisites/data"
	notified := env.wf.notified

	r := env.do(http.MethodPut, path, tokAlice, map[string]any{"ready": true, "message": "staged to /scratch"})
	if r.status != http.StatusOK {
		t.Fatalf("owner: %d %s", r.status, r.body)
	}
	var got Job
	r.decode(t, &got)
	if len(got.Prerequisites) != 2 || !got.Prerequisites[1].Ready || got.Prerequisites[1].Message != "staged to /scratch" {
		t.Fatalf("prerequisites %+v", got.Prerequisites)
	}
	if env.wf.notified != notified+1 {
		t.Fatalf("scheduler woken %d times, want 1", env.wf.notified-notified)
	}
	audit := env.jobState(j.ID).audit
	last := audit[len(audit)-1]
	if last.Action != store.AuditSetPrerequisite || last.Actor != "alice" ||
		last.Evidence["before"].(map[string]any)["ready"] != false || last.Evidence["after"].(map[string]any)["ready"] != true {
		t.Fatalf("audit %+v", last)
	}
	// The same values again: 200, nothing audited, no wake-up.
	if r := env.do(http.MethodPut, path, tokAlice, map[string]any{"ready": true, "message": "staged to /scratch"}); r.status != http.StatusOK {
		t.Fatalf("repeat: %d %s", r.status, r.body)
	}
	if n := len(env.jobState(j.ID).audit); n != len(audit) || env.wf.notified != notified+1 {
		t.Fatalf("repeat audited or woke: %d entries, %d wake-ups", n, env.wf.notified-notified)
	}
	for i, tok := range []string{tokAgent, tokOps, tokAdmin} {
		r := env.do(http.MethodPut, path, tok, map[string]any{"ready": i%2 == 1, "message": tok})
		if r.status != http.StatusOK {
			t.Fatalf("%s: %d %s", tok, r.status, r.body)
		}
	}
	actors := []string{}
	for _, a := range env.jobState(j.ID).audit[len(audit):] {
		actors = append(actors, a.Actor)
	}
	if strings.Join(actors, ",") != "agent-node-1,olga,root" {
		t.Fatalf("actors %v", actors)
	}
}

// TestSetPrerequisiteRejects checks that every bad request is a 4xx naming
// the field (or the prerequisite) and changes nothing.
func TestSetPrerequisiteRejects(t *testing.T) {
	t.Parallel()
	env := newActionTestEnv(t)
	j := env.mustSubmit(tokAlice, notReadySpec())
	path := "/v1/jobs/" + j.ID + "/prerequisites/data"
	put := func(name, token, path string, body any, status int, field string) badCase {
		return badCase{name: name, token: token, method: http.MethodPut, path: path, body: body, status: status, field: field}
	}
	env.checkRejected(t, j.ID, []badCase{
		put("ready missing", tokAlice, path, map[string]any{"message": "x"}, 400, "ready"),
		put("ready not a bool", tokAlice, path, `{"ready": "yes"}`, 400, "ready"),
		put("unknown field", tokAlice, path, `{"ready": true, "colour": "blue"}`, 400, "colour"),
		put("empty body", tokAlice, path, "", 400, ""),
		put("message too long", tokAlice, path, map[string]any{"ready": true, "message": strings.Repeat("x", MaxPrerequisiteMessage+1)}, 422, "message"),
		put("unknown prerequisite", tokAlice, "/v1/jobs/"+j.ID+"/prerequisites/weights", map[string]any{"ready": true}, 404, "name"),
		put("unknown job", tokAlice, "/v1/jobs/j-missing/prerequisites/data", map[string]any{"ready": true}, 404, "id"), // the path's job ID
		put("another project", tokBob, path, map[string]any{"ready": true}, 403, ""),
		put("no token", "", path, map[string]any{"ready": true}, 401, ""),
	})
	if r := env.do(http.MethodPut, "/v1/jobs/"+j.ID+"/prerequisites/weights", tokAlice, map[string]any{"ready": true}); !strings.Contains(r.apiError(t).Message, `"weights"`) {
		t.Fatalf("404 does not name the prerequisite: %s", r.body)
	}
	if err := env.store.CancelJob(context.Background(), j.ID, "alice", "test"); err != nil {
		t.Fatal(err)
	}
	env.checkRejected(t, j.ID, []badCase{put("final job", tokAlice, path, map[string]any{"ready": true}, 409, "")})
}

// TestAmendJobRoute amends a waiting job's request: the job shows the new
// request with its submit time kept, the audit has before and after, the
// scheduler is woken; an agent may not amend.
func TestAmendJobRoute(t *testing.T) {
	t.Parallel()
	env := newActionTestEnv(t)
	j := env.mustSubmit(tokAlice, validSpec())
	notified := env.wf.notified
	resources := map[string]any{"gpus": 1, "gpu_milli": 500, "pool": "a100-east", "gpu_models": []string{"A100-SXM4-80GB"}}
	r := env.do(http.MethodPatch, "/v1/jobs/"+j.ID, tokAlice, map[string]any{"resources": resources, "reason": "half a GPU is enough"})
	if r.status != http.StatusOK {
		t.Fatalf("amend: %d %s", r.status, r.body)
	}
	var got Job
	r.decode(t, &got)
	if got.Resources.GPUs != 1 || got.Resources.GPUMilli != 500 || got.Resources.Topology != "any" ||
		!got.SubmittedAt.Equal(j.SubmittedAt) || got.WaitingSince == nil || !got.WaitingSince.Equal(*j.WaitingSince) {
		t.Fatalf("amended job %+v", got)
	}
	if env.wf.notified != notified+1 {
		t.Fatalf("scheduler woken %d times, want 1", env.wf.notified-notified)
	}
	audit := env.jobState(j.ID).audit
	last := audit[len(audit)-1]
	if last.Action != store.AuditAmendResources || last.Actor != "alice" || last.Reason != "half a GPU is enough" ||
		last.Evidence["before"].(map[string]any)["gpus"] != float64(2) || last.Evidence["after"].(map[string]any)["gpu_milli"] != float64(500) {
		t.Fatalf("audit %+v", last)
	}
	if r := env.do(http.MethodPatch, "/v1/jobs/"+j.ID, tokOps, map[string]any{"resources": resources}); r.status != http.StatusOK {
		t.Fatalf("operator, same request: %d %s", r.status, r.body)
	}
	if n := len(env.jobState(j.ID).audit); n != len(audit) || env.wf.notified != notified+1 {
		t.Fatalf("an unchanged request audited or woke: %d entries", n)
	}
}

// TestAmendJobRejects checks that every bad amendment is a 4xx naming the
// field — the submission's own decoder and validator answer — and changes
// nothing; a placed job is a 409.
func TestAmendJobRejects(t *testing.T) {
	t.Parallel()
	env := newActionTestEnv(t)
	j := env.mustSubmit(tokAlice, validSpec())
	path := "/v1/jobs/" + j.ID
	patch := func(name, token string, body any, status int, field string) badCase {
		return badCase{name: name, token: token, method: http.MethodPatch, path: path, body: body, status: status, field: field}
	}
	res := func(kv ...any) map[string]any {
		m := map[string]any{"gpus": 1, "pool": "a100-east"}
		for i := 0; i+1 < len(kv); i += 2 {
			m[kv[i].(string)] = kv[i+1]
		}
		return map[string]any{"resources": m}
	}
	env.checkRejected(t, j.ID, []badCase{
		patch("resources missing", tokAlice, map[string]any{"reason": "x"}, 400, "resources"),
		patch("unknown top-level field", tokAlice, map[string]any{"resources": map[string]any{"gpus": 1, "pool": "a100-east"}, "queue": "train"}, 400, "queue"),
		patch("unknown resource field", tokAlice, res("gpu_mili", 500), 400, "resources.gpu_mili"),
		patch("wrong type", tokAlice, `{"resources": {"gpus": "two", "pool": "a100-east"}}`, 400, "resources.gpus"),
		patch("no GPUs", tokAlice, res("gpus", 0), 422, "resources.gpus"),
		patch("gpus above int32", tokAlice, res("gpus", int64(2147483648)), 422, "resources.gpus"),
		patch("memory too large", tokAlice, res("memory_mib", int64(MaxMemoryMiB)+1), 422, "resources.memory_mib"),
		patch("share too large", tokAlice, res("gpu_milli", 1500), 422, "resources.gpu_milli"),
		patch("share with 2 GPUs", tokAlice, res("gpus", 2, "gpu_milli", 500), 422, "resources.gpu_milli"),
		patch("bad topology", tokAlice, res("topology", "ring"), 422, "resources.topology"),
		patch("negative memory", tokAlice, res("gpu_memory_mib", -1), 422, "resources.gpu_memory_mib"),
		patch("empty model", tokAlice, res("gpu_models", []string{""}), 422, "resources.gpu_models[0]"),
		patch("no pool", tokAlice, map[string]any{"resources": map[string]any{"gpus": 1}}, 422, "resources.pool"),
		patch("model too long", tokAlice, res("gpu_models", []string{strings.Repeat("m", MaxGPUModelLength+1)}), 422, "resources.gpu_models[0]"),
		patch("another pool", tokAlice, res("pool", "h100-west"), 422, "resources.pool"),
		patch("another project", tokBob, res(), 403, ""),
		{name: "agent", token: tokAgent, method: http.MethodPatch, path: path, body: res(), status: 403},
		{name: "unknown job", token: tokAlice, method: http.MethodPatch, path: "/v1/jobs/j-missing", body: res(), status: 404, field: "id"},
	})
	// Placed: 409, nothing changes.
	if _, err := env.store.Pool().Exec(context.Background(), `UPDATE jobs SET state = 'placed' WHERE id = $1`, j.ID); err != nil {
		t.Fatal(err)
	}
	env.checkRejected(t, j.ID, []badCase{patch("placed job", tokAlice, res(), 409, "")})
}
