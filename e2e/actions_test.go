package e2e

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/gpugov/gpugov/api"
	apiclient "github.com/gpugov/gpugov/api/client"
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
