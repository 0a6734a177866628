package api

import (
	"context"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpugov/gpugov/internal/policy"
	"github.com/gpugov/gpugov/internal/scheduling"
	"github.com/gpugov/gpugov/internal/vocab"
	"github.com/gpugov/gpugov/store"
)

// readyQueuesYAML sets every test queue's protection explicitly.
const readyQueuesYAML = `version: gpugov.policy/v1
queues:
  - {name: train, tier: standard, share: 1, max_wait_s: 7200, low_risk: true}
  - {name: inference, tier: production, share: 2, protected: true}
  - {name: delivery, tier: key-project, share: 1, max_wait_s: 1800, protected: false}
`

// activate stores and activates the policy in yaml as serve would at start.
func (e *testEnv) activate(yaml string) *policy.Policy {
	e.t.Helper()
	p, err := policy.Parse("policy.yaml", []byte(yaml))
	if err != nil {
		e.t.Fatal(err)
	}
	ctx := context.Background()
	if err := e.store.SavePolicyVersion(ctx, p.Hash(), p.Canonical()); err != nil {
		e.t.Fatal(err)
	}
	if err := e.store.ActivatePolicyVersion(ctx, p.Hash(), "serve", "loaded from policy.yaml"); err != nil {
		e.t.Fatal(err)
	}
	return p
}

// runJob submits validSpec (checkpointable unless plain) as alice, makes
// it run on both GPUs of node-1 and records a first checkpoint; it returns
// the job.
func (e *testEnv) runJob(plain bool) Job {
	e.t.Helper()
	spec := validSpec()
	if plain {
		spec["recovery"] = map[string]any{"checkpointable": false}
	}
	j := e.mustSubmit(tokAlice, spec)
	ctx := context.Background()
	now := time.Now()
	out, err := e.store.ApplyCycle(ctx, "c-"+j.ID, &scheduling.Result{PolicyVersion: "test", At: now,
		Placements: []scheduling.Placement{{JobID: j.ID, Pool: "a100-east", Node: "node-1", Rank: 1,
			GPUs: []scheduling.GPUShare{{UUID: "GPU-aaaa", Milli: 1000}, {UUID: "GPU-bbbb", Milli: 1000}}}}}, now)
	if err != nil || len(out.Placed) != 1 {
		e.t.Fatalf("placement: %+v, %v", out, err)
	}
	run, err := e.store.MarkRunning(ctx, j.ID, out.Placed[0].AllocationID, 0, now)
	if err != nil {
		e.t.Fatal(err)
	}
	// Its progress: a checkpoint, as the executor records one.
	if err := e.store.RecordCheckpoint(ctx, j.ID, run, scheduling.Checkpoint{At: now, Step: 1}); err != nil {
		e.t.Fatal(err)
	}
	return j
}

// TestDrillRoute: an operator's drill of a running checkpointable job is
// recorded as a drill and its workflow started; every refusal names why
// and stores nothing; a failed workflow start is a 202 with a note.
func TestDrillRoute(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t)
	e.activate(readyQueuesYAML)
	waiting := e.mustSubmit(tokAlice, validSpec())
	job := e.runJob(false)
	rows := e.counts()
	for _, tc := range []struct {
		name, token, id string
		status          int
		msg             string
	}{
		{"submitter", tokAlice, job.ID, http.StatusForbidden, "only an operator or an admin may call POST /v1/jobs/" + job.ID + "/drill (this token is"},
		{"unknown job", tokOps, "j-nosuchjob", http.StatusNotFound, `job "j-nosuchjob" not found`},
		{"waiting job", tokOps, waiting.ID, http.StatusConflict, "job is submitted; only a running job can be drilled"},
	} {
		r := e.do(http.MethodPost, "/v1/jobs/"+tc.id+"/drill", tc.token, ActionRequest{Reason: "earn evidence"})
		// The message starts with the reason: no route pattern (:id), no
		// "store: open drill of …:" prefix.
		if r.status != tc.status || !strings.HasPrefix(r.apiError(t).Message, tc.msg) {
			t.Errorf("%s: %d %s, want %d starting %q", tc.name, r.status, r.body, tc.status, tc.msg)
		}
	}
	if got := e.counts(); got["audit_log"] != rows["audit_log"] {
		t.Fatalf("refusals were audited: %v → %v", rows, got)
	}
	r := e.do(http.MethodPost, "/v1/jobs/"+job.ID+"/drill", tokOps, ActionRequest{Reason: "earn evidence for vision/simulated"})
	if r.status != http.StatusCreated {
		t.Fatalf("drill: %d %s", r.status, r.body)
	}
	var out DrillStarted
	r.decode(t, &out)
	d := out.Drill
	if d.Kind != "drill" || d.DrillActor != "olga" || d.VictimJobID != job.ID || d.ForJobID != "" || d.State != "in_progress" ||
		d.Reason != "earn evidence for vision/simulated" || out.Note != "" || !slices.Equal(e.wf.drills, []string{d.ID}) {
		t.Fatalf("drill %+v (started %v)", out, e.wf.drills)
	}
	r = e.do(http.MethodPost, "/v1/jobs/"+job.ID+"/drill", tokOps, nil)
	if r.status != http.StatusConflict || !strings.Contains(r.apiError(t).Message, "job is already in drill "+d.ID) {
		t.Errorf("second drill: %d %s", r.status, r.body)
	}
	var list PreemptionList
	e.do(http.MethodGet, "/v1/preemptions?kind=drill", tokOps, nil).decode(t, &list)
	if len(list.Preemptions) != 1 || list.Preemptions[0].ID != d.ID {
		t.Errorf("drills listed %+v", list)
	}
	if r := e.do(http.MethodGet, "/v1/preemptions?kind=rehearsal", tokOps, nil); r.status != http.StatusUnprocessableEntity || r.apiError(t).Field != "kind" {
		t.Errorf("bad kind: %d %s", r.status, r.body)
	}
}

// TestDrillRouteRefusesByPolicy: a job that is not checkpointable, or
// whose queue is inside a protection window of the active policy, is
// refused with a 409 naming why; a drill whose workflow cannot start is
// recorded and answered 202.
func TestDrillRouteRefusesByPolicy(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t)
	plain := e.runJob(true)
	r := e.do(http.MethodPost, "/v1/jobs/"+plain.ID+"/drill", tokAdmin, nil)
	if r.status != http.StatusConflict || !strings.Contains(r.apiError(t).Message, "job is not checkpointable") {
		t.Fatalf("plain job: %d %s", r.status, r.body)
	}
	e2 := newTestEnv(t)
	now := time.Now().UTC()
	e2.activate(readyQueuesYAML + "protection_windows:\n  - {name: quarter-close, start: " + now.Add(-time.Hour).Format(time.RFC3339) +
		", end: " + now.Add(time.Hour).Format(time.RFC3339) + ", queues: [train]}\n")
	job := e2.runJob(false)
	r = e2.do(http.MethodPost, "/v1/jobs/"+job.ID+"/drill", tokAdmin, nil)
	if r.status != http.StatusConflict || !strings.Contains(r.apiError(t).Message, "job's queue train is inside protection window quarter-close") {
		t.Fatalf("protection window: %d %s", r.status, r.body)
	}
	e3 := newTestEnv(t)
	e3.wf.drillErr = errTemporalDown
	job = e3.runJob(false)
	r = e3.do(http.MethodPost, "/v1/jobs/"+job.ID+"/drill", tokAdmin, nil)
	var out DrillStarted
	r.decode(t, &out)
	if r.status != http.StatusAccepted || out.Note != noteDrillDeferred || out.Drill.State != "in_progress" || out.Drill.Reason != "resume drill through the API" {
		t.Fatalf("deferred start: %d %s", r.status, r.body)
	}
}

// TestPoolReadinessRoute: the readiness JSON names every check with its
// numbers and the stage history; an unknown pool is a 404, a bad history
// a 422.
func TestPoolReadinessRoute(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t)
	p := e.activate(readyQueuesYAML)
	e.runJob(false)
	r := e.do(http.MethodGet, "/v1/pools/a100-east/readiness", tokAlice, nil)
	if r.status != http.StatusOK {
		t.Fatalf("%d %s", r.status, r.body)
	}
	var got PoolReadiness
	r.decode(t, &got)
	if got.Pool != "a100-east" || got.Stage != vocab.StageObserve || got.Ready || got.PolicyHash != p.Hash() ||
		!slices.Equal(got.Failed, []vocab.ReadinessCheck{vocab.ReadinessSaveRestore}) || len(got.Checks) != 8 {
		t.Fatalf("readiness %+v", got)
	}
	sr := got.Checks[3]
	if sr.Check != vocab.ReadinessSaveRestore || sr.Passed ||
		sr.Detail != "0 of 1 checkpointable profiles have 1+ verified resumes and a failure rate ≤ 20.0%; profile vision/simulated has 0 verified resumes, needs 1" {
		t.Errorf("save/restore %+v", sr)
	}
	if len(got.Profiles) != 1 || got.Profiles[0].Profile != "vision/simulated" || got.Profiles[0].Jobs != 1 {
		t.Errorf("profiles %+v", got.Profiles)
	}
	if got.Window.To.Sub(got.Window.From) != 24*time.Hour || !got.Previous.To.Equal(got.Window.From) || len(got.History) != 0 {
		t.Errorf("windows %+v %+v history %+v", got.Window, got.Previous, got.History)
	}
	if r := e.do(http.MethodGet, "/v1/pools/nosuch/readiness", tokOps, nil); r.status != http.StatusNotFound || r.apiError(t).Field != "pool" {
		t.Errorf("unknown pool: %d %s", r.status, r.body)
	}
	if r := e.do(http.MethodGet, "/v1/pools/a100-east/readiness?history=0", tokOps, nil); r.status != http.StatusUnprocessableEntity ||
		r.apiError(t).Field != "history" {
		t.Errorf("bad history: %d %s", r.status, r.body)
	}
}

// TestApplyPolicyStageGate: a policy that widens a pool's stage without
// readiness is refused with 422 not_ready listing the failed check, and
// stores nothing; an admin's override applies it, audited; once the
// evidence exists the widening passes; a narrowing always does. Each
// change is in the pool's history.
func TestApplyPolicyStageGate(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t)
	e.activate(readyQueuesYAML)
	job := e.runJob(false)
	before := e.policyRows()
	trial := readyQueuesYAML + "pools: {a100-east: {stage: trial}}\n"
	r := e.do(http.MethodPost, "/v1/policies", tokAdmin, PolicyApply{Policy: trial, Reason: "try trial"})
	if r.status != http.StatusUnprocessableEntity {
		t.Fatalf("widening without evidence: %d %s", r.status, r.body)
	}
	got := r.apiError(t)
	if got.Code != CodeNotReady || got.Field != "policy.pools.a100-east.stage" || len(got.Details) != 1 ||
		!strings.Contains(got.Details[0].Message, "pool a100-east: observe → trial refused: readiness check save_restore_proven failed: 0 of 1 checkpointable profiles") {
		t.Fatalf("refusal %+v", got)
	}
	if after := e.policyRows(); after != before {
		t.Fatalf("a refused apply changed the store: %v → %v", before, after)
	}
	ctx := context.Background()
	if g, _ := e.store.GovernedStage(ctx, "a100-east"); g != vocab.StageObserve {
		t.Fatalf("stage %s after the refusal", g)
	}
	// The admin's override applies it, audited with the reason.
	r = e.do(http.MethodPost, "/v1/policies", tokAdmin, PolicyApply{Policy: trial, Reason: "drill scheduled tonight", OverrideReadiness: true})
	if r.status != http.StatusOK {
		t.Fatalf("override: %d %s", r.status, r.body)
	}
	var applied PolicyApplied
	r.decode(t, &applied)
	if len(applied.Stages) != 1 || applied.Stages[0].Outcome != vocab.StageChangeOverridden || applied.Stages[0].Readiness == nil {
		t.Fatalf("override answer %+v", applied.Stages)
	}
	audit, _ := e.store.AuditFor(ctx, "a100-east", 0)
	var actions []string
	for _, a := range audit {
		actions = append(actions, a.Action+":"+a.Actor)
	}
	if !slices.Contains(actions, store.AuditOverrideReadiness+":root") || !slices.Contains(actions, store.AuditSetPoolStage+":root") {
		t.Errorf("audit %v", actions)
	}
	// With the evidence (a verified drill), trial → automate passes on its own.
	if err := e.store.RecordResumeEvidence(ctx, store.ResumeEvidence{Key: "drill-x", JobID: job.ID, Kind: vocab.EvidenceDrill,
		Outcome: vocab.ResumeVerified, At: time.Now()}); err != nil {
		t.Fatal(err)
	}
	automate := readyQueuesYAML + "pools: {a100-east: {stage: automate}}\n"
	r = e.do(http.MethodPost, "/v1/policies", tokAdmin, PolicyApply{Policy: automate, Reason: "evidence is in"})
	if r.status != http.StatusOK {
		t.Fatalf("widening with evidence: %d %s", r.status, r.body)
	}
	r.decode(t, &applied)
	if len(applied.Stages) != 1 || applied.Stages[0].Outcome != vocab.StageChangeApplied || !applied.Stages[0].Readiness.Ready {
		t.Fatalf("applied %+v", applied.Stages)
	}
	r = e.do(http.MethodPost, "/v1/policies", tokAdmin, PolicyApply{Policy: readyQueuesYAML + "pools: {a100-east: {stage: observe}}\n", Reason: "back off"})
	if r.status != http.StatusOK {
		t.Fatalf("narrowing: %d %s", r.status, r.body)
	}
	var rd PoolReadiness
	e.do(http.MethodGet, "/v1/pools/a100-east/readiness", tokOps, nil).decode(t, &rd)
	var hist []string
	for _, h := range rd.History {
		hist = append(hist, string(h.From)+">"+string(h.To)+":"+string(h.Outcome))
	}
	if want := []string{"automate>observe:applied", "trial>automate:applied", "observe>trial:overridden"}; !slices.Equal(hist, want) {
		t.Errorf("history %v, want %v", hist, want)
	}
	if !rd.Ready || rd.Stage != vocab.StageObserve || rd.History[2].Ready == nil || *rd.History[2].Ready ||
		!slices.Equal(rd.History[2].Failed, []vocab.ReadinessCheck{vocab.ReadinessSaveRestore}) {
		t.Errorf("readiness after %+v", rd)
	}
}
