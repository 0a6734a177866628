package e2e

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/gpugov/gpugov/api"
	apiclient "github.com/gpugov/gpugov/api/client"
	"github.com/gpugov/gpugov/internal/policy"
	"github.com/gpugov/gpugov/internal/scheduling"
	"github.com/gpugov/gpugov/internal/vocab"
	"github.com/gpugov/gpugov/store"
)

// actionPool is one node with two A100s: a 4-GPU request never fits it.
var actionPool = []scheduling.Pool{{
	Name: "actions", Available: true, Stage: vocab.StageObserve,
	Nodes: []scheduling.Node{{
		Name: "act-1", CPUMilli: 64000, MemoryMiB: 512000, Schedulable: true,
		GPUs: []scheduling.GPU{
			{UUID: "GPU-act-0", Model: "A100-SXM4-80GB", MemoryMiB: 81920, NVLinkDomain: "nv0", Healthy: true},
			{UUID: "GPU-act-1", Model: "A100-SXM4-80GB", MemoryMiB: 81920, NVLinkDomain: "nv0", Healthy: true},
		},
	}},
}}

// submitAction submits one simulated job to the actions pool and returns it.
func submitAction(t *testing.T, c *apiclient.Client, gpus int, prereqs []api.PrerequisiteSpec) *api.Job {
	t.Helper()
	spec := &api.JobSpec{Project: "drill", Queue: "standard", RunSeconds: 3600, Prerequisites: prereqs,
		Resources: api.ResourceSpec{GPUs: gpus, Pool: "actions"}}
	job, status, err := c.Submit(context.Background(), spec, "")
	if err != nil || status != http.StatusCreated {
		t.Fatalf("submit: status %d, %v", status, err)
	}
	return job
}

// waitReason waits until the job waits for reason and at least cycles more
// scheduling cycles have run since then, so the reason is seen to hold.
func waitReason(t *testing.T, e *env, id string, reason vocab.WaitReason, cycles int) {
	t.Helper()
	waitFor(t, 30*time.Second, "job waits with "+string(reason), func() (bool, string) {
		j, err := e.client.GetJob(context.Background(), id)
		if err != nil || j.Wait == nil {
			return false, fmt.Sprintf("%v %+v", err, j)
		}
		return j.Wait.Reason == string(reason), j.Wait.Reason
	})
	n := e.queryInt(t, `SELECT count(*) FROM scheduling_cycles`)
	waitFor(t, 30*time.Second, "more cycles", func() (bool, string) {
		return e.queryInt(t, `SELECT count(*) FROM scheduling_cycles`) >= n+cycles, ""
	})
	if j, _ := e.client.GetJob(context.Background(), id); j.State.Final() || !j.State.Pending() || j.Wait.Reason != string(reason) {
		t.Fatalf("job left %s by itself: %s %+v", reason, j.State, j.Wait)
	}
}

// waitPlacedNextCycle waits until the job holds GPUs and checks that it was
// placed by the first scheduling cycle after the audited action (none ran
// between the action and the placing cycle without placing it).
func waitPlacedNextCycle(t *testing.T, e *env, id, action string) {
	t.Helper()
	waitFor(t, 20*time.Second, "job placed", func() (bool, string) {
		n := e.queryInt(t, `SELECT count(*) FROM allocations WHERE job_id = $1`, id)
		return n == 1, fmt.Sprintf("%d allocations", n)
	})
	// The action must be in the audit log: without it the count below
	// compares with NULL and would pass whatever happened.
	if n := e.queryInt(t, `SELECT count(*) FROM audit_log WHERE subject = $1 AND action = $2`, id, action); n == 0 {
		t.Fatalf("no %s audit entry for job %s", action, id)
	}
	between := e.queryInt(t, `
		SELECT count(*) FROM scheduling_cycles c
		WHERE c.at > (SELECT max(at) FROM audit_log WHERE subject = $1 AND action = $2)
			AND c.at < (SELECT sc.at FROM allocations a JOIN scheduling_cycles sc ON sc.id = a.cycle_id WHERE a.job_id = $1)`,
		id, action)
	if between != 0 {
		t.Fatalf("%d scheduling cycles ran after the %s and before the one that placed the job", between, action)
	}
}

// TestNotReadyJobMadeReadyIsPlaced: a job whose prerequisite is not ready
// waits with environment_not_ready, cycle after cycle; set ready through the
// API it is placed by the next cycle.
func TestNotReadyJobMadeReadyIsPlaced(t *testing.T) {
	e := startEnv(t, envOptions{pools: actionPool, simSpeed: 1})
	job := submitAction(t, e.client, 2, []api.PrerequisiteSpec{{Name: "dataset", Ready: false, Message: "not staged"}})
	waitReason(t, e, job.ID, vocab.ReasonEnvironmentNotReady, 2)

	got, err := e.client.SetPrerequisite(context.Background(), job.ID, "dataset", true, "staged to /scratch")
	if err != nil || !got.Prerequisites[0].Ready {
		t.Fatalf("set ready: %v %+v", err, got)
	}
	waitPlacedNextCycle(t, e, job.ID, store.AuditSetPrerequisite)
	events, err := e.client.JobEvents(context.Background(), job.ID)
	if err != nil {
		t.Fatal(err)
	}
	last := events.Events[len(events.Events)-1]
	if last.Reason != string(vocab.ReasonEnvironmentNotReady) || last.EndedAt == nil {
		t.Fatalf("last wait event %+v, want a closed environment_not_ready", last)
	}
}

// TestAmendedRequestIsPlaced: a 4-GPU job on a 2-GPU pool waits with
// no_matching_capacity; amended to 2 GPUs through the API it is placed by the
// next cycle, with its submit time kept.
func TestAmendedRequestIsPlaced(t *testing.T) {
	e := startEnv(t, envOptions{pools: actionPool, simSpeed: 1})
	job := submitAction(t, e.client, 4, nil)
	waitReason(t, e, job.ID, vocab.ReasonNoMatchingCapacity, 2)

	got, err := e.client.Amend(context.Background(), job.ID, api.ResourceSpec{GPUs: 2, Pool: "actions", Topology: "same-node"}, "fits one node")
	if err != nil || got.Resources.GPUs != 2 || !got.SubmittedAt.Equal(job.SubmittedAt) {
		t.Fatalf("amend: %v %+v", err, got)
	}
	waitPlacedNextCycle(t, e, job.ID, store.AuditAmendResources)
	if n := e.queryInt(t, `SELECT cardinality(gpu_uuids) FROM allocations WHERE job_id = $1`, job.ID); n != 2 {
		t.Fatalf("allocation has %d GPUs, want 2", n)
	}
	if _, err := e.client.Amend(context.Background(), job.ID, api.ResourceSpec{GPUs: 1, Pool: "actions"}, ""); err == nil {
		t.Fatal("amending a placed job succeeded")
	} else if ae, ok := apiclient.AsError(err); !ok || ae.Status != http.StatusConflict {
		t.Fatalf("amending a placed job: %v, want 409", err)
	}
}

// submitShare submits one simulated half-GPU job of project drill to the
// actions pool and returns it.
func submitShare(t *testing.T, c *apiclient.Client) *api.Job {
	t.Helper()
	spec := &api.JobSpec{Project: "drill", Queue: "standard", RunSeconds: 3600,
		Resources: api.ResourceSpec{GPUs: 1, GPUMilli: 500, Pool: "actions"}}
	job, status, err := c.Submit(context.Background(), spec, "")
	if err != nil || status != http.StatusCreated {
		t.Fatalf("submit: status %d, %v", status, err)
	}
	return job
}

// TestRaisedQuotaReleasesQuotaWaits: project drill has 1000 milli-GPU in
// the actions pool (policy quota, no borrowing); of its four half-GPU jobs
// two run and two wait with quota_exhausted, cycle after cycle, though a
// GPU is free. The project asks for 2000 through the API (a pending request
// changes nothing), an admin approves: the quota change is a new active
// policy version, and the first cycle after the approval places both
// waiting jobs and records that version.
func TestRaisedQuotaReleasesQuotaWaits(t *testing.T) {
	p := policy.Default()
	p.Quotas = []policy.Quota{{Project: "drill", Pool: "actions", NominalMilli: 1000}}
	e := startEnv(t, envOptions{pools: actionPool, simSpeed: 1, policy: p})
	ctx := context.Background()
	allocated := func(ids ...string) func() (bool, string) {
		return func() (bool, string) {
			n := 0
			for _, id := range ids {
				n += e.queryInt(t, `SELECT count(*) FROM allocations WHERE job_id = $1`, id)
			}
			return n == len(ids), fmt.Sprintf("%d of %d allocated", n, len(ids))
		}
	}
	a, b := submitShare(t, e.client), submitShare(t, e.client)
	waitFor(t, 20*time.Second, "the first two jobs placed", allocated(a.ID, b.ID))
	c, d := submitShare(t, e.client), submitShare(t, e.client)
	waitReason(t, e, c.ID, vocab.ReasonQuotaExhausted, 2)
	waitReason(t, e, d.ID, vocab.ReasonQuotaExhausted, 0)

	drill, err := apiclient.New("http://"+e.svc.APIAddr(), drillToken)
	if err != nil {
		t.Fatal(err)
	}
	quotas, err := drill.Quotas(ctx, "actions")
	if err != nil || len(quotas.Quotas) != 1 || quotas.Quotas[0].UsedMilli != 1000 || quotas.Quotas[0].NominalMilli != 1000 || quotas.Policy != p.Hash() {
		t.Fatalf("quotas before: %v %+v", err, quotas)
	}
	nominal := int64(2000)
	req, err := drill.RequestQuota(ctx, api.NewQuotaRequest{Pool: "actions", Project: "drill", NominalMilli: &nominal, Reason: "second half of the sweep"})
	if err != nil || req.State != string(vocab.QuotaRequestPending) {
		t.Fatalf("request: %v %+v", err, req)
	}
	if _, err := drill.DecideQuotaRequest(ctx, req.ID, true, "mine"); err == nil {
		t.Fatal("a submitter approved its own request")
	}
	// A pending request changes nothing: the jobs still wait for quota.
	waitReason(t, e, c.ID, vocab.ReasonQuotaExhausted, 1)

	decided, err := e.client.DecideQuotaRequest(ctx, req.ID, true, "granted for the sweep")
	if err != nil || decided.State != string(vocab.QuotaRequestApproved) || decided.Change == nil || !decided.Change.Changed {
		t.Fatalf("approve: %v %+v", err, decided)
	}
	waitFor(t, 20*time.Second, "the waiting jobs placed", allocated(c.ID, d.ID))
	if n := e.queryInt(t, `SELECT count(*) FROM audit_log WHERE subject = $1 AND action = $2`, req.ID, store.AuditApproveQuotaRequest); n != 1 {
		t.Fatalf("%d approval audit entries, want 1", n)
	}
	for _, id := range []string{c.ID, d.ID} {
		between := e.queryInt(t, `
			SELECT count(*) FROM scheduling_cycles c
			WHERE c.at > (SELECT at FROM audit_log WHERE subject = $1 AND action = $3)
				AND c.at < (SELECT sc.at FROM allocations a JOIN scheduling_cycles sc ON sc.id = a.cycle_id WHERE a.job_id = $2)`,
			req.ID, id, store.AuditApproveQuotaRequest)
		if between != 0 {
			t.Fatalf("%d scheduling cycles ran after the approval and before the one that placed job %s", between, id)
		}
		if n := e.queryInt(t, `SELECT count(*) FROM allocations a JOIN scheduling_cycles sc ON sc.id = a.cycle_id
			WHERE a.job_id = $1 AND sc.policy_version = $2`, id, decided.Change.Policy); n != 1 {
			t.Fatalf("the cycle placing %s did not record the derived policy version %s", id, decided.Change.Policy)
		}
	}
	quotas, err = drill.Quotas(ctx, "actions")
	if err != nil || len(quotas.Quotas) != 1 || quotas.Quotas[0].UsedMilli != 2000 || quotas.Quotas[0].NominalMilli != 2000 || quotas.Policy != decided.Change.Policy {
		t.Fatalf("quotas after: %v %+v", err, quotas)
	}
}
