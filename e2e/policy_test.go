package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/gpugov/gpugov/internal/policy"
	"github.com/gpugov/gpugov/internal/vocab"
)

// TestAppliedPolicyIsInForceAtNextCycle: project drill has 1000 milli-GPU
// in the actions pool (the service's policy), so two of its four half-GPU
// jobs wait with quota_exhausted; a policy file applied through the API
// (POST /v1/policies) that raises the quota and moves the pool to the
// trial stage is the service's policy at its next cycle, without a
// restart: the pool's stage changes, the waiting jobs are placed by that
// cycle, which records the applied hash, and why names it.
func TestAppliedPolicyIsInForceAtNextCycle(t *testing.T) {
	p := policy.Default()
	p.Quotas = []policy.Quota{{Project: "drill", Pool: "actions", NominalMilli: 1000}}
	e := startEnv(t, envOptions{pools: actionPool, simSpeed: 1, policy: p})
	ctx := context.Background()
	a, b := submitShare(t, e.client), submitShare(t, e.client)
	waitFor(t, 20*time.Second, "the first two jobs placed", func() (bool, string) {
		n := e.queryInt(t, `SELECT count(*) FROM allocations WHERE job_id IN ($1, $2)`, a.ID, b.ID)
		return n == 2, fmt.Sprintf("%d allocated", n)
	})
	c := submitShare(t, e.client)
	waitReason(t, e, c.ID, vocab.ReasonQuotaExhausted, 2)

	candidate := "version: gpugov.policy/v1\n" +
		"quotas:\n  - {project: drill, pool: actions, nominal_milli: 2000}\n" +
		"pools: {actions: {stage: trial}}\n"
	applied, err := e.client.ApplyPolicy(ctx, candidate, "candidate.yaml", "e2e: more quota, trial stage")
	if err != nil || !applied.Changed || applied.Previous != p.Hash() || len(applied.Groups) != 2 ||
		applied.Groups[0] != vocab.PolicyQuota || applied.Groups[1] != vocab.PolicyAutomationStage {
		t.Fatalf("apply: %v %+v", err, applied)
	}
	waitFor(t, 20*time.Second, "the waiting job placed", func() (bool, string) {
		n := e.queryInt(t, `SELECT count(*) FROM allocations WHERE job_id = $1`, c.ID)
		return n == 1, fmt.Sprintf("%d allocations", n)
	})
	between := e.queryInt(t, `
		SELECT count(*) FROM scheduling_cycles c
		WHERE c.at > (SELECT at FROM audit_log WHERE subject = $1 AND action = 'activate_policy')
			AND c.at < (SELECT sc.at FROM allocations a JOIN scheduling_cycles sc ON sc.id = a.cycle_id WHERE a.job_id = $2)`,
		applied.Hash, c.ID)
	if between != 0 {
		t.Fatalf("%d scheduling cycles ran after the switch and before the one that placed the job", between)
	}
	if n := e.queryInt(t, `SELECT count(*) FROM allocations a JOIN scheduling_cycles sc ON sc.id = a.cycle_id
		WHERE a.job_id = $1 AND sc.policy_version = $2`, c.ID, applied.Hash); n != 1 {
		t.Fatalf("the cycle placing %s did not record the applied version %s", c.ID, applied.Hash)
	}
	if n := e.queryInt(t, `SELECT count(*) FROM pools WHERE name = 'actions' AND stage = 'trial'`); n != 1 {
		t.Fatal("the applied version's pool stage is not in force")
	}
	if n := e.queryInt(t, `SELECT count(*) FROM audit_log WHERE action = 'set_pool_stage' AND subject = 'actions'
		AND actor = 'serve' AND reason LIKE '%' || $1 || '%'`, applied.Hash); n != 1 {
		t.Fatalf("%d stage changes audited naming the version, want 1", n)
	}
	j, err := e.client.GetJob(ctx, c.ID)
	if err != nil || j.LastDecision == nil || j.LastDecision.Policy != applied.Hash {
		t.Fatalf("last decision %v %+v, want policy %s", err, j.LastDecision, applied.Hash)
	}
}
