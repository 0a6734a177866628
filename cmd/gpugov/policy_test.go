package main

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/gpugov/gpugov/api"
	"github.com/gpugov/gpugov/internal/policy"
	"github.com/gpugov/gpugov/internal/scheduling"
	"github.com/gpugov/gpugov/internal/vocab"
	"github.com/gpugov/gpugov/store"
	"github.com/gpugov/gpugov/store/storetest"
)

const (
	policyAdminToken = "tok-policy-admin"
	policyOpsToken   = "tok-policy-ops"
)

// newPolicyCLIEnv is the real API on a store whose active version is the
// default policy (a file's, as serve stores at start), with an admin, an
// operator and alice (a submitter); it returns the env and that hash.
func newPolicyCLIEnv(t *testing.T) (*cliEnv, string) {
	t.Helper()
	st, _ := storetest.NewStore(t, storetest.Fixture{Queues: []scheduling.Queue{storetest.TrainQueue},
		Pools: []scheduling.Pool{storetest.Pool("a100-east", vocab.StageObserve, 1, 2)}})
	ctx := context.Background()
	p := policy.Default()
	if err := st.SavePolicyVersion(ctx, p.Hash(), p.Canonical()); err != nil {
		t.Fatal(err)
	}
	if err := st.ActivatePolicyVersion(ctx, p.Hash(), "serve", "test"); err != nil {
		t.Fatal(err)
	}
	env := serveCLIEnv(t, st, startedWorkflows{}, map[string]api.Principal{
		cliToken:         alice,
		policyAdminToken: {Name: "root", Project: "platform", Role: vocab.RoleAdmin},
		policyOpsToken:   {Name: "olga", Project: "platform", Role: vocab.RoleOperator}})
	return env, p.Hash()
}

// TestPolicyCommands: apply (admin), list, show and diff (operator) against
// the real API and store; bad arguments, a file the loader refuses and a
// submitter's apply are usage errors (exit 2) that store nothing; why names
// the policy version of the cycle that decided.
func TestPolicyCommands(t *testing.T) {
	env, base := newPolicyCLIEnv(t)
	env.token = policyAdminToken
	file := writeFile(t, "version: gpugov.policy/v1\naging: {cap_points: 4500}\n")
	out, stderr, err := env.run(t, "policy", "apply", file, "--reason", "longer waits age further")
	if err != nil {
		t.Fatalf("apply: %v %s", err, stderr)
	}
	applied, err := env.store.ActivePolicyVersion(context.Background())
	if err != nil || applied.Hash == base || applied.BaseHash != base {
		t.Fatalf("active after apply %+v %v", applied, err)
	}
	want := "applied policy " + applied.Hash[:12] + " (was " + base[:12] + "); the scheduler runs with it from its next cycle\n" +
		"1 variable group differs: aging\n" +
		"aging:\n" +
		"  aging.cap_points  3000 → 4500\n"
	if out != want {
		t.Fatalf("apply printed\n%q\nwant\n%q", out, want)
	}
	if out, _, err = env.run(t, "policy", "apply", file, "--reason", "again"); err != nil || !strings.Contains(out, "nothing changed") {
		t.Fatalf("repeat apply: %v %s", err, out)
	}

	rows := func() [2]int64 {
		var n [2]int64
		for i, q := range []string{`SELECT count(*) FROM policy_versions`, `SELECT count(*) FROM audit_log WHERE action <> 'access_denied'`} {
			if err := env.store.Pool().QueryRow(context.Background(), q).Scan(&n[i]); err != nil {
				t.Fatal(err)
			}
		}
		return n
	}
	before := rows()
	bad := writeFile(t, "version: gpugov.policy/v1\naging:\n  cap_points: -5\npreemption: {grace_s: -1}\n")
	_, _, err = env.run(t, "policy", "apply", bad, "--reason", "x")
	var ue usageError
	if !errors.As(err, &ue) || !strings.Contains(err.Error(), bad+":3: aging.cap_points: ") || !strings.Contains(err.Error(), bad+":4: preemption.grace_s: ") {
		t.Fatalf("refused file: %v", err)
	}
	for _, args := range [][]string{
		{"policy", "apply", file},            // no reason
		{"policy", "apply", "--reason", "x"}, // no file
		{"policy", "apply", "/nonexistent", "--reason", "x"},
		{"policy", "apply", file, "--reason", "x", "--format", "yaml"},
		{"policy", "show", "xyz"},                   // not a hash: 422
		{"policy", "show", strings.Repeat("0", 12)}, // unknown: 404
		{"policy", "diff", base},                    // one version
		{"policy", "list", "--limit", "0"},
		{"policy", "frobnicate"},
	} {
		if _, _, err := env.run(t, args...); !errors.As(err, &ue) && !isUsage(err) {
			t.Errorf("%v: %v, want a usage error", args, err)
		}
	}
	env.token = "" // alice, a submitter
	if _, _, err := env.run(t, "policy", "apply", file, "--reason", "x"); !errors.As(err, &ue) || !strings.Contains(err.Error(), "only an admin") {
		t.Errorf("submitter's apply: %v", err)
	}
	if _, _, err := env.run(t, "policy", "list"); !errors.As(err, &ue) {
		t.Errorf("submitter's list: %v", err)
	}
	if after := rows(); after != before {
		t.Fatalf("refusals changed the store: %v → %v", before, after)
	}

	env.token = policyOpsToken
	out, _, err = env.run(t, "policy", "list")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if err != nil || len(lines) != 3 || !strings.HasPrefix(lines[0], "HASH") ||
		!strings.HasPrefix(lines[1], applied.Hash[:12]+"  *") || !strings.HasSuffix(lines[1], base[:12]+"  "+base[:12]) ||
		!strings.HasSuffix(lines[2], "-             -") {
		t.Fatalf("list: %v\n%s", err, out)
	}
	out, _, err = env.run(t, "policy", "show", applied.Hash[:8])
	if err != nil || !strings.HasPrefix(out, "policy "+applied.Hash+" (active), stored ") ||
		!strings.Contains(out, "derived from "+base[:12]) || !strings.Contains(out, `"cap_points": 4500`) {
		t.Fatalf("show: %v\n%s", err, out)
	}
	out, _, err = env.run(t, "policy", "diff", base[:8], applied.Hash[:8])
	if err != nil || out != "policy "+base[:12]+" → "+applied.Hash[:12]+"\n1 variable group differs: aging\naging:\n  aging.cap_points  3000 → 4500\n" {
		t.Fatalf("diff: %v\n%q", err, out)
	}
	out, _, err = env.run(t, "policy", "diff", base, applied.Hash, "--format", "json")
	var d api.PolicyDiff
	if err != nil || json.Unmarshal([]byte(out), &d) != nil || len(d.Groups) != 1 || d.Groups[0] != vocab.PolicyAging || d.To != applied.Hash {
		t.Fatalf("diff json: %v\n%s", err, out)
	}
	if out, _, err = env.run(t, "policy", "diff", base, base); err != nil || !strings.HasSuffix(out, "no difference\n") {
		t.Fatalf("same version: %v\n%s", err, out)
	}

	// why names the version the deciding cycle ran with.
	j := storetest.Submit(t, env.store, &store.NewJob{Project: "vision", Queue: "train", Tier: vocab.TierStandard,
		SubmitTime: time.Now(), Request: scheduling.ResourceRequest{GPUs: 4, Pool: "a100-east"}})
	now := time.Now()
	if _, err := env.store.ApplyCycle(context.Background(), "c1", &scheduling.Result{PolicyVersion: applied.Hash, At: now,
		Waiting: []scheduling.WaitStatus{{JobID: j.ID, Reason: vocab.ReasonNoMatchingCapacity, Rank: 1, Detail: "needs 4 GPUs; the pool has 2"}}}, now); err != nil {
		t.Fatal(err)
	}
	env.token = ""
	out, _, err = env.run(t, "why", j.ID)
	if err != nil || !strings.Contains(out, "(cycle c1, policy "+applied.Hash[:12]+"): evaluated and left waiting (no_matching_capacity)") {
		t.Fatalf("why: %v\n%s", err, out)
	}
}
