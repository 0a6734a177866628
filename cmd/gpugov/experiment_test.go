package main

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpugov/gpugov/api"
	"github.com/gpugov/gpugov/internal/experiment"
	"github.com/gpugov/gpugov/internal/policy"
	"github.com/gpugov/gpugov/internal/queuereport"
	"github.com/gpugov/gpugov/internal/scheduling"
	"github.com/gpugov/gpugov/internal/vocab"
	"github.com/gpugov/gpugov/store"
	"github.com/gpugov/gpugov/store/storetest"
)

// experimentWorkflows stands in for Temporal behind the API for the
// experiment commands: it accepts every call and records the experiment
// starts and signals (the real client is tested in workflows/).
type experimentWorkflows struct {
	startedWorkflows
	mu      sync.Mutex
	started []string
	signals []string // "id action actor reason"
}

func (w *experimentWorkflows) StartExperiment(_ context.Context, id string) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.started = append(w.started, id)
	return nil
}

func (w *experimentWorkflows) SignalExperiment(_ context.Context, id, action, actor, reason string) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.signals = append(w.signals, strings.Join([]string{id, action, actor, reason}, " "))
	return nil
}

const experimentAdminToken = "tok-experiment-admin"

// newExperimentCLIEnv is the real API on a store with pools sim and alibaba
// (the example experiment's scope, the pool `make run` imports) and, as the
// active policy version, deploy/gpugov/policy.yaml (what `make
// demo-governance` serves, and `make run` with GPUGOV_POLICY_FILE), so the
// example experiment's candidate differs from the baseline in aging only.
// run uses the admin's token.
func newExperimentCLIEnv(t *testing.T) (*cliEnv, *experimentWorkflows) {
	t.Helper()
	st, _ := storetest.NewStore(t, storetest.Fixture{Queues: []scheduling.Queue{storetest.TrainQueue},
		Pools: []scheduling.Pool{storetest.Pool("sim", vocab.StageAutomate, 1, 8), storetest.Pool("alibaba", vocab.StageObserve, 1, 8)}})
	p, err := policy.Load("../../deploy/gpugov/policy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := st.SavePolicyVersion(ctx, p.Hash(), p.Canonical()); err != nil {
		t.Fatal(err)
	}
	if err := st.ActivatePolicyVersion(ctx, p.Hash(), "serve", "loaded from policy.yaml"); err != nil {
		t.Fatal(err)
	}
	wf := &experimentWorkflows{}
	env := serveCLIEnv(t, st, wf, map[string]api.Principal{
		cliToken: alice, experimentAdminToken: {Name: "root", Project: "platform", Role: vocab.RoleAdmin}})
	env.token = experimentAdminToken
	return env, wf
}

// writeSpecFiles writes an experiment file and, when policyText is not
// empty, its candidate file cand.yaml next to it; it returns the
// experiment file's path.
func writeSpecFiles(t *testing.T, spec, policyText string) string {
	t.Helper()
	dir := t.TempDir()
	if policyText != "" {
		if err := os.WriteFile(filepath.Join(dir, "cand.yaml"), []byte(policyText), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	path := filepath.Join(dir, "experiment.yaml")
	if err := os.WriteFile(path, []byte(spec), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// countExperimentRows counts what a create writes.
func countExperimentRows(t *testing.T, st *store.Store) [3]int {
	t.Helper()
	var n [3]int
	// Denials are audited (access_denied): not a write of the refused create.
	for i, table := range []string{"experiments", "policy_versions", "audit_log WHERE action <> 'access_denied'"} {
		if err := st.Pool().QueryRow(context.Background(), "SELECT count(*) FROM "+table).Scan(&n[i]); err != nil {
			t.Fatal(err)
		}
	}
	return n
}

// TestExperimentCommands: create the example experiment (its candidate file
// read by the CLI), list it, show its timeline and, once decided, its
// comparison; promote and abort signal its workflow, and a state that does
// not allow them is a usage error.
func TestExperimentCommands(t *testing.T) {
	env, wf := newExperimentCLIEnv(t)
	out, stderr, err := env.run(t, "experiment", "create", "-f", "../../deploy/gpugov/experiment-aging.yaml")
	if err != nil {
		t.Fatalf("create: %v %s", err, stderr)
	}
	id := strings.TrimSuffix(out, "\n")
	if !strings.HasPrefix(id, "exp-") || strings.Contains(id, "\n") || !strings.Contains(stderr, id+": aging-ceiling-standard in pool alibaba") ||
		!strings.Contains(stderr, "(aging)") || !strings.Contains(stderr, "workflow experiment/"+id) {
		t.Fatalf("create printed the ID alone on stdout? stdout:\n%s\nstderr:\n%s", out, stderr)
	}
	if len(wf.started) != 1 || wf.started[0] != id {
		t.Fatalf("workflows started %v, want [%s]", wf.started, id)
	}

	out, _, err = env.run(t, "experiment", "list")
	if err != nil || !strings.Contains(out, id) || !strings.Contains(out, "scheduled") || !strings.Contains(out, "aging") ||
		!strings.Contains(out, "4h0m0s") {
		t.Fatalf("list: %v\n%s", err, out)
	}
	out, _, err = env.run(t, "experiment", "list", "--format", "json")
	var list api.ExperimentList
	if err != nil || json.Unmarshal([]byte(out), &list) != nil || len(list.Experiments) != 1 {
		t.Fatalf("list json: %v\n%s", err, out)
	}

	// Before a verdict show has the header and the created event.
	out, _, err = env.run(t, "experiment", "show", id)
	if err != nil || !strings.Contains(out, "experiment "+id+": aging-ceiling-standard (scheduled)") ||
		!strings.Contains(out, "created ") || !strings.Contains(out, "no verdict yet") ||
		!strings.Contains(out, "expected: longest_wait_s of tier experiment: decrease by at least 30 %") {
		t.Fatalf("show:\n%s (%v)", out, err)
	}

	// Promote needs a kept verdict: a usage error (409) now; abort is sent.
	var ue usageError
	if _, _, err := env.run(t, "experiment", "promote", id, "--reason", "early"); !errors.As(err, &ue) || !strings.Contains(err.Error(), "kept") {
		t.Fatalf("promote a scheduled experiment: %v, want a usage error", err)
	}
	if out, _, err = env.run(t, "experiment", "abort", id, "--reason", "wrong week"); err != nil || !strings.Contains(out, "abort sent to experiment "+id) {
		t.Fatalf("abort: %v %s", err, out)
	}
	if len(wf.signals) != 1 || wf.signals[0] != id+" abort root wrong week" {
		t.Fatalf("signals %q", wf.signals)
	}

	// The workflow's record (written here as its activities would): a
	// check with its values, then a kept verdict with the comparison.
	recordKept(t, env.store, id)
	out, _, err = env.run(t, "experiment", "show", id)
	if strings.Contains(out, "jobs): production") {
		t.Fatalf("show repeats the check's results on its detail line:\n%s", out)
	}
	for _, want := range []string{"finished, verdict kept", "baseline_measured", "switched", "check 1 over", "ok       production wait_p95_s 300 s",
		"BREACHED false_reclaims", "verdict ", "kept"} {
		if err != nil || !strings.Contains(out, want) {
			t.Fatalf("show after the verdict: %v, want %q in\n%s", err, want, out)
		}
	}
	if out, _, err = env.run(t, "experiment", "promote", id, "--reason", "met, no breach"); err != nil || !strings.Contains(out, "promote sent") {
		t.Fatalf("promote: %v %s", err, out)
	}
	out, _, err = env.run(t, "experiment", "show", id, "--format", "json")
	var d api.ExperimentDetail
	if err != nil || json.Unmarshal([]byte(out), &d) != nil || d.Outcome == nil || d.Outcome.Verdict != vocab.VerdictKept || len(d.Events) < 3 {
		t.Fatalf("show json: %v\n%s", err, out)
	}
	t.Logf("gpugov experiment show %s:\n%s", id, mustRun(t, env, "experiment", "show", id))
}

// mustRun runs args and returns stdout, failing the test on an error.
func mustRun(t *testing.T, env *cliEnv, args ...string) string {
	t.Helper()
	out, stderr, err := env.run(t, args...)
	if err != nil {
		t.Fatalf("%v: %v %s", args, err, stderr)
	}
	return out
}

// recordKept runs the store steps the ExperimentWorkflow's activities run
// for a kept candidate: the baseline measured, the switch, one check (one
// condition fine, one breached, as the test wants both marks), and the
// verdict with its outcome.
func recordKept(t *testing.T, st *store.Store, id string) {
	t.Helper()
	f := func(v float64) *float64 { return &v }
	ctx := context.Background()
	now := time.Now().UTC()
	m := &experiment.Measurement{Window: queuereport.Window{From: now.Add(-4 * time.Hour), To: now},
		Total: queuereport.Group{Jobs: 12, Started: 12}}
	if _, err := st.RecordExperimentBaseline(ctx, id, m, now); err != nil {
		t.Fatal(err)
	}
	if _, err := st.SwitchExperiment(ctx, id, now); err != nil {
		t.Fatal(err)
	}
	checks := []experiment.ConditionResult{
		{Condition: experiment.Condition{Name: "production P95 wait", Metric: "wait_p95_s", Target: experiment.Target{Tier: "production"}, AboveBaselineFactor: f(1.2)},
			Value: f(300), Baseline: f(290), Threshold: f(348), Text: "production wait_p95_s 300 s ≤ 1.2 × baseline 290 s = 348 s"},
		{Condition: experiment.Condition{Name: "false reclaims", Metric: "false_reclaims", Above: f(0)},
			Value: f(1), Threshold: f(0), Breached: true, Text: "false_reclaims 1 > 0"},
	}
	w := experiment.Measurement{Window: queuereport.Window{From: now, To: now.Add(10 * time.Minute)}, Total: queuereport.Group{Jobs: 14}}
	if _, err := st.RecordExperimentCheck(ctx, id, 1, w, checks, now.Add(10*time.Minute)); err != nil {
		t.Fatal(err)
	}
	outcome := experiment.Outcome{Verdict: vocab.VerdictKept, Reason: "longest_wait_s of tier experiment fell 41 % (≥ 30 %), no breach",
		Expected: experiment.ExpectedResult{Expectation: experiment.Expectation{Metric: "longest_wait_s", Target: experiment.Target{Tier: "experiment"},
			Direction: experiment.Decrease, Change: 0.3}, Before: f(5400), After: f(3186), Change: f(-0.41), Met: true, SampleBefore: 12, SampleAfter: 14},
		Rows: []experiment.Row{{Metric: "longest_wait_s", Target: experiment.Target{Tier: "experiment"}, Before: f(5400), After: f(3186), Delta: f(-2214), Ratio: f(0.59)}}}
	if _, err := st.FinishExperiment(ctx, id, &outcome, now.Add(4*time.Hour)); err != nil {
		t.Fatal(err)
	}
}

// Bad experiment files and arguments are usage errors (exit code 2) that
// store nothing: a parse problem names the file, line and field; a
// candidate file that does not load names it; what only the server can
// check comes back with every field named.
func TestExperimentCreateBadInput(t *testing.T) {
	env, wf := newExperimentCLIEnv(t)
	const good = `name: x
hypothesis: faster aging
candidate: {file: cand.yaml}
scope: {pools: [sim]}
window_s: 3600
expected: {metric: longest_wait_s, tier: experiment, direction: decrease, change: 0.3}
`
	const aging = "version: gpugov.policy/v1\naging: {enabled: true, step_points: 250}\n"
	cases := []struct {
		name, spec, policy string
		want               []string // parts of the error
	}{
		{"unknown field", strings.Replace(good, "window_s", "windw_s", 1), aging, []string{"experiment.yaml:5: windw_s"}},
		{"unknown metric", strings.Replace(good, "longest_wait_s", "longest_wiat_s", 1), aging, []string{"experiment.yaml:6: expected.metric"}},
		{"bad number", strings.Replace(good, "3600", "an hour", 1), aging, []string{"experiment.yaml:5: window_s"}},
		{"missing candidate file", good, "", []string{"experiment.yaml:3: candidate.file"}},
		{"candidate that does not load", good, "version: gpugov.policy/v1\naging: {cap_points: -5}\n", []string{"candidate.file", "cand.yaml:2", "aging.cap_points"}},
		{"server-side problems", strings.Replace(good, "3600", "1", 1),
			"version: gpugov.policy/v1\naging: {step_points: 250}\npreemption: {grace_s: 30}\n",
			[]string{"problems", "window_s: ", "candidate: "}},
	}
	before := countExperimentRows(t, env.store)
	var ue usageError
	for _, tc := range cases {
		_, _, err := env.run(t, "experiment", "create", "-f", writeSpecFiles(t, tc.spec, tc.policy))
		if !errors.As(err, &ue) {
			t.Errorf("%s: %T %v, want a usage error", tc.name, err, err)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: %q, want %q in it", tc.name, err, w)
			}
		}
	}
	for _, args := range [][]string{
		{"experiment", "create"},
		{"experiment", "create", "-f", filepath.Join(t.TempDir(), "none.yaml")},
		{"experiment", "create", "-f", "../../deploy/gpugov/experiment-aging.yaml", "--format", "yaml"},
		{"experiment", "show"},
		{"experiment", "show", "exp-nosuchthing"},
		{"experiment", "abort", "exp-nosuchthing"}, // no reason
		{"experiment", "promote", "exp-nosuchthing", "--reason", "x"},
		{"experiment", "list", "--limit", "0"},
		{"experiment", "frob"},
	} {
		if _, _, err := env.run(t, args...); !errors.As(err, &ue) {
			t.Errorf("%v: %T %v, want a usage error", args, err, err)
		}
	}
	env.token = "" // alice, a submitter
	if _, _, err := env.run(t, "experiment", "create", "-f", "../../deploy/gpugov/experiment-aging.yaml"); !errors.As(err, &ue) ||
		!strings.Contains(err.Error(), "admin") {
		t.Errorf("create as a submitter: %v, want a usage error (403)", err)
	}
	if after := countExperimentRows(t, env.store); after != before || len(wf.started) != 0 {
		t.Errorf("refused creates changed the store %v → %v or started %v", before, after, wf.started)
	}
}

// While an experiment holds a pool, `gpugov policy apply` is refused naming
// it (exit code 2, nothing changes); --override-reason applies it and ends
// the experiment.
func TestPolicyApplyDuringAnExperiment(t *testing.T) {
	env, _ := newExperimentCLIEnv(t)
	out := mustRun(t, env, "experiment", "create", "-f", "../../deploy/gpugov/experiment-aging.yaml")
	id := strings.SplitN(out, "\n", 2)[0]
	ctx := context.Background()
	before, err := env.store.ActivePolicyHash(ctx)
	if err != nil {
		t.Fatal(err)
	}
	file := writeFile(t, "version: gpugov.policy/v1\npreemption: {grace_s: 30}\n")
	var ue usageError
	if _, _, err := env.run(t, "policy", "apply", file, "--reason", "shorter grace"); !errors.As(err, &ue) || !strings.Contains(err.Error(), id) ||
		!strings.Contains(err.Error(), "override_reason (gpugov policy apply --override-reason)") {
		t.Fatalf("apply during %s: %v, want a usage error naming it and the flag", id, err)
	}
	if h, _ := env.store.ActivePolicyHash(ctx); h != before {
		t.Fatalf("the refused apply switched %s → %s", before, h)
	}
	if _, _, err := env.run(t, "policy", "apply", file, "--reason", "shorter grace", "--override-reason", "incident"); err != nil {
		t.Fatalf("apply with --override-reason: %v", err)
	}
	if h, _ := env.store.ActivePolicyHash(ctx); h == before {
		t.Fatal("the override changed nothing")
	}
	// The override ended the experiment: show says so, not "no verdict yet".
	if out := mustRun(t, env, "experiment", "show", id); !strings.Contains(out, "(aborted)") || !strings.Contains(out, "\naborted (no verdict)\n") {
		t.Fatalf("show after the override:\n%s", out)
	}
}

// While an experiment about quotas holds a pool, `gpugov quota set` and
// `quota approve` are refused naming it (exit code 2, nothing changes);
// --override-reason changes the quota and ends the experiment at once.
func TestQuotaChangeDuringAQuotaExperiment(t *testing.T) {
	env, _ := newExperimentCLIEnv(t)
	ctx := context.Background()
	base, err := os.ReadFile("../../deploy/gpugov/policy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	spec, err := os.ReadFile("../../deploy/gpugov/experiment-aging.yaml")
	if err != nil {
		t.Fatal(err)
	}
	specText := strings.Replace(string(spec), "file: policy-aging-candidate.yaml", "file: cand.yaml", 1)
	specText = strings.Replace(specText, "pools: [alibaba]", "pools: [sim]", 1) // the pool of the quotas below
	cand := string(base) + "\nquotas:\n  - {project: vision, pool: sim, nominal_milli: 2000}\n"
	out := mustRun(t, env, "experiment", "create", "-f", writeSpecFiles(t, specText, cand))
	id := strings.SplitN(out, "\n", 2)[0]
	if x, err := env.store.GetExperiment(ctx, id); err != nil || len(x.Groups) != 1 || x.Groups[0] != vocab.PolicyQuota {
		t.Fatalf("experiment %s: %+v %v, want a quota experiment", id, x, err)
	}
	req, err := env.store.CreateQuotaRequest(ctx, store.NewQuotaRequest{Pool: "sim", Project: "vision", NominalMilli: 4000,
		Reason: "deadline", Actor: "alice"})
	if err != nil {
		t.Fatal(err)
	}
	before, _ := env.store.ActivePolicyHash(ctx)
	set := []string{"quota", "set", "sim", "vision", "--nominal-milli", "3000", "--borrowing-limit-milli", "0", "--reason", "deadline"}
	approve := []string{"quota", "approve", req.ID, "-m", "granted"}
	var ue usageError
	for _, args := range [][]string{set, approve} {
		if _, _, err := env.run(t, args...); !errors.As(err, &ue) || !strings.Contains(err.Error(), id) {
			t.Fatalf("%v during %s: %v, want a usage error naming it", args, id, err)
		}
	}
	if h, _ := env.store.ActivePolicyHash(ctx); h != before {
		t.Fatalf("a refused change switched %s → %s", before, h)
	}
	mustRun(t, env, append(set, "--override-reason", "incident")...)
	// The override ended the experiment at once, so the approval needs none.
	if x, err := env.store.GetExperiment(ctx, id); err != nil || x.State != vocab.ExperimentAborted {
		t.Fatalf("experiment %s after the override: %+v %v, want aborted", id, x, err)
	}
	out = mustRun(t, env, approve...)
	if !strings.Contains(out, "approved") {
		t.Fatalf("approve after the override: %q", out)
	}
	audit, err := env.store.AuditFor(ctx, "sim/vision", 0)
	if err != nil || len(audit) != 2 || audit[0].Evidence["override_experiment"] != id || audit[0].Evidence["override_reason"] != "incident" ||
		audit[1].Evidence["override_experiment"] != nil {
		t.Fatalf("set_quota audit %+v %v, want the override recorded on the set only", audit, err)
	}
}
