package api

import (
	"context"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/gpugov/gpugov/internal/governance"
	"github.com/gpugov/gpugov/internal/scheduling"
	"github.com/gpugov/gpugov/internal/temporalx"
	"github.com/gpugov/gpugov/internal/vocab"
	"github.com/gpugov/gpugov/store"
)

// decidingWorkflows records the reclaim decisions the API sends.
type decidingWorkflows struct {
	*recordingWorkflows
	mu        sync.Mutex
	decisions []string // "signal allocation actor"
}

func (w *decidingWorkflows) DecideReclaim(_ context.Context, allocationID, signal, actor, _ string) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.decisions = append(w.decisions, signal+" "+allocationID+" "+actor)
	return nil
}

// governanceFixture stores, in pool a100-east (observe stage), a running
// vision job, a "would preempt" record of it for a waiting job, and a
// notified reclaim of a failed vision job's allocation.
func governanceFixture(t *testing.T) (*testEnv, *decidingWorkflows, *store.PreemptionRecord, *store.Reclaim) {
	t.Helper()
	e := newTestEnv(t)
	wf := &decidingWorkflows{recordingWorkflows: e.wf}
	e.server = New(StoreFrom(e.store), wf, testTokens(t))
	ctx := context.Background()
	mk := func(queue string, recovery scheduling.RecoveryEvidence) *store.Job {
		j, _, err := e.store.CreateJob(ctx, &store.NewJob{Project: "vision", Queue: queue, Tier: vocab.TierStandard,
			Request: scheduling.ResourceRequest{GPUs: 1, Pool: "a100-east"}, Recovery: recovery, RunSeconds: 100})
		if err != nil {
			t.Fatal(err)
		}
		return j
	}
	victim, failed := mk("train", scheduling.RecoveryEvidence{Checkpointable: true}), mk("train", scheduling.RecoveryEvidence{})
	trigger := mk("delivery", scheduling.RecoveryEvidence{})
	now := time.Now()
	out, err := e.store.ApplyCycle(ctx, "c1", &scheduling.Result{PolicyVersion: "t", At: now, Placements: []scheduling.Placement{
		{JobID: victim.ID, Pool: "a100-east", Node: "node-1", Rank: 1, GPUs: []scheduling.GPUShare{{UUID: "GPU-aaaa", Milli: 1000}}},
		{JobID: failed.ID, Pool: "a100-east", Node: "node-1", Rank: 2, GPUs: []scheduling.GPUShare{{UUID: "GPU-bbbb", Milli: 1000}}},
	}}, now)
	if err != nil || len(out.Placed) != 2 {
		t.Fatalf("placements: %+v %v", out, err)
	}
	prop := []scheduling.PreemptionProposal{{ForJobID: trigger.ID, Pool: "a100-east", Act: false, Reason: "would free GPU-aaaa",
		Victims: []scheduling.Victim{{JobID: victim.ID, AllocationID: out.Placed[0].AllocationID, GPUs: 1, EstimatedLossGPUSeconds: 75}}}}
	if _, err := e.store.ApplyCycle(ctx, "c2", &scheduling.Result{PolicyVersion: "t", At: now, Preemptions: prop}, now); err != nil {
		t.Fatal(err)
	}
	for range 2 { // a later cycle proposing the same adds no second record
		if _, err := e.store.RecordWouldPreempt(ctx, "c2", prop, now); err != nil {
			t.Fatal(err)
		}
	}
	ps, err := e.store.ListPreemptions(ctx, store.PreemptionFilter{})
	if err != nil || len(ps) != 1 {
		t.Fatalf("would-preempt records %+v (%v), want one", ps, err)
	}
	ev := governance.Evidence{AllocationID: out.Placed[1].AllocationID, JobID: failed.ID, Project: "vision", Queue: "train",
		Pool: "a100-east", GPUs: 1, JobState: "running", GrantedAt: now}
	r, _, err := e.store.OpenReclaim(ctx, store.NewReclaim{Evidence: ev, Finding: governance.Finding{Class: vocab.ClassFailed, Basis: "run failed"},
		Decision: governance.ModeDecision{Mode: vocab.ModeNotify, Configured: vocab.ModeNotify, Stage: vocab.StageAutomate}, At: now})
	if err != nil {
		t.Fatal(err)
	}
	if r, err = e.store.NoticeReclaim(ctx, r.ID, now.Add(time.Hour), now); err != nil {
		t.Fatal(err)
	}
	return e, wf, &ps[0], r
}

func TestGovernanceRoutesListAndGet(t *testing.T) {
	t.Parallel()
	e, _, p, r := governanceFixture(t)
	var pl PreemptionList
	e.do(http.MethodGet, "/v1/preemptions?outcome=would_preempt", tokAlice, nil).decode(t, &pl)
	if len(pl.Preemptions) != 1 || pl.Preemptions[0].State != "observed" || pl.Preemptions[0].EstimatedLossGPUSeconds != 75 {
		t.Fatalf("preemptions %+v, want the observed would-preempt record with its estimated loss", pl)
	}
	if res := e.do(http.MethodGet, "/v1/preemptions/"+p.ID, tokAlice, nil); res.status != http.StatusOK {
		t.Fatalf("get preemption: %d %s", res.status, res.body)
	}
	// Project speech has no job in it: neither the record nor the list shows it.
	if res := e.do(http.MethodGet, "/v1/preemptions/"+p.ID, tokBob, nil); res.status != http.StatusForbidden {
		t.Fatalf("another project's preemption: %d %s, want 403", res.status, res.body)
	}
	var none PreemptionList
	if e.do(http.MethodGet, "/v1/preemptions", tokBob, nil).decode(t, &none); len(none.Preemptions) != 0 {
		t.Fatalf("speech lists %+v, want no preemption", none)
	}
	var noReclaims ReclaimReport
	if e.do(http.MethodGet, "/v1/reclaims", tokBob, nil).decode(t, &noReclaims); len(noReclaims.Reclaims) != 0 {
		t.Fatalf("speech lists reclaims %+v, want none", noReclaims)
	}
	if res := e.do(http.MethodGet, "/v1/preemptions/p-nope", tokAlice, nil); res.status != http.StatusNotFound {
		t.Fatalf("unknown preemption: %d", res.status)
	}
	if res := e.do(http.MethodGet, "/v1/preemptions?state=lost", tokAlice, nil); res.status != http.StatusUnprocessableEntity || res.apiError(t).Field != "state" {
		t.Fatalf("bad state: %d %s", res.status, res.body)
	}
	var rep ReclaimReport
	e.do(http.MethodGet, "/v1/reclaims?class=failed&mode=notify&pool=a100-east", tokOps, nil).decode(t, &rep)
	if len(rep.Reclaims) != 1 || rep.Reclaims[0].ID != r.ID || rep.Summary.ByState["notified"] != 1 || rep.Reclaims[0].NoticeDeadline == nil {
		t.Fatalf("reclaim report %+v", rep)
	}
	if res := e.do(http.MethodGet, "/v1/reclaims?class=busy", tokOps, nil); res.status != http.StatusUnprocessableEntity || res.apiError(t).Field != "class" {
		t.Fatalf("bad class: %d %s", res.status, res.body)
	}
}

func TestReclaimDecisionsNeedTheRightToken(t *testing.T) {
	t.Parallel()
	e, wf, _, r := governanceFixture(t)
	path := "/v1/reclaims/" + r.ID
	for _, c := range []struct {
		verb, token string
		want        int
	}{
		{"confirm", tokAlice, http.StatusForbidden}, // a submitter may not confirm
		{"keep", tokBob, http.StatusForbidden},      // another project may not keep it
		{"keep", tokOps, http.StatusForbidden},      // nor an operator of another project
		{"keep", tokAlice, http.StatusAccepted},
		{"confirm", tokOps, http.StatusAccepted},
	} {
		if res := e.do(http.MethodPost, path+"/"+c.verb, c.token, ActionRequest{Reason: "test"}); res.status != c.want {
			t.Fatalf("%s with %s: %d %s, want %d", c.verb, c.token, res.status, res.body, c.want)
		}
	}
	want := []string{temporalx.SignalReclaimKeep + " " + r.AllocationID + " alice", temporalx.SignalReclaimConfirm + " " + r.AllocationID + " olga"}
	if len(wf.decisions) != 2 || wf.decisions[0] != want[0] || wf.decisions[1] != want[1] {
		t.Fatalf("decisions %v, want %v", wf.decisions, want)
	}
	if _, _, err := e.store.DisputeReclaim(context.Background(), r.ID, "alice", "test", time.Now()); err != nil {
		t.Fatal(err)
	}
	if res := e.do(http.MethodPost, path+"/confirm", tokOps, nil); res.status != http.StatusConflict {
		t.Fatalf("confirm of a kept reclaim: %d, want 409", res.status)
	}
}
