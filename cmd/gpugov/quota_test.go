package main

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/gpugov/gpugov/api"
	"github.com/gpugov/gpugov/internal/policy"
	"github.com/gpugov/gpugov/internal/scheduling"
	"github.com/gpugov/gpugov/internal/vocab"
	"github.com/gpugov/gpugov/store/storetest"
)

const quotaAdminToken = "tok-quota-admin"

// newQuotaCLIEnv is the real API on a store with pool a100-east and an
// active policy version giving vision 1000 milli-GPU there; run uses
// alice's (vision, submitter) token unless env.token is set.
func newQuotaCLIEnv(t *testing.T) *cliEnv {
	t.Helper()
	st, _ := storetest.NewStore(t, storetest.Fixture{Queues: []scheduling.Queue{storetest.TrainQueue},
		Pools: []scheduling.Pool{storetest.Pool("a100-east", vocab.StageObserve, 1, 2)}})
	ctx := context.Background()
	p := policy.Default()
	p.Quotas = []policy.Quota{{Project: "vision", Pool: "a100-east", NominalMilli: 1000}}
	if err := st.SavePolicyVersion(ctx, p.Hash(), p.Canonical()); err != nil {
		t.Fatal(err)
	}
	if err := st.ActivatePolicyVersion(ctx, p.Hash(), "serve", "test"); err != nil {
		t.Fatal(err)
	}
	if _, err := st.SyncQuotas(ctx, "serve", "test"); err != nil {
		t.Fatal(err)
	}
	return serveCLIEnv(t, st, startedWorkflows{}, map[string]api.Principal{
		cliToken: alice, quotaAdminToken: {Name: "root", Project: "platform", Role: vocab.RoleAdmin}})
}

// TestQuotaCommands: list, request, requests, approve, set and deny through
// the CLI against the real API and store; bad arguments and refused
// requests are usage errors (exit code 2) that change nothing.
func TestQuotaCommands(t *testing.T) {
	env := newQuotaCLIEnv(t)
	out, stderr, err := env.run(t, "quota", "list")
	if err != nil || !strings.Contains(out, "a100-east  vision   1000") || !strings.Contains(out, "milli-GPU") {
		t.Fatalf("list: %v %s\n%s", err, stderr, out)
	}
	out, _, err = env.run(t, "quota", "request", "a100-east", "vision", "--nominal-milli", "2000", "--reason", "paper deadline")
	if err != nil || !strings.HasPrefix(out, "qr-") || !strings.Contains(out, "pending") {
		t.Fatalf("request: %v %s", err, out)
	}
	id := strings.SplitN(out, ":", 2)[0]
	if out, _, err = env.run(t, "quota", "requests", "--state", "pending"); err != nil || !strings.Contains(out, id) || !strings.Contains(out, "paper deadline") {
		t.Fatalf("requests: %v %s", err, out)
	}

	countRows := func() [3]int64 {
		var n [3]int64
		for i, q := range []string{`SELECT count(*) FROM audit_log WHERE action <> 'access_denied'`, `SELECT count(*) FROM policy_versions`, `SELECT coalesce(sum(nominal_milli), 0) FROM quotas`} {
			if err := env.store.Pool().QueryRow(context.Background(), q).Scan(&n[i]); err != nil {
				t.Fatal(err)
			}
		}
		return n
	}
	before := countRows()
	var ue usageError
	for _, args := range [][]string{
		{"quota", "approve", id, "-m", "ok"}, // alice is no admin: 403
		{"quota", "set", "a100-east", "vision", "--nominal-milli", "5", "--borrowing-limit-milli", "0", "--reason", "x"}, // 403
		{"quota", "request", "a100-east", "speech", "--nominal-milli", "5", "--reason", "x"},                             // another project: 403
		{"quota", "request", "nowhere", "vision", "--nominal-milli", "5", "--reason", "x"},                               // unknown pool: 422
		{"quota", "request", "a100-east", "vision", "--reason", "x"},                                                     // no nominal
		{"quota", "request", "a100-east", "vision", "--nominal-milli", "-1", "--reason", "x"},
		{"quota", "request", "a100-east", "vision", "--nominal-milli", "5"},        // no reason
		{"quota", "request", "a100-east", "--nominal-milli", "5", "--reason", "x"}, // no project
		{"quota", "requests", "--state", "open"},
		{"quota", "approve", id},                                                         // no comment
		{"quota", "set", "a100-east", "vision", "--nominal-milli", "5", "--reason", "x"}, // no borrowing limit
		{"quota", "list", "--format", "yaml"},
		{"quota", "frob"},
	} {
		if _, _, err := env.run(t, args...); !errors.As(err, &ue) {
			t.Errorf("%v: %T %v, want a usage error", args, err, err)
		}
	}
	if _, _, err := env.run(t, "quota", "request", "nowhere", "vision", "--nominal-milli", "5", "--reason", "x"); err == nil || !strings.HasPrefix(err.Error(), "pool: ") {
		t.Errorf("unknown pool: %v, want the field named", err)
	}
	if after := countRows(); after != before {
		t.Fatalf("refused commands changed the store: %v → %v", before, after)
	}

	env.token = quotaAdminToken
	out, _, err = env.run(t, "quota", "approve", id, "-m", "two weeks")
	if err != nil || !strings.Contains(out, "approved by root (two weeks)") || !strings.Contains(out, "nominal 1000, borrowing limit 0 → nominal 2000") {
		t.Fatalf("approve: %v %s", err, out)
	}
	out, _, err = env.run(t, "quota", "set", "a100-east", "speech", "--nominal-milli", "500", "--borrowing-limit-milli", "0", "--reason", "new team")
	if err != nil || !strings.Contains(out, "quota of speech in a100-east: none (unlimited) → nominal 500") {
		t.Fatalf("set: %v %s", err, out)
	}
	out, _, err = env.run(t, "quota", "list", "--pool", "a100-east")
	if err != nil || !strings.Contains(out, "a100-east  speech   500") || !strings.Contains(out, "a100-east  vision   2000") {
		t.Fatalf("list after: %v %s", err, out)
	}
	env.token = ""
	out, _, _ = env.run(t, "quota", "request", "a100-east", "vision", "--nominal-milli", "8000", "--borrowing-limit-milli", "1000", "--reason", "more")
	id2 := strings.SplitN(out, ":", 2)[0]
	env.token = quotaAdminToken
	if out, _, err = env.run(t, "quota", "deny", id2, "-m", "no budget"); err != nil || !strings.Contains(out, "denied by root (no budget)") {
		t.Fatalf("deny: %v %s", err, out)
	}
	if _, _, err := env.run(t, "quota", "deny", id2, "-m", "again"); !errors.As(err, &ue) {
		t.Fatalf("deny twice: %v, want a usage error (409)", err)
	}
	if out, _, err = env.run(t, "quota", "requests"); err != nil || !strings.Contains(out, "approved") || !strings.Contains(out, "denied") ||
		!strings.Contains(out, "root: no budget") {
		t.Fatalf("requests: %v %s", err, out)
	}
}

// TestWhyNamesTheQuotaCommand: a quota_exhausted wait names the command that
// asks for more quota.
func TestWhyNamesTheQuotaCommand(t *testing.T) {
	j := &api.Job{ID: "j-1", Project: "vision", Resources: api.ResourceSpec{Pool: "a100-east", GPUs: 1}}
	if got := actionCommand(j, vocab.ReasonQuotaExhausted); !strings.HasPrefix(got, "gpugov quota request a100-east vision --nominal-milli N --reason TEXT") {
		t.Fatalf("action %q", got)
	}
}
