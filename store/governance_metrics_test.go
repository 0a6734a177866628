package store_test

import (
	"context"
	"errors"
	"math"
	"slices"
	"testing"
	"time"

	"github.com/gpugov/gpugov/internal/experiment"
	"github.com/gpugov/gpugov/internal/governance"
	"github.com/gpugov/gpugov/internal/queuereport"
	"github.com/gpugov/gpugov/internal/scheduling"
	"github.com/gpugov/gpugov/internal/vocab"
	"github.com/gpugov/gpugov/store"
	"github.com/gpugov/gpugov/store/storetest"
)

// govFixture is the history TestGovernanceMetrics measures, built through
// the store's own transitions (no hand-written rows). B is the window
// start; minutes below are after B. Pool p (8 GPUs) holds every job but
// qjob, which runs in pool q.
//
//	A  train  run 0–10:30, preempted for T (notice 10:00, released 10:30),
//	          resumed correctly at 11 (loss 120 GPU-s, recompute 60 s), runs on
//	B  train  run 0–21, preempted for T (notice 20, released 21), resumed
//	          from the wrong step (loss 200 GPU-s, recompute not measured)
//	T  serve  run 30–90, succeeded
//	C  train  run 0–45, reclaimed (released 45): the run and job end cancelled
//	D  train  run 0–60, reclaim disputed at 50 (a false reclaim); also an
//	          observe-stage "would preempt" record (not a preemption)
//	E  train  run 0–5 failed with "node failure: …" (a start failure)
//	F  train  placed at 0, placement released (requeued) at 2 without a run
//	G  train  placed at 0, cancelled while placed (released at 3): not a
//	          start failure
//	H  train  pending, cancelled (at the wall clock, inside the window)
//	qjob serve (pool q) run 0–30, succeeded
type govFixture struct {
	s    *store.Store
	base time.Time
}

func newGovFixture(t *testing.T) govFixture {
	t.Helper()
	p, q := testPool("p", 1, 8), testPool("q", 1, 2)
	s := newStoreWith(t, p, q)
	ctx := context.Background()
	// CancelJob of a pending job stamps the wall clock: the window is
	// built around it.
	base := time.Now().UTC().Truncate(time.Millisecond).Add(-time.Hour)
	at := func(min float64) time.Time { return base.Add(time.Duration(min * float64(time.Minute))) }
	job := func(queue, pool string) *store.Job {
		return storetest.Submit(t, s, &store.NewJob{Project: "x", Queue: queue, Tier: vocab.TierStandard, SubmitTime: base,
			Request: scheduling.ResourceRequest{GPUs: 1, Pool: pool, CPUMilli: 1000, MemoryMiB: 1024}})
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	pn, qn := p.Nodes[0], q.Nodes[0]
	placement := func(j *store.Job, pool string, n scheduling.Node, g int) scheduling.Placement {
		pl := storetest.Placement(j.ID, pool, n.Name, 1000, n.GPUs[g].UUID)
		pl.Priority = scheduling.Priority{Score: 10000, TierBase: 10000, SubmitTime: base}
		return pl
	}
	A, B, T, C, D, E, F, G, H := job("train", "p"), job("train", "p"), job("serve", "p"), job("train", "p"),
		job("train", "p"), job("train", "p"), job("train", "p"), job("train", "p"), job("train", "p")
	qjob := job("serve", "q")
	out := storetest.Place(t, s, "c0", at(0), placement(A, "p", pn, 0), placement(B, "p", pn, 1), placement(C, "p", pn, 3),
		placement(D, "p", pn, 4), placement(E, "p", pn, 5), placement(F, "p", pn, 6), placement(G, "p", pn, 7),
		placement(qjob, "q", qn, 0))
	alloc := map[string]string{}
	for _, pl := range out.Placed {
		alloc[pl.JobID] = pl.AllocationID
	}
	run := map[string]string{}
	for _, j := range []*store.Job{A, B, C, D, E, qjob} {
		r, err := s.MarkRunning(ctx, j.ID, alloc[j.ID], 0, at(0))
		must(err)
		run[j.ID] = r
	}
	must(s.FinishRun(ctx, E.ID, run[E.ID], vocab.RunFailed, "node failure: no agent on node p-n0000 took the run within 1m0s", at(5)))
	must(s.ReleasePlacement(ctx, F.ID, alloc[F.ID], vocab.RunRequeued, "job workflow could not be signalled", at(2)))
	must(s.CancelJob(ctx, G.ID, "alice", "not needed"))
	must(s.ReleasePlacement(ctx, G.ID, alloc[G.ID], vocab.RunCancelled, "cancelled by alice", at(3)))
	must(s.CancelJob(ctx, H.ID, "alice", "not needed"))
	must(s.FinishRun(ctx, qjob.ID, run[qjob.ID], vocab.RunSucceeded, "exit 0", at(30)))

	// Two preemptions for T, and a "would preempt" record that is none.
	preempt := func(cycle string, victim *store.Job, start float64) string {
		o, err := s.ApplyCycle(ctx, cycle, &scheduling.Result{At: at(start), Preemptions: []scheduling.PreemptionProposal{{
			ForJobID: T.ID, Pool: "p", Node: pn.Name, Act: true, Reason: "serve is starved",
			Victims: []scheduling.Victim{{JobID: victim.ID, AllocationID: alloc[victim.ID], GPUs: 1}}}}}, at(start))
		if err != nil || len(o.Preemptions) != 1 {
			t.Fatalf("preemption of %s: %+v %v", victim.ID, o, err)
		}
		return o.Preemptions[0].PreemptionID
	}
	pa := preempt("c1", A, 10)
	if n, err := s.RecordWouldPreempt(ctx, "c1", []scheduling.PreemptionProposal{{ForJobID: T.ID, Pool: "p",
		Victims: []scheduling.Victim{{JobID: D.ID, AllocationID: alloc[D.ID]}}}}, at(10)); err != nil || n != 1 {
		t.Fatalf("would-preempt record: %d %v", n, err)
	}
	_, err := s.NoticePreemption(ctx, pa, "wf-a", at(10))
	must(err)
	_, err = s.ReleasePreempted(ctx, pa, "checkpointed", at(10.5))
	must(err)
	out = storetest.Place(t, s, "c2", at(11), placement(A, "p", pn, 0))
	a2, err := s.MarkRunning(ctx, A.ID, out.Placed[0].AllocationID, 300, at(11))
	must(err)
	yes, no, step, recompute := true, false, int64(300), 60.0
	_, err = s.FinishPreemption(ctx, pa, store.PreemptionResume{Outcome: vocab.PreemptionCompleted, ResumedRunID: a2,
		ResumedFromStep: &step, ResumedCorrectly: &yes, Progressed: true, RecomputeS: &recompute, LossGPUSeconds: 120, At: at(12)})
	must(err)

	pb := preempt("c3", B, 20)
	_, err = s.NoticePreemption(ctx, pb, "wf-b", at(20))
	must(err)
	_, err = s.ReleasePreempted(ctx, pb, "checkpointed", at(21))
	must(err)
	_, err = s.FinishPreemption(ctx, pb, store.PreemptionResume{Outcome: vocab.PreemptionResumeFailed,
		ResumedFromStep: &step, ResumedCorrectly: &no, LossGPUSeconds: 200, At: at(22)})
	must(err)

	out = storetest.Place(t, s, "c4", at(30), placement(T, "p", pn, 1))
	rt, err := s.MarkRunning(ctx, T.ID, out.Placed[0].AllocationID, 0, at(30))
	must(err)
	must(s.FinishRun(ctx, T.ID, rt, vocab.RunSucceeded, "exit 0", at(90)))

	reclaim := func(j *store.Job) *store.Reclaim {
		r, _, err := s.OpenReclaim(ctx, store.NewReclaim{
			Evidence: governance.Evidence{AllocationID: alloc[j.ID], JobID: j.ID, Project: "x", Queue: "train", Pool: "p", Node: pn.Name, GPUs: 1},
			Finding:  governance.Finding{Class: vocab.ClassIdle, Basis: "0% GPU for 30 min"},
			Decision: governance.ModeDecision{Mode: vocab.ModeNotify, Configured: vocab.ModeNotify, Stage: vocab.StageAutomate},
			At:       at(40)})
		must(err)
		return r
	}
	_, err = s.ReleaseReclaimed(ctx, reclaim(C).ID, "reclaim", at(45))
	must(err)
	_, _, err = s.DisputeReclaim(ctx, reclaim(D).ID, "bob", "it is loading data", at(50))
	must(err)
	must(s.FinishRun(ctx, D.ID, run[D.ID], vocab.RunSucceeded, "exit 0", at(60)))
	return govFixture{s: s, base: base}
}

// TestGovernanceMetrics checks every governance metric against the
// hand-computed values of govFixture, for pool p and for every pool, and
// that a window after the history measures nothing.
func TestGovernanceMetrics(t *testing.T) {
	t.Parallel()
	f := newGovFixture(t)
	ctx := context.Background()
	w := queuereport.Window{From: f.base, To: f.base.Add(2 * time.Hour)}
	now := w.To

	g, err := f.s.GovernanceMetrics(ctx, w, experiment.Scope{Pools: []string{"p"}, Queues: []string{"serve"}}, now)
	if err != nil {
		t.Fatal(err)
	}
	// Runs in p, GPU-seconds clipped to the window: A 630 + 6540 (11 min
	// until the window's end), B 1260, T 3600, C 2700, D 3600; E's failed
	// start delivered nothing.
	const pTotal = 630 + 6540 + 1260 + 3600 + 2700 + 3600
	checkCounts(t, "pool p", map[string]int{"preemptions": g.Preemptions, "resumes_verified": g.ResumesVerified,
		"resumes_failed": g.ResumesFailed, "reclaims": g.Reclaims, "false_reclaims": g.FalseReclaims, "starts": g.Starts,
		"start_failures": g.StartFailures},
		map[string]int{"preemptions": 2, "resumes_verified": 1, "resumes_failed": 1, "reclaims": 1, "false_reclaims": 1,
			"starts": 6, "start_failures": 2})
	checkFloat(t, "effective_run_loss_gpu_s", &g.EffectiveRunLossGPUSeconds, 320)
	checkFloat(t, "recompute_gpu_s", &g.RecomputeGPUSeconds, 60)
	checkFloat(t, "resume_success_rate", g.ResumeSuccessRate, 0.5)
	checkFloat(t, "start_success_rate", g.StartSuccessRate, 6.0/8)
	checkFloat(t, "gpu_release_time_s", g.GPUReleaseTimeSeconds, 45) // median of 30 s and 60 s
	checkFloat(t, "cancel_rate", g.CancelRate, 3.0/9)                // C (reclaimed), G, H of 9 submitted in p
	checkFloat(t, "service_share_delivered", g.ServiceShareDelivered, 3600.0/pTotal)
	if !slices.Equal(g.Measured, store.GovernanceMeasured) {
		t.Fatalf("measured %v, want %v", g.Measured, store.GovernanceMeasured)
	}

	all, err := f.s.GovernanceMetrics(ctx, w, experiment.Scope{Queues: []string{"serve"}}, now)
	if err != nil {
		t.Fatal(err)
	}
	if all.Starts != 7 || all.Preemptions != 2 {
		t.Fatalf("every pool: %d starts, %d preemptions; want 7 and 2", all.Starts, all.Preemptions)
	}
	checkFloat(t, "every pool cancel_rate", all.CancelRate, 3.0/10)
	checkFloat(t, "every pool service_share_delivered", all.ServiceShareDelivered, (3600.0+1800)/(pTotal+1800))

	// Every queue watched: the share is all of it.
	every, err := f.s.GovernanceMetrics(ctx, w, experiment.Scope{Pools: []string{"p"}}, now)
	if err != nil {
		t.Fatal(err)
	}
	checkFloat(t, "every queue service_share_delivered", every.ServiceShareDelivered, 1)

	// The first 15 minutes: what happened by then only (A's preemption and
	// resume; B's preemption had not started; T had not run).
	early, err := f.s.GovernanceMetrics(ctx, queuereport.Window{From: f.base, To: f.base.Add(15 * time.Minute)},
		experiment.Scope{Pools: []string{"p"}, Queues: []string{"serve"}}, now)
	if err != nil {
		t.Fatal(err)
	}
	if early.Preemptions != 1 || early.ResumesVerified != 1 || early.Reclaims != 0 || early.Starts != 5 || early.StartFailures != 2 {
		t.Fatalf("first 15 minutes: %+v", early)
	}
	checkFloat(t, "early service_share_delivered", early.ServiceShareDelivered, 0)
	checkFloat(t, "early gpu_release_time_s", early.GPUReleaseTimeSeconds, 30)
	checkFloat(t, "early effective_run_loss_gpu_s", &early.EffectiveRunLossGPUSeconds, 120)

	// A window after the history: nothing happened, rates undefined; A's
	// second run, still going, is all the GPU-seconds delivered.
	later := queuereport.Window{From: now.Add(time.Hour), To: now.Add(2 * time.Hour)}
	none, err := f.s.GovernanceMetrics(ctx, later, experiment.Scope{Pools: []string{"p"}}, later.To)
	if err != nil {
		t.Fatal(err)
	}
	if none.Preemptions != 0 || none.Starts != 0 || none.ResumeSuccessRate != nil || none.StartSuccessRate != nil ||
		none.GPUReleaseTimeSeconds != nil || none.CancelRate != nil {
		t.Fatalf("window after the history: %+v", none)
	}
	checkFloat(t, "later service_share_delivered", none.ServiceShareDelivered, 1)
}

// TestGovernanceMetricsWindow checks the window rules: an inverted window
// or one starting after now is ErrInvalid naming the field.
func TestGovernanceMetricsWindow(t *testing.T) {
	t.Parallel()
	s, _ := newStore(t)
	ctx := context.Background()
	for _, c := range []struct {
		w     queuereport.Window
		now   time.Time
		field string
	}{
		{queuereport.Window{From: t0, To: t0}, t0, "window.to"},
		{queuereport.Window{From: t0.Add(time.Hour), To: t0.Add(2 * time.Hour)}, t0, "window.from"},
		{queuereport.Window{To: t0}, t0, "window.from"},
	} {
		_, err := s.GovernanceMetrics(ctx, c.w, experiment.Scope{}, c.now)
		var ve *store.ValidationError
		if !errors.Is(err, store.ErrInvalid) || !errors.As(err, &ve) || ve.Field != c.field {
			t.Fatalf("window %+v at %v: %v, want ErrInvalid on %s", c.w, c.now, err, c.field)
		}
	}
}

// checkCounts compares named counts.
func checkCounts(t *testing.T, what string, got, want map[string]int) {
	t.Helper()
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s: %s = %d, want %d", what, k, got[k], v)
		}
	}
}

// checkFloat compares a measured value with want (nil fails).
func checkFloat(t *testing.T, what string, got *float64, want float64) {
	t.Helper()
	if got == nil || math.Abs(*got-want) > 1e-6 {
		t.Errorf("%s = %v, want %v", what, deref(got), want)
	}
}

// deref renders a *float64 for messages.
func deref(p *float64) any {
	if p == nil {
		return "nil"
	}
	return *p
}
