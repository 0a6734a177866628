package api

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpugov/gpugov/internal/experiment"
	"github.com/gpugov/gpugov/internal/policy"
	"github.com/gpugov/gpugov/internal/queuereport"
	"github.com/gpugov/gpugov/internal/scheduling"
	"github.com/gpugov/gpugov/internal/temporalx"
	"github.com/gpugov/gpugov/internal/vocab"
	"github.com/gpugov/gpugov/store"
	"github.com/gpugov/gpugov/store/storetest"
)

// experimentWorkflows is recordingWorkflows plus the experiment calls
// (ExperimentWorkflows): it records the starts and signals and can be told
// to fail, as Temporal cannot be on cue. The real client is tested in
// workflows/.
type experimentWorkflows struct {
	*recordingWorkflows
	mu        sync.Mutex
	started   []string
	signals   []string // "id action actor reason"
	startErr  error
	signalErr error
}

func (w *experimentWorkflows) StartExperiment(_ context.Context, id string) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.startErr != nil {
		return w.startErr
	}
	w.started = append(w.started, id)
	return nil
}

func (w *experimentWorkflows) SignalExperiment(_ context.Context, id, action, actor, reason string) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.signalErr != nil {
		return w.signalErr
	}
	w.signals = append(w.signals, strings.Join([]string{id, action, actor, reason}, " "))
	return nil
}

// experimentEnv is the API on a real store whose active policy version is
// policy.Default() (the baseline of every experiment here), with
// experimentWorkflows standing for Temporal.
type experimentEnv struct {
	*testEnv
	ewf      *experimentWorkflows
	baseline string // the active version's hash
}

func newExperimentEnv(t *testing.T) *experimentEnv {
	t.Helper()
	env := newTestEnv(t)
	ctx := context.Background()
	p := policy.Default()
	if err := env.store.SavePolicyVersion(ctx, p.Hash(), p.Canonical()); err != nil {
		t.Fatal(err)
	}
	if err := env.store.ActivatePolicyVersion(ctx, p.Hash(), "serve", "test baseline"); err != nil {
		t.Fatal(err)
	}
	ewf := &experimentWorkflows{recordingWorkflows: env.wf}
	env.server = New(StoreFrom(env.store), ewf, testTokens(t), WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	return &experimentEnv{testEnv: env, ewf: ewf, baseline: p.Hash()}
}

// Candidate policy files (resolved over policy.Default, the baseline).
const (
	agingCandidate   = "version: gpugov.policy/v1\naging: {enabled: true, step_points: 200}\n"
	twoGroups        = "version: gpugov.policy/v1\naging: {step_points: 200}\npreemption: {grace_s: 30}\n"
	badCandidate     = "version: gpugov.policy/v1\naging:\n  cap_points: -5\n"
	sameAsBaseline   = "version: gpugov.policy/v1\n"
	experimentPoolID = "a100-east"
)

// validExperiment is a valid spec trying candidate (a policy file's text)
// on pool a100-east.
func validExperiment(candidate string) map[string]any {
	return map[string]any{
		"name":       "aging-step-200",
		"hypothesis": "faster aging shortens the experiment tier's longest wait",
		"candidate":  map[string]any{"policy": candidate},
		"scope":      map[string]any{"pools": []string{experimentPoolID}},
		"window_s":   3600,
		"expected":   map[string]any{"metric": "longest_wait_s", "tier": "experiment", "direction": "decrease", "change": 0.3},
		"rollback": []any{
			map[string]any{"name": "production P95", "metric": "wait_p95_s", "tier": "production", "above_baseline_factor": 1.2},
			map[string]any{"metric": "false_reclaims", "above": 0},
		},
	}
}

// experimentCounts counts the rows a create may write.
func (e *experimentEnv) experimentCounts() map[string]int {
	e.t.Helper()
	out := map[string]int{}
	for _, table := range []string{"experiments", "experiment_events", "policy_versions", "audit_log"} {
		var n int
		q := "SELECT count(*) FROM " + table
		if table == "audit_log" {
			q += " WHERE action <> '" + store.AuditAccessDenied + "'" // a refusal's own entry
		}
		if err := e.store.Pool().QueryRow(context.Background(), q).Scan(&n); err != nil {
			e.t.Fatalf("count %s: %v", table, err)
		}
		out[table] = n
	}
	return out
}

// create posts spec as the admin and returns the answer.
func (e *experimentEnv) create(spec any) response {
	e.t.Helper()
	return e.do(http.MethodPost, "/v1/experiments", tokAdmin, spec)
}

// mustCreate creates spec and requires a 201.
func (e *experimentEnv) mustCreate(spec any) Experiment {
	e.t.Helper()
	r := e.create(spec)
	if r.status != http.StatusCreated {
		e.t.Fatalf("create: %d %s", r.status, r.body)
	}
	var x Experiment
	r.decode(e.t, &x)
	return x
}

// A valid experiment is stored (its candidate as a policy version, the
// baseline the active one, the groups it changes) and its workflow started;
// the API switches nothing.
func TestCreateExperiment(t *testing.T) {
	t.Parallel()
	env := newExperimentEnv(t)
	x := env.mustCreate(validExperiment(agingCandidate))
	cand, err := policy.Parse("c", []byte(agingCandidate))
	if err != nil {
		t.Fatal(err)
	}
	switch {
	case !strings.HasPrefix(x.ID, "exp-"):
		t.Errorf("id %q", x.ID)
	case x.State != vocab.ExperimentScheduled || x.Verdict != "":
		t.Errorf("state %q verdict %q, want scheduled and none", x.State, x.Verdict)
	case x.BaselineHash != env.baseline || x.CandidateHash != cand.Hash():
		t.Errorf("baseline %s candidate %s, want %s and %s", x.BaselineHash, x.CandidateHash, env.baseline, cand.Hash())
	case !slices.Equal(x.Groups, []vocab.PolicyGroup{vocab.PolicyAging}):
		t.Errorf("groups %v, want [aging]", x.Groups)
	case x.WorkflowID != "experiment/"+x.ID || x.CreatedBy != "root":
		t.Errorf("workflow %q by %q", x.WorkflowID, x.CreatedBy)
	case x.Spec.Candidate.Policy != "" || x.Spec.Candidate.Hash != cand.Hash():
		t.Errorf("stored candidate %+v, want the hash only", x.Spec.Candidate)
	}
	if !slices.Equal(env.ewf.started, []string{x.ID}) {
		t.Errorf("workflows started %v, want [%s]", env.ewf.started, x.ID)
	}
	ctx := context.Background()
	if _, err := env.store.GetPolicyVersion(ctx, cand.Hash()); err != nil {
		t.Errorf("candidate version not stored: %v", err)
	}
	if h, _ := env.store.ActivePolicyHash(ctx); h != env.baseline {
		t.Errorf("active version %s after create, want the baseline %s: the API switches nothing", h, env.baseline)
	}

	// The same candidate named by its hash (a prefix) in another pool's
	// experiment is accepted too; the detail carries the timeline.
	r := env.do(http.MethodGet, "/v1/experiments/"+x.ID, tokOps, nil)
	if r.status != http.StatusOK {
		t.Fatalf("get: %d %s", r.status, r.body)
	}
	var d ExperimentDetail
	r.decode(t, &d)
	if d.ID != x.ID || len(d.Events) == 0 || d.Events[0].Kind != store.ExperimentEventCreated {
		t.Errorf("detail %+v, want the created event first", d)
	}
	r = env.do(http.MethodGet, "/v1/experiments", tokOps, nil)
	var list ExperimentList
	r.decode(t, &list)
	if r.status != http.StatusOK || len(list.Experiments) != 1 || list.Experiments[0].ID != x.ID {
		t.Errorf("list: %d %s", r.status, r.body)
	}
}

// A candidate named by a stored version's hash (or a unique prefix) is
// accepted; an unknown hash is a 400 naming candidate.hash.
func TestCreateExperimentByHash(t *testing.T) {
	t.Parallel()
	env := newExperimentEnv(t)
	cand, _ := policy.Parse("c", []byte(agingCandidate))
	ctx := context.Background()
	if err := env.store.SavePolicyVersion(ctx, cand.Hash(), cand.Canonical()); err != nil {
		t.Fatal(err)
	}
	before := env.experimentCounts()
	spec := validExperiment("")
	spec["candidate"] = map[string]any{"hash": strings.Repeat("ab", 32)}
	r := env.create(spec)
	if r.status != http.StatusBadRequest || r.apiError(t).Field != "candidate.hash" {
		t.Fatalf("unknown hash: %d %s, want 400 naming candidate.hash", r.status, r.body)
	}
	if after := env.experimentCounts(); !mapsEqual(before, after) {
		t.Fatalf("a refused create stored rows: %v → %v", before, after)
	}
	spec["candidate"] = map[string]any{"hash": cand.Hash()[:12]}
	x := env.mustCreate(spec)
	if x.CandidateHash != cand.Hash() || x.Spec.Candidate.Hash != cand.Hash() {
		t.Fatalf("candidate %s (%+v), want %s", x.CandidateHash, x.Spec.Candidate, cand.Hash())
	}
}

func mapsEqual(a, b map[string]int) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// Every kind of bad input is a 400 naming the field, and nothing is stored
// or started.
func TestCreateExperimentBadInput(t *testing.T) {
	t.Parallel()
	env := newExperimentEnv(t)
	with := func(edit func(map[string]any)) map[string]any {
		s := validExperiment(agingCandidate)
		edit(s)
		return s
	}
	cases := []struct {
		name    string
		spec    any
		field   string
		message string // a part of the field's message
	}{
		{"unknown metric", with(func(s map[string]any) {
			s["expected"].(map[string]any)["metric"] = "wait_p42_s"
		}), "expected.metric", "wait_p42_s"},
		{"unknown rollback metric", with(func(s map[string]any) {
			s["rollback"] = []any{map[string]any{"metric": "nonsense", "above": 1}}
		}), "rollback[0].metric", "nonsense"},
		{"window shorter than one cycle", with(func(s map[string]any) { s["window_s"] = 1 }), "window_s", ""},
		{"candidate that does not load", with(func(s map[string]any) {
			s["candidate"] = map[string]any{"policy": badCandidate}
		}), "candidate.policy", "line 3: aging.cap_points"},
		{"two variable groups without override", with(func(s map[string]any) {
			s["candidate"] = map[string]any{"policy": twoGroups}
		}), "candidate", "preemption"},
		{"candidate equal to the baseline", with(func(s map[string]any) {
			s["candidate"] = map[string]any{"policy": sameAsBaseline}
		}), "candidate", "baseline"},
		{"no candidate", with(func(s map[string]any) { s["candidate"] = map[string]any{} }), "candidate", ""},
		{"unknown field", with(func(s map[string]any) {
			s["expected"].(map[string]any)["treshold"] = 3
		}), "expected.treshold", ""},
		{"unknown pool", with(func(s map[string]any) {
			s["scope"] = map[string]any{"pools": []string{"nowhere"}}
		}), "scope.pools[0]", "nowhere"},
		{"unknown scope queue", with(func(s map[string]any) {
			s["scope"] = map[string]any{"pools": []string{experimentPoolID}, "queues": []string{"train", "nosuch"}}
		}), "scope.queues[1]", `queue "nosuch" is not a stored queue`},
		{"unknown expected queue", with(func(s map[string]any) {
			s["expected"] = map[string]any{"metric": "longest_wait_s", "queue": "nosuch", "direction": "decrease", "change": 0.3}
		}), "expected.queue", "nosuch"},
		{"unknown rollback queue", with(func(s map[string]any) {
			s["rollback"] = []any{map[string]any{"metric": "wait_p95_s", "queue": "trian", "above": 600}}
		}), "rollback[0].queue", "delivery, inference, train"},
		{"start in the past", with(func(s map[string]any) {
			s["start"] = time.Now().Add(-time.Hour).UTC().Format(time.RFC3339)
		}), "start", "is in the past (now "},
		{"baseline ending after an omitted start", with(func(s map[string]any) {
			s["baseline"] = map[string]any{"from": time.Now().Add(-time.Hour).UTC().Format(time.RFC3339),
				"to": time.Now().Add(time.Hour).UTC().Format(time.RFC3339)}
		}), "baseline.to", "the baseline must end before the candidate's window begins"},
	}
	before := env.experimentCounts()
	for _, tc := range cases {
		r := env.create(tc.spec)
		if r.status != http.StatusBadRequest {
			t.Errorf("%s: %d %s, want 400", tc.name, r.status, r.body)
			continue
		}
		e := r.apiError(t)
		all := append([]FieldError{{Field: e.Field, Message: e.Message}}, e.Details...)
		i := slices.IndexFunc(all, func(f FieldError) bool { return f.Field == tc.field })
		if i < 0 || !strings.Contains(all[i].Message, tc.message) {
			t.Errorf("%s: %s, want field %s with %q", tc.name, r.body, tc.field, tc.message)
		}
	}
	// Several problems are all listed.
	r := env.create(with(func(s map[string]any) {
		s["window_s"] = 1
		s["expected"].(map[string]any)["metric"] = "wait_p42_s"
		s["candidate"] = map[string]any{"policy": badCandidate}
	}))
	if e := r.apiError(t); r.status != http.StatusBadRequest || len(e.Details) < 3 {
		t.Errorf("three problems: %d %s, want each in details", r.status, r.body)
	}
	if after := env.experimentCounts(); !mapsEqual(before, after) {
		t.Errorf("refused creates stored rows: %v → %v", before, after)
	}
	if len(env.ewf.started) != 0 {
		t.Errorf("refused creates started workflows %v", env.ewf.started)
	}
}

// One experiment at a time: the policy in force is service-wide, so while
// one holds its pools a second — in the same pool or another, with its
// candidate in force or not — is a 409 naming the first and saying why;
// an override lets a two-group candidate in, audited with its reason.
func TestCreateExperimentConflictAndOverride(t *testing.T) {
	t.Parallel()
	env := newExperimentEnv(t)
	ctx := context.Background()
	if err := env.store.UpsertInventory(ctx, []scheduling.Pool{storetest.Pool("h100-west", vocab.StageObserve, 1, 2)}); err != nil {
		t.Fatal(err)
	}
	first := env.mustCreate(validExperiment(agingCandidate))
	before := env.experimentCounts()
	spec := validExperiment(twoGroups)
	spec["override"] = map[string]any{"reason": "the grace and the aging change ship together"}
	elsewhere := validExperiment(twoGroups)
	elsewhere["override"] = spec["override"]
	elsewhere["scope"] = map[string]any{"pools": []string{"h100-west"}}
	sameCandidate := validExperiment(agingCandidate)
	sameCandidate["scope"] = elsewhere["scope"]
	refused := func(name string, spec map[string]any) {
		t.Helper()
		r := env.create(spec)
		if e := r.apiError(t); r.status != http.StatusConflict || !strings.Contains(e.Message, first.ID) ||
			!strings.Contains(e.Message, "the policy in force is service-wide: one experiment at a time") {
			t.Fatalf("%s: %d %s, want 409 naming %s and why", name, r.status, r.body, first.ID)
		}
	}
	refused("second experiment in the pool", spec)
	refused("second experiment in another pool", elsewhere)
	if after := env.experimentCounts(); !mapsEqual(before, after) {
		t.Fatalf("the refused creates stored rows: %v → %v", before, after)
	}
	// Once the first's candidate is in force, a second with that candidate
	// is still refused for the first, not as "the baseline".
	m := &experiment.Measurement{Window: queuereport.Window{From: time.Now().Add(-time.Hour), To: time.Now()}}
	if _, err := env.store.RecordExperimentBaseline(ctx, first.ID, m, time.Now()); err != nil {
		t.Fatal(err)
	}
	if _, err := env.store.SwitchExperiment(ctx, first.ID, time.Now()); err != nil {
		t.Fatal(err)
	}
	before = env.experimentCounts()
	refused("the first's candidate in another pool", sameCandidate)
	if after := env.experimentCounts(); !mapsEqual(before, after) {
		t.Fatalf("the refused creates stored rows: %v → %v", before, after)
	}

	// Once the first is aborted (as its workflow records it) the pool is free.
	abortExperiment(t, env.store, first.ID)
	x := env.mustCreate(spec)
	if !slices.Equal(x.Groups, []vocab.PolicyGroup{vocab.PolicyAging, vocab.PolicyPreemption}) || x.Spec.Override == nil {
		t.Fatalf("override: groups %v override %+v", x.Groups, x.Spec.Override)
	}
	entries, err := env.store.AuditFor(ctx, x.ID, 100)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, a := range entries {
		if a.Action == store.AuditOverrideOneVariable && a.Actor == "root" && strings.Contains(a.Reason, "ship together") {
			found = true
		}
	}
	if !found {
		t.Fatalf("no %s audit entry by root with the reason: %+v", store.AuditOverrideOneVariable, entries)
	}
}

// abortExperiment aborts an experiment through the store step its
// workflow runs on an abort.
func abortExperiment(t *testing.T, st *store.Store, id string) {
	t.Helper()
	if _, err := st.AbortExperiment(context.Background(), id, "root", "test", time.Now()); err != nil {
		t.Fatal(err)
	}
}

// finishKept runs the store steps of a kept candidate, as the workflow's
// activities do: the baseline measured, the switch, the kept verdict.
func finishKept(t *testing.T, st *store.Store, id string) {
	t.Helper()
	ctx := context.Background()
	now := time.Now().UTC()
	m := &experiment.Measurement{Window: queuereport.Window{From: now.Add(-time.Hour), To: now}}
	if _, err := st.RecordExperimentBaseline(ctx, id, m, now); err != nil {
		t.Fatal(err)
	}
	if _, err := st.SwitchExperiment(ctx, id, now); err != nil {
		t.Fatal(err)
	}
	if _, err := st.FinishExperiment(ctx, id, &experiment.Outcome{Verdict: vocab.VerdictKept, Reason: "met"}, now.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
}

// When the workflow cannot be started the experiment is aborted with an
// event saying why (it holds no pool), and the answer is 503.
func TestCreateExperimentStartFails(t *testing.T) {
	t.Parallel()
	env := newExperimentEnv(t)
	env.ewf.startErr = errTemporalDown
	r := env.create(validExperiment(agingCandidate))
	if r.status != http.StatusServiceUnavailable {
		t.Fatalf("failed start: %d %s, want 503", r.status, r.body)
	}
	ctx := context.Background()
	list, err := env.store.ListExperiments(ctx, 10)
	if err != nil || len(list) != 1 {
		t.Fatalf("experiments %v %v", list, err)
	}
	x := list[0]
	if x.State != vocab.ExperimentAborted || !strings.Contains(r.apiError(t).Message, x.ID) {
		t.Fatalf("experiment %s is %s after a failed start, want aborted and named: %s", x.ID, x.State, r.body)
	}
	events, err := env.store.ExperimentEvents(ctx, x.ID)
	if err != nil {
		t.Fatal(err)
	}
	if last := events[len(events)-1]; last.Kind != store.ExperimentEventAborted || !strings.Contains(last.Detail, "workflow") {
		t.Fatalf("last event %+v, want aborted saying the workflow did not start", last)
	}
	if h, _ := env.store.ActivePolicyHash(ctx); h != env.baseline {
		t.Fatalf("active %s, want the baseline", h)
	}
	env.ewf.startErr = nil
	env.mustCreate(validExperiment(agingCandidate))
}

// Promote takes only a kept, unpromoted experiment; abort an active or
// kept one. Both signal the workflow with who and why and answer 202.
func TestPromoteAndAbortExperiment(t *testing.T) {
	t.Parallel()
	env := newExperimentEnv(t)
	x := env.mustCreate(validExperiment(agingCandidate))
	decide := func(action, id, reason string) response {
		return env.do(http.MethodPost, "/v1/experiments/"+id+"/"+action, tokAdmin, map[string]any{"reason": reason})
	}
	if r := decide("promote", x.ID, "looks good"); r.status != http.StatusConflict || !strings.Contains(r.apiError(t).Message, "scheduled") {
		t.Fatalf("promote a scheduled experiment: %d %s, want 409", r.status, r.body)
	}
	if r := decide("abort", x.ID, ""); r.status != http.StatusBadRequest || r.apiError(t).Field != "reason" {
		t.Fatalf("abort without a reason: %d %s, want 400 naming reason", r.status, r.body)
	}
	if r := decide("promote", "exp-nosuchthing", "x"); r.status != http.StatusNotFound || r.apiError(t).Field != "id" {
		t.Fatalf("promote unknown: %d %s", r.status, r.body)
	}
	if len(env.ewf.signals) != 0 {
		t.Fatalf("refused decisions signalled %v", env.ewf.signals)
	}
	env.ewf.signalErr = errTemporalDown
	if r := decide("abort", x.ID, "wrong pool"); r.status != http.StatusServiceUnavailable {
		t.Fatalf("abort with Temporal down: %d %s, want 503", r.status, r.body)
	}
	env.ewf.signalErr = temporalx.ErrExperimentClosed
	if r := decide("abort", x.ID, "wrong pool"); r.status != http.StatusConflict || !strings.Contains(r.apiError(t).Message, "ended") {
		t.Fatalf("abort with the workflow ended: %d %s, want 409", r.status, r.body)
	}
	env.ewf.signalErr = nil
	if r := decide("abort", x.ID, "wrong pool"); r.status != http.StatusAccepted {
		t.Fatalf("abort: %d %s", r.status, r.body)
	}

	finishKept(t, env.store, x.ID)
	if r := decide("promote", x.ID, "kept: make it the baseline"); r.status != http.StatusAccepted {
		t.Fatalf("promote a kept experiment: %d %s", r.status, r.body)
	}
	want := []string{x.ID + " abort root wrong pool", x.ID + " promote root kept: make it the baseline"}
	if !slices.Equal(env.ewf.signals, want) {
		t.Fatalf("signals %q, want %q", env.ewf.signals, want)
	}

	if _, err := env.store.PromoteExperiment(context.Background(), x.ID, "root", "kept", time.Now()); err != nil {
		t.Fatal(err)
	}
	for _, action := range []string{"promote", "abort"} {
		if r := decide(action, x.ID, "again"); r.status != http.StatusConflict || !strings.Contains(r.apiError(t).Message, "promoted") {
			t.Errorf("%s a promoted experiment: %d %s, want 409", action, r.status, r.body)
		}
	}
	// After the promotion the candidate is the baseline: the next round tries another.
	y := env.mustCreate(validExperiment("version: gpugov.policy/v1\naging: {enabled: true, step_points: 200, cap_points: 4000}\n"))
	abortExperiment(t, env.store, y.ID)
	for _, action := range []string{"promote", "abort"} {
		if r := decide(action, y.ID, "again"); r.status != http.StatusConflict {
			t.Errorf("%s an aborted experiment: %d %s, want 409", action, r.status, r.body)
		}
	}
}

// Creating, promoting and aborting take an admin; every person may read.
func TestExperimentRoles(t *testing.T) {
	t.Parallel()
	env := newExperimentEnv(t)
	x := env.mustCreate(validExperiment(agingCandidate))
	before := env.experimentCounts()
	for _, tc := range []struct {
		method, path, token string
		body                any
		want                int
	}{
		{http.MethodPost, "/v1/experiments", tokOps, validExperiment(agingCandidate), http.StatusForbidden},
		{http.MethodPost, "/v1/experiments", tokAlice, validExperiment(agingCandidate), http.StatusForbidden},
		{http.MethodPost, "/v1/experiments/" + x.ID + "/abort", tokOps, map[string]any{"reason": "x"}, http.StatusForbidden},
		{http.MethodPost, "/v1/experiments/" + x.ID + "/promote", tokAlice, map[string]any{"reason": "x"}, http.StatusForbidden},
		{http.MethodGet, "/v1/experiments", tokAlice, nil, http.StatusOK}, // submitters read, read-only
		{http.MethodGet, "/v1/experiments/" + x.ID, tokBob, nil, http.StatusOK},
		{http.MethodGet, "/v1/experiments", "", nil, http.StatusUnauthorized},
		{http.MethodGet, "/v1/experiments", tokOps, nil, http.StatusOK},
		{http.MethodGet, "/v1/experiments/" + x.ID, tokAdmin, nil, http.StatusOK},
		{http.MethodGet, "/v1/experiments/exp-nosuchthing", tokOps, nil, http.StatusNotFound},
		{http.MethodGet, "/v1/experiments?limit=0", tokOps, nil, http.StatusUnprocessableEntity},
	} {
		if r := env.do(tc.method, tc.path, tc.token, tc.body); r.status != tc.want {
			t.Errorf("%s %s as %s: %d %s, want %d", tc.method, tc.path, tc.token, r.status, r.body, tc.want)
		}
	}
	if after := env.experimentCounts(); !mapsEqual(before, after) || len(env.ewf.signals) != 0 {
		t.Errorf("refused calls changed something: %v → %v, signals %v", before, after, env.ewf.signals)
	}
	if r := env.do(http.MethodPost, "/v1/experiments", tokOps, validExperiment(agingCandidate)); !strings.Contains(r.apiError(t).Message, "(this token is an operator)") {
		t.Errorf("403 message %s, want the role with its article", r.body)
	}
}

// While an experiment holds a pool, POST /v1/policies is a 409 naming it
// (the change would end the experiment) and changes nothing; an admin's
// override_reason lets it through, recorded in the activation's audit
// evidence. Re-applying the active version changes nothing and is allowed.
func TestApplyPolicyWhileAnExperimentHoldsAPool(t *testing.T) {
	t.Parallel()
	env := newExperimentEnv(t)
	x := env.mustCreate(validExperiment(agingCandidate))
	before := env.experimentCounts()
	const other = "version: gpugov.policy/v1\npreemption: {grace_s: 30}\n"
	r := env.do(http.MethodPost, "/v1/policies", tokAdmin, PolicyApply{Policy: other, Reason: "shorter grace"})
	if e := r.apiError(t); r.status != http.StatusConflict || e.Field != "override_reason" || !strings.Contains(e.Message, x.ID) {
		t.Fatalf("apply during an experiment: %d %s, want 409 naming %s", r.status, r.body, x.ID)
	}
	ctx := context.Background()
	if after := env.experimentCounts(); !mapsEqual(before, after) {
		t.Fatalf("the refused apply stored rows: %v → %v", before, after)
	}
	if h, _ := env.store.ActivePolicyHash(ctx); h != env.baseline {
		t.Fatalf("active %s, want the baseline %s", h, env.baseline)
	}
	if r := env.do(http.MethodPost, "/v1/policies", tokAdmin, PolicyApply{Policy: sameAsBaseline, Reason: "same"}); r.status != http.StatusOK {
		t.Fatalf("re-applying the active version: %d %s", r.status, r.body)
	}
	r = env.do(http.MethodPost, "/v1/policies", tokAdmin, PolicyApply{Policy: other, Reason: "shorter grace", OverrideReason: "incident: grace must drop now"})
	if r.status != http.StatusOK {
		t.Fatalf("apply with override: %d %s", r.status, r.body)
	}
	var out PolicyApplied
	r.decode(t, &out)
	audit, err := env.store.AuditFor(ctx, out.Hash, 0)
	if err != nil || len(audit) != 1 || audit[0].Evidence["override_experiment"] != x.ID ||
		audit[0].Evidence["override_reason"] != "incident: grace must drop now" {
		t.Fatalf("activation audit %+v %v, want the override recorded", audit, err)
	}
}

// overrideEnded requires experiment id to be aborted now, its last event a
// policy_changed naming version hash, and its workflow sent an abort.
func (e *experimentEnv) overrideEnded(id, hash string) {
	e.t.Helper()
	r := e.do(http.MethodGet, "/v1/experiments/"+id, tokAdmin, nil)
	var d ExperimentDetail
	r.decode(e.t, &d)
	if r.status != http.StatusOK || d.State != vocab.ExperimentAborted || len(d.Events) == 0 {
		e.t.Fatalf("experiment %s after the override: %d %s, want aborted", id, r.status, r.body)
	}
	if last := d.Events[len(d.Events)-1]; last.Kind != store.ExperimentEventPolicyChanged || !strings.Contains(last.Detail, shortHash(hash)) {
		e.t.Fatalf("last event %+v, want policy_changed naming %s", last, shortHash(hash))
	}
	e.ewf.mu.Lock()
	defer e.ewf.mu.Unlock()
	if !slices.ContainsFunc(e.ewf.signals, func(s string) bool { return strings.HasPrefix(s, id+" "+ActionAbort+" root overridden: ") }) {
		e.t.Fatalf("signals %q, want an abort of %s", e.ewf.signals, id)
	}
}

// An override ends the experiment at once, whatever its step: scheduled
// (the baseline is no longer in force), running and finished kept (the
// candidate is no longer in force) — aborted with a policy_changed event
// naming the applied version, and its workflow told, rather than at its
// next check.
func TestPolicyOverrideEndsTheExperimentAtOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, step := range []string{"scheduled", "running", "kept"} {
		env := newExperimentEnv(t)
		x := env.mustCreate(validExperiment(agingCandidate))
		now := time.Now().UTC()
		m := &experiment.Measurement{Window: queuereport.Window{From: now.Add(-time.Hour), To: now}}
		switch step {
		case "running":
			if _, err := env.store.RecordExperimentBaseline(ctx, x.ID, m, now); err != nil {
				t.Fatal(err)
			}
			if _, err := env.store.SwitchExperiment(ctx, x.ID, now); err != nil {
				t.Fatal(err)
			}
		case "kept":
			finishKept(t, env.store, x.ID)
		}
		r := env.do(http.MethodPost, "/v1/policies", tokAdmin, PolicyApply{Policy: "version: gpugov.policy/v1\npreemption: {grace_s: 30}\n",
			Reason: "shorter grace", OverrideReason: "incident"})
		var out PolicyApplied
		r.decode(t, &out)
		if r.status != http.StatusOK || !out.Changed {
			t.Fatalf("%s: apply with override: %d %s", step, r.status, r.body)
		}
		env.overrideEnded(x.ID, out.Hash)
		if h, _ := env.store.ActivePolicyHash(ctx); h != out.Hash {
			t.Fatalf("%s: active %s, want the applied %s (the experiment restores nothing)", step, h, out.Hash)
		}
		// The pools are free: the next experiment may start.
		env.mustCreate(validExperiment(agingCandidate + "preemption: {grace_s: 30}\n"))
	}
}

// A start within one cycle of now (a client's clock, the request's way) is
// accepted and kept, and so are stored queues; an earlier start and unknown
// queues are refused above (TestCreateExperimentBadInput).
func TestCreateExperimentStartNowOnStoredQueues(t *testing.T) {
	t.Parallel()
	env := newExperimentEnv(t)
	spec := validExperiment(agingCandidate)
	start := time.Now().Add(-time.Second).UTC().Truncate(time.Second)
	spec["start"] = start.Format(time.RFC3339)
	spec["scope"] = map[string]any{"pools": []string{experimentPoolID}, "queues": []string{"train", "inference"}}
	spec["rollback"] = []any{map[string]any{"metric": "wait_p95_s", "queue": "inference", "above": 600}}
	if x := env.mustCreate(spec); !x.StartAt.Equal(start) || !slices.Equal(x.Spec.Scope.Queues, []string{"train", "inference"}) {
		t.Fatalf("start_at %s, want %s; scope %+v", x.StartAt, start, x.Spec.Scope)
	}
}
