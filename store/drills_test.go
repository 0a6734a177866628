package store_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/gpugov/gpugov/internal/scheduling"
	"github.com/gpugov/gpugov/internal/vocab"
	"github.com/gpugov/gpugov/store"
	"github.com/gpugov/gpugov/store/storetest"
)

// runningJob submits a job of project x in pool p (checkpointable as
// given) at at, places it on GPU g of node 0 then and marks its run running;
// it returns the job, its allocation and its run.
func runningJob(t *testing.T, s *store.Store, pool scheduling.Pool, g int, checkpointable bool, at time.Time) (*store.Job, string, string) {
	t.Helper()
	ctx := context.Background()
	j := storetest.Submit(t, s, &store.NewJob{Project: "x", Queue: "train", Tier: vocab.TierStandard, SubmitTime: at,
		Request: scheduling.ResourceRequest{GPUs: 1, Pool: pool.Name, CPUMilli: 4000, MemoryMiB: 16384}})
	if checkpointable {
		if _, err := s.Pool().Exec(ctx, `UPDATE jobs SET recovery = recovery || '{"checkpointable": true, "checkpoint_interval_s": 60}'
			WHERE id = $1`, j.ID); err != nil {
			t.Fatal(err)
		}
	}
	n := pool.Nodes[0]
	out, err := s.ApplyCycle(ctx, "c-"+j.ID, &scheduling.Result{Placements: []scheduling.Placement{
		place(j.ID, pool.Name, n.Name, 1000, n.GPUs[g].UUID)}}, at)
	if err != nil || len(out.Placed) != 1 {
		t.Fatalf("place %s: %+v %v", j.ID, out, err)
	}
	run, err := s.MarkRunning(ctx, j.ID, out.Placed[0].AllocationID, 0, at)
	if err != nil {
		t.Fatal(err)
	}
	return j, out.Placed[0].AllocationID, run
}

// TestOpenDrillRefusals: a drill is refused, nothing stored, for an
// unknown job (not found), and with a conflict naming why for a job that
// is not running, not checkpointable, protected, already in a drill or
// inside a protection window.
func TestOpenDrillRefusals(t *testing.T) {
	t.Parallel()
	pool := testPool("p", 1, 4)
	s := newStoreWith(t, pool)
	ctx := context.Background()
	at := t0.Add(time.Hour)
	ok, alloc, run := runningJob(t, s, pool, 0, true, at)
	plain, _, _ := runningJob(t, s, pool, 1, false, at)
	guarded, _, _ := runningJob(t, s, pool, 2, true, at)
	if _, err := s.Pool().Exec(ctx, `UPDATE jobs SET protected = true WHERE id = $1`, guarded.ID); err != nil {
		t.Fatal(err)
	}
	waiting := submit(t, s, "x", "p", 1, 0)
	drill := func(id, window string) error {
		_, err := s.OpenDrill(ctx, store.NewDrill{JobID: id, Actor: "ops", Reason: "earn evidence", ProtectionWindow: window, At: at})
		return err
	}
	if err := drill("j-nosuchjob", ""); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("unknown job: %v, want ErrNotFound", err)
	}
	if err := drill(ok.ID, "launch"); !errors.Is(err, store.ErrConflict) || !strings.Contains(err.Error(), "inside protection window launch") {
		t.Errorf("protection window: %v", err)
	}
	for _, tc := range []struct{ id, want string }{
		{waiting.ID, "job is submitted; only a running job can be drilled"},
		{plain.ID, "job is not checkpointable"},
		{guarded.ID, "job is protected"},
	} {
		if err := drill(tc.id, ""); !errors.Is(err, store.ErrConflict) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("drill of %s: %v, want a conflict saying %q", tc.id, err, tc.want)
		}
	}
	if _, err := s.OpenDrill(ctx, store.NewDrill{JobID: ok.ID, Actor: "ops"}); !errors.Is(err, store.ErrInvalid) {
		t.Errorf("no reason: %v, want ErrInvalid", err)
	}
	if n := queryInt(t, s, `SELECT count(*) FROM preemptions`); n != 0 {
		t.Fatalf("%d preemption records after refusals", n)
	}
	d, err := s.OpenDrill(ctx, store.NewDrill{JobID: ok.ID, Actor: "ops", Reason: "earn evidence", At: at})
	if err != nil || d.AllocationID != alloc || d.RunID != run || d.Pool != "p" {
		t.Fatalf("drill %+v, %v", d, err)
	}
	if err := drill(ok.ID, ""); !errors.Is(err, store.ErrConflict) || !strings.Contains(err.Error(), "already in drill "+d.PreemptionID) {
		t.Errorf("second drill: %v", err)
	}
	rec, err := s.GetPreemption(ctx, d.PreemptionID)
	if err != nil || rec.Kind != vocab.PreemptionDrill || rec.DrillActor != "ops" || rec.ForJobID != "" || rec.CycleID != "" ||
		rec.State != vocab.PreemptionInProgress || rec.Reason != "earn evidence" || rec.GPUs != 1 || rec.VictimQueue != "train" ||
		rec.RunID != run || rec.RunStartedAt == nil || !rec.RunStartedAt.Equal(at) {
		t.Fatalf("drill record %+v (%v)", rec, err)
	}
	audit, _ := s.AuditFor(ctx, ok.ID, 10)
	if last := audit[len(audit)-1]; last.Action != store.AuditDrill || last.Actor != "ops" || last.Evidence["preemption_id"] != d.PreemptionID {
		t.Errorf("audit %+v", last)
	}
	// An in-progress drill serves no pending job: the snapshot loads.
	if snap, err := s.LoadSnapshot(ctx, at); err != nil || len(snap.Pending) != 1 || len(snap.Pending[0].PreemptionInProgress) != 0 {
		t.Fatalf("snapshot with a drill open: %v", err)
	}
}

// TestDrillRunsAsPreemption: the preemption steps work on a drill — the
// notice (its notification names the kind), the checkpoint, the release,
// the requeue with the drill's detail and no blocking job — and its
// verified resume is recorded once for the profile (kind drill), with the
// drill counted for the daily bound.
func TestDrillRunsAsPreemption(t *testing.T) {
	t.Parallel()
	pool := testPool("p", 1, 2)
	s := newStoreWith(t, pool)
	ctx := context.Background()
	at := t0.Add(time.Hour)
	j, _, run := runningJob(t, s, pool, 0, true, at)
	if err := s.RecordCheckpoint(ctx, j.ID, run, scheduling.Checkpoint{At: at.Add(time.Minute), Step: 60}); err != nil {
		t.Fatal(err)
	}
	d, err := s.OpenDrill(ctx, store.NewDrill{JobID: j.ID, Actor: "ops", Reason: "earn evidence", At: at.Add(2 * time.Minute)})
	if err != nil {
		t.Fatal(err)
	}
	rec, err := s.NoticePreemption(ctx, d.PreemptionID, "preempt/"+j.ID+"/"+run, at.Add(2*time.Minute))
	if err != nil || rec.NotifiedAt == nil || rec.RunID != run || rec.ForQueue != "" {
		t.Fatalf("notice %+v, %v", rec, err)
	}
	if n := queryInt(t, s, `SELECT count(*) FROM notifications WHERE job_id = $1 AND kind = 'job.preemption_notice'
		AND data->>'kind' = 'drill' AND data->>'for_job_id' = ''`, j.ID); n != 1 {
		t.Errorf("%d drill notices", n)
	}
	if err := s.RecordCheckpoint(ctx, j.ID, run, scheduling.Checkpoint{At: at.Add(3 * time.Minute), Step: 180}); err != nil {
		t.Fatal(err)
	}
	step := int64(190)
	if cp, err := s.RecordPreemptionCheckpoint(ctx, d.PreemptionID, &step); err != nil || !cp.Came {
		t.Fatalf("checkpoint %+v, %v", cp, err)
	}
	if _, err := s.ReleasePreempted(ctx, d.PreemptionID, "stopped by resume drill "+d.PreemptionID, at.Add(3*time.Minute)); err != nil {
		t.Fatal(err)
	}
	rq, err := s.RequeuePreempted(ctx, d.PreemptionID, at.Add(3*time.Minute))
	if err != nil || rq.State != vocab.JobWaiting {
		t.Fatalf("requeue %+v, %v", rq, err)
	}
	ev, _ := s.JobWaitEvents(ctx, j.ID)
	if last := ev[len(ev)-1]; !strings.Contains(last.Detail, "requeued by resume drill "+d.PreemptionID) || last.BlockingJobID != "" {
		t.Errorf("wait event %+v", last)
	}
	n := pool.Nodes[0]
	out, _ := s.ApplyCycle(ctx, "c-resume", &scheduling.Result{Placements: []scheduling.Placement{
		place(j.ID, "p", n.Name, 1000, n.GPUs[1].UUID)}}, at.Add(4*time.Minute))
	run2, err := s.MarkRunning(ctx, j.ID, out.Placed[0].AllocationID, 180, at.Add(4*time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	ok, from, resumedAt, passed := true, int64(180), at.Add(4*time.Minute), at.Add(5*time.Minute)
	loss := 125.0
	for range 2 { // a retried step records once
		if _, err := s.FinishPreemption(ctx, d.PreemptionID, store.PreemptionResume{Outcome: vocab.PreemptionCompleted,
			ResumedRunID: run2, ResumedFromStep: &from, ResumedAt: &resumedAt, PassedAt: &passed, ResumedCorrectly: &ok, Progressed: true,
			LostSeconds: 10, SaveRestoreS: 55, LossGPUSeconds: loss, Detail: "resumed at step 180", At: passed}); err != nil {
			t.Fatal(err)
		}
	}
	// FinishPreemption recorded the evidence; the abort path's recorder adds none.
	if got, err := s.RecordDrillEvidence(ctx, d.PreemptionID); err != nil || got != "" {
		t.Fatalf("drill evidence %q, %v", got, err)
	}
	rec, _ = s.GetPreemption(ctx, d.PreemptionID)
	if rec.EffectiveLossGPUSeconds == nil || *rec.EffectiveLossGPUSeconds != loss || rec.State != vocab.PreemptionReleased {
		t.Errorf("finished drill %+v", rec)
	}
	evs, err := s.ResumeEvidenceOf(ctx, j.ID)
	if err != nil || len(evs) != 1 || evs[0].Kind != vocab.EvidenceDrill || evs[0].Outcome != vocab.ResumeVerified || evs[0].Key != d.PreemptionID {
		t.Fatalf("evidence %+v, %v", evs, err)
	}
	pr, err := s.ProfileEvidence(ctx, evs[0].Profile, 0, passed)
	if err != nil || pr.Verified != 1 || pr.Failed != 0 {
		t.Errorf("profile record %+v, %v", pr, err)
	}
	if got, err := s.DrillsSince(ctx, at); err != nil || got[evs[0].Profile] != 1 {
		t.Errorf("drills since: %v, %v", got, err)
	}
	if got, err := s.DrillsSince(ctx, at.Add(time.Hour)); err != nil || len(got) != 0 {
		t.Errorf("drills since later: %v, %v", got, err)
	}
	drills, err := s.ListPreemptions(ctx, store.PreemptionFilter{Kind: vocab.PreemptionDrill})
	if err != nil || len(drills) != 1 || drills[0].ID != d.PreemptionID {
		t.Errorf("drills listed %+v, %v", drills, err)
	}
	if others, _ := s.ListPreemptions(ctx, store.PreemptionFilter{Kind: vocab.PreemptionForJob}); len(others) != 0 {
		t.Errorf("preemptions of kind preemption: %+v", others)
	}
}

// TestDrillAbortEvidence: a drill whose victim saved nothing in its grace
// is a failed resume of its profile, recorded once; one that ended for
// another reason proves nothing.
func TestDrillAbortEvidence(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		outcome vocab.PreemptionOutcome
		want    vocab.ResumeOutcome
		ok      bool
	}{
		{vocab.PreemptionAbortedNoCkpt, vocab.ResumeFailed, true},
		{vocab.PreemptionAbortedIneligible, "", false},
		{vocab.PreemptionVictimEnded, "", false},
		{vocab.PreemptionCompleted, "", false}, // FinishPreemption's to record
	} {
		if got, ok := store.DrillResumeOutcome(&store.PreemptionRecord{Outcome: tc.outcome}); got != tc.want || ok != tc.ok {
			t.Errorf("%s: %q %v, want %q %v", tc.outcome, got, ok, tc.want, tc.ok)
		}
	}
	pool := testPool("p", 1, 1)
	s := newStoreWith(t, pool)
	ctx := context.Background()
	at := t0.Add(time.Hour)
	j, _, _ := runningJob(t, s, pool, 0, true, at)
	d, err := s.OpenDrill(ctx, store.NewDrill{JobID: j.ID, Actor: "ops", Reason: "r", At: at})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.AbortPreemption(ctx, d.PreemptionID, vocab.PreemptionAbortedNoCkpt, "no checkpoint within the 10 s grace", at); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if got, err := s.RecordDrillEvidence(ctx, d.PreemptionID); err != nil || got != vocab.ResumeFailed {
			t.Fatalf("abort evidence %q, %v", got, err)
		}
	}
	evs, err := s.ResumeEvidenceOf(ctx, j.ID)
	if err != nil || len(evs) != 1 || evs[0].Kind != vocab.EvidenceDrill || evs[0].Outcome != vocab.ResumeFailed {
		t.Fatalf("evidence %+v, %v", evs, err)
	}
}

// TestUnstartedDrills lists a drill whose workflow never noticed it, and
// stops listing it once noticed.
func TestUnstartedDrills(t *testing.T) {
	t.Parallel()
	pool := testPool("p", 1, 1)
	s := newStoreWith(t, pool)
	ctx := context.Background()
	at := t0.Add(time.Hour)
	j, alloc, run := runningJob(t, s, pool, 0, true, at)
	d, err := s.OpenDrill(ctx, store.NewDrill{JobID: j.ID, Actor: "ops", Reason: "r", At: at})
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := s.UnstartedDrills(ctx, at); len(got) != 0 {
		t.Errorf("a drill just opened is not late: %+v", got)
	}
	got, err := s.UnstartedDrills(ctx, at.Add(time.Minute))
	if err != nil || len(got) != 1 || got[0] != (store.StartedDrill{PreemptionID: d.PreemptionID, JobID: j.ID, AllocationID: alloc, RunID: run, Pool: "p"}) {
		t.Fatalf("unstarted %+v, %v", got, err)
	}
	if _, err := s.NoticePreemption(ctx, d.PreemptionID, "wf", at); err != nil {
		t.Fatal(err)
	}
	if got, _ := s.UnstartedDrills(ctx, at.Add(time.Minute)); len(got) != 0 {
		t.Errorf("a noticed drill is started: %+v", got)
	}
}
