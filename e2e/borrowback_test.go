package e2e

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gpugov/gpugov/api"
	"github.com/gpugov/gpugov/internal/policy"
	"github.com/gpugov/gpugov/internal/scheduling"
	"github.com/gpugov/gpugov/internal/vocab"
)

// lendPool is one node with four A100s, in the automate stage.
var lendPool = []scheduling.Pool{{
	Name: "lend", Available: true, Stage: vocab.StageAutomate,
	Nodes: []scheduling.Node{{
		Name: "lend-1", CPUMilli: 64000, MemoryMiB: 512000, Schedulable: true,
		GPUs: []scheduling.GPU{
			{UUID: "GPU-lend-0", Model: "A100-SXM4-80GB", MemoryMiB: 81920, NVLinkDomain: "nv0", Healthy: true},
			{UUID: "GPU-lend-1", Model: "A100-SXM4-80GB", MemoryMiB: 81920, NVLinkDomain: "nv0", Healthy: true},
			{UUID: "GPU-lend-2", Model: "A100-SXM4-80GB", MemoryMiB: 81920, NVLinkDomain: "nv0", Healthy: true},
			{UUID: "GPU-lend-3", Model: "A100-SXM4-80GB", MemoryMiB: 81920, NVLinkDomain: "nv0", Healthy: true},
		},
	}},
}}

// lendPolicy gives vision and nlp 2 GPUs of nominal quota each in pool lend,
// nlp may borrow 2 more. The minimum run time (10 min) would shield a young
// borrower from a preemption by tier; a reclaim of lent quota does not ask it
// (docs/design.md §5). The anti-thrash limit, 2 preemptions per hour, is not
// reached by one reclaim, so the requeued borrower meets the lender's claim.
func lendPolicy() *policy.Policy {
	p := policy.Default()
	p.FairShare = policy.FairShare{}
	p.Preemption = policy.Preemption{Enabled: true, MinRuntimeSeconds: 600, MaxPreemptions: 2, WindowSeconds: 3600,
		SaveRestoreSeconds: 1, GraceSeconds: 3, ReleaseWithoutCheckpoint: true,
		VerifyResumeTimeoutSeconds: policy.DefaultVerifyResumeTimeoutSeconds, RecomputeTimeoutSeconds: policy.DefaultRecomputeTimeoutSeconds}
	p.Queues = policy.DefaultQueues()
	p.Quotas = []policy.Quota{
		{Project: "vision", Pool: "lend", NominalMilli: 2000},
		{Project: "nlp", Pool: "lend", NominalMilli: 2000, BorrowingLimitMilli: 2000},
	}
	p.Pools = map[string]policy.Pool{"lend": {Stage: vocab.StageAutomate}}
	return p
}

// submitLend submits a checkpointable simulated standard job of project to
// pool lend.
func submitLend(t *testing.T, e *env, project string, gpus int) *api.Job {
	t.Helper()
	spec := &api.JobSpec{Project: project, Queue: "standard", RunSeconds: 3600,
		Recovery:  api.RecoverySpec{Checkpointable: true, CheckpointIntervalSeconds: 1},
		Resources: api.ResourceSpec{GPUs: gpus, Pool: "lend"}}
	job, status, err := e.client.Submit(context.Background(), spec, "")
	if err != nil || status != http.StatusCreated {
		t.Fatalf("submit: status %d, %v", status, err)
	}
	return job
}

// TestLenderGetsLentQuotaBack: nlp runs two 2-GPU jobs, one on borrowed
// quota, filling the pool; vision, within its nominal quota, submits a
// 2-GPU job. The lender gets its GPUs back within one preemption (of the
// borrowed job, young as it is), on the GPUs that preemption freed; the
// requeued borrower is refused borrowing while vision waits and is not
// preempted twice.
func TestLenderGetsLentQuotaBack(t *testing.T) {
	e := startEnv(t, envOptions{pools: lendPool, simSpeed: 1, policy: lendPolicy()})
	ctx := context.Background()
	own := submitLend(t, e, "nlp", 2)
	waitFor(t, 30*time.Second, "nlp's first job placed", func() (bool, string) {
		return e.queryInt(t, `SELECT count(*) FROM allocations WHERE job_id = $1`, own.ID) == 1, ""
	})
	borrower := submitLend(t, e, "nlp", 2)
	waitFor(t, 30*time.Second, "nlp's second job placed on borrowed quota", func() (bool, string) {
		n := e.queryInt(t, `SELECT count(*) FROM allocations WHERE job_id = $1 AND borrowed AND released_at IS NULL`, borrower.ID)
		return n == 1, fmt.Sprintf("%d borrowed allocations", n)
	})
	var borrowedGPUs []string
	if err := e.db.QueryRow(ctx, `SELECT gpu_uuids FROM allocations WHERE job_id = $1`, borrower.ID).Scan(&borrowedGPUs); err != nil {
		t.Fatal(err)
	}

	lender := submitLend(t, e, "vision", 2)
	waitFor(t, 60*time.Second, "the lender placed", func() (bool, string) {
		n := e.queryInt(t, `SELECT count(*) FROM allocations WHERE job_id = $1 AND released_at IS NULL`, lender.ID)
		return n == 1, fmt.Sprintf("%d allocations", n)
	})
	var lenderGPUs []string
	if err := e.db.QueryRow(ctx, `SELECT gpu_uuids FROM allocations WHERE job_id = $1`, lender.ID).Scan(&lenderGPUs); err != nil {
		t.Fatal(err)
	}
	if strings.Join(lenderGPUs, ",") != strings.Join(borrowedGPUs, ",") {
		t.Errorf("lender placed on %v, want the GPUs freed from the borrower %v", lenderGPUs, borrowedGPUs)
	}
	if n := e.queryInt(t, `SELECT count(*) FROM preemptions WHERE for_job_id = $1 AND state <> 'observed'`, lender.ID); n != 1 {
		t.Errorf("%d preemptions for the lender, want 1", n)
	}
	if n := e.queryInt(t, `SELECT count(*) FROM preemptions WHERE victim_job_id = $1 AND state = 'released'`, borrower.ID); n != 1 {
		t.Errorf("borrower preempted %d times, want 1", n)
	}
	var lentDetail string
	if err := e.db.QueryRow(ctx, `SELECT detail FROM wait_events WHERE job_id = $1 AND detail LIKE '%lent out to nlp%'
		ORDER BY started_at LIMIT 1`, lender.ID).Scan(&lentDetail); err != nil {
		t.Fatalf("no wait event of the lender says its quota is lent out: %v", err)
	}
	if !strings.Contains(lentDetail, "quota of project vision is lent out to nlp (2000 milli-GPU)") ||
		!strings.Contains(lentDetail, "it comes back by") {
		t.Errorf("lender's detail %q", lentDetail)
	}
	t.Logf("lender's wait while its quota was lent out: %s", lentDetail)
	// In the cycle that placed the lender the requeued borrower was refused
	// borrowing, naming the lender.
	if n := e.queryInt(t, `SELECT count(*) FROM wait_events WHERE job_id = $1 AND reason = 'quota_exhausted'
		AND detail LIKE '%quota of project vision is being returned to it (job ' || $2 || ' waits for it)%'`, borrower.ID, lender.ID); n == 0 {
		rows, _ := e.db.Query(ctx, `SELECT reason, detail, started_at FROM wait_events WHERE job_id = $1 ORDER BY started_at`, borrower.ID)
		for rows.Next() {
			var r, d string
			var at time.Time
			_ = rows.Scan(&r, &d, &at)
			t.Logf("borrower wait event %s %s: %s", at.Format(time.RFC3339Nano), r, d)
		}
		rows.Close()
		t.Errorf("the requeued borrower was never refused borrowing while the lender waited")
	}

	// The borrower stays requeued and is not preempted again: more cycles
	// pass, the lender keeps its GPUs.
	waitReason(t, e, borrower.ID, vocab.ReasonQuotaExhausted, 3)
	if n := e.queryInt(t, `SELECT count(*) FROM preemptions WHERE victim_job_id = $1 AND state <> 'observed'`, borrower.ID); n != 1 {
		t.Errorf("borrower preempted %d times after more cycles, want 1", n)
	}
	if n := e.queryInt(t, `SELECT count(*) FROM allocations WHERE job_id = $1 AND released_at IS NULL`, lender.ID); n != 1 {
		t.Errorf("the lender lost its GPUs")
	}
	j, err := e.client.GetJob(ctx, borrower.ID)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("requeued borrower: %s: %s", j.Wait.Reason, j.Wait.Detail)
}
