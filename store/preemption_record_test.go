package store_test

import (
	"context"
	"reflect"
	"testing"
	"time"

	"github.com/gpugov/gpugov/internal/scheduling"
	"github.com/gpugov/gpugov/internal/vocab"
	"github.com/gpugov/gpugov/store"
	"github.com/gpugov/gpugov/store/storetest"
)

// releasedVictim stores a running victim (checkpoint at step 40) preempted
// for another job with the proposal's candidates, noticed, released and
// requeued, then placed again with its next run started at step 40. It
// returns the store, the preemption, the victim and the next run.
func releasedVictim(t *testing.T, cands []scheduling.Candidate) (*store.Store, string, *store.Job, string) {
	t.Helper()
	ctx := context.Background()
	pool := testPool("p", 1, 2)
	s := newStoreWith(t, pool)
	n := pool.Nodes[0]
	victim, winner := submit(t, s, "vision", "p", 1, 0), submit(t, s, "serving", "p", 1, 0)
	out := storetest.Place(t, s, "c1", t0, place(victim.ID, "p", n.Name, 1000, n.GPUs[0].UUID))
	alloc := out.Placed[0].AllocationID
	run, err := s.MarkRunning(ctx, victim.ID, alloc, 0, t0)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.RecordCheckpoint(ctx, victim.ID, run, scheduling.Checkpoint{At: t0.Add(30 * time.Minute), Step: 40, Location: "s3://40"}); err != nil {
		t.Fatal(err)
	}
	out, err = s.ApplyCycle(ctx, "c2", &scheduling.Result{Preemptions: []scheduling.PreemptionProposal{{ForJobID: winner.ID, Pool: "p",
		Node: n.Name, Act: true, Reason: "test", Candidates: cands,
		Victims: []scheduling.Victim{{JobID: victim.ID, AllocationID: alloc, GPUs: 1, EstimatedLossGPUSeconds: 660}}}}}, t0.Add(40*time.Minute))
	if err != nil || len(out.Preemptions) != 1 {
		t.Fatalf("preemption not opened: %+v %v", out, err)
	}
	id := out.Preemptions[0].PreemptionID
	at := t0.Add(41 * time.Minute)
	if _, err := s.NoticePreemption(ctx, id, "preempt/x", at); err != nil {
		t.Fatal(err)
	}
	if _, err := s.RecordPreemptionCheckpoint(ctx, id, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := s.ReleasePreempted(ctx, id, "released", at); err != nil {
		t.Fatal(err)
	}
	if _, err := s.RequeuePreempted(ctx, id, at); err != nil {
		t.Fatal(err)
	}
	again := storetest.Place(t, s, "c3", at.Add(time.Minute), place(victim.ID, "p", n.Name, 1000, n.GPUs[1].UUID))
	next, err := s.MarkRunning(ctx, victim.ID, again.Placed[0].AllocationID, 40, at.Add(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	return s, id, victim, next
}

// finish records the verify-resume step of preemption id at t0+50 min.
func finish(t *testing.T, s *store.Store, id, run string, correct, progressed bool) {
	t.Helper()
	outcome := vocab.PreemptionCompleted
	if !correct || !progressed {
		outcome = vocab.PreemptionResumeFailed
	}
	step := int64(40)
	if _, err := s.FinishPreemption(context.Background(), id, store.PreemptionResume{Outcome: outcome, ResumedRunID: run,
		ResumedFromStep: &step, ResumedCorrectly: &correct, Progressed: progressed, At: t0.Add(50 * time.Minute)}); err != nil {
		t.Fatal(err)
	}
}

// TestPreemptionRecordFinalOutcome checks the victim's outcome after the
// resume, filled when its job ends whichever comes first of the job's end
// and the verify-resume step: a verified resume of a job that succeeds does
// not affect its output; a resume that did not progress does, and so does
// a wrong-step one; a job failing after a verified resume is affected, with
// its failures since the resume counted. The plan's candidates are kept.
func TestPreemptionRecordFinalOutcome(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cands := []scheduling.Candidate{{JobID: "j-low", Queue: "scratch", LowRisk: true, GPUs: 1, EstimatedLossGPUSeconds: 660, Chosen: true},
		{JobID: "j-pinned", Queue: "train", GPUs: 1, EstimatedLossGPUSeconds: 61, Gate: "not checkpointable"}}
	end := t0.Add(2 * time.Hour)

	t.Run("verified, then succeeded", func(t *testing.T) {
		t.Parallel()
		s, id, victim, run := releasedVictim(t, cands)
		finish(t, s, id, run, true, true)
		if rec, _ := s.GetPreemption(ctx, id); rec.FinalState != "" || rec.OutputAffected != nil {
			t.Fatalf("final outcome %q %v before the job ended", rec.FinalState, rec.OutputAffected)
		}
		if err := s.FinishRun(ctx, victim.ID, run, vocab.RunSucceeded, "done", end); err != nil {
			t.Fatal(err)
		}
		rec, err := s.GetPreemption(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		want := []store.PreemptionCandidate{{JobID: "j-low", Queue: "scratch", LowRisk: true, GPUs: 1, EstimatedLossGPUSeconds: 660, Chosen: true},
			{JobID: "j-pinned", Queue: "train", GPUs: 1, EstimatedLossGPUSeconds: 61, Gate: "not checkpointable"}}
		if !reflect.DeepEqual(rec.Candidates, want) {
			t.Errorf("candidates %+v, want %+v", rec.Candidates, want)
		}
		if rec.FinalState != vocab.JobSucceeded || rec.FinalAt == nil || !rec.FinalAt.Equal(end) || *rec.FailuresSinceResume != 0 ||
			*rec.OutputAffected || rec.OutputNote != "not affected: verified resume, job succeeded" || !*rec.ResumeVerified {
			t.Fatalf("final outcome %q at %v, %d failures, affected %v (%s)", rec.FinalState, rec.FinalAt,
				*rec.FailuresSinceResume, *rec.OutputAffected, rec.OutputNote)
		}
	})
	t.Run("failed before the verify step", func(t *testing.T) {
		t.Parallel()
		s, id, victim, run := releasedVictim(t, nil)
		if err := s.FinishRun(ctx, victim.ID, run, vocab.RunFailed, "exit 1", end); err != nil {
			t.Fatal(err)
		}
		finish(t, s, id, run, true, false)
		rec, _ := s.GetPreemption(ctx, id)
		if rec.FinalState != vocab.JobFailed || *rec.FailuresSinceResume != 1 || !*rec.OutputAffected || *rec.ResumeVerified ||
			rec.OutputNote != "affected: the next run did not progress past the saved step" || len(rec.Candidates) != 0 {
			t.Fatalf("final outcome %q, %d failures, affected %v (%s), candidates %v", rec.FinalState, *rec.FailuresSinceResume,
				*rec.OutputAffected, rec.OutputNote, rec.Candidates)
		}
	})
	t.Run("wrong step", func(t *testing.T) {
		t.Parallel()
		s, id, victim, run := releasedVictim(t, nil)
		finish(t, s, id, run, false, false)
		if err := s.CancelJob(ctx, victim.ID, "alice", "enough"); err != nil {
			t.Fatal(err)
		}
		if err := s.FinishRun(ctx, victim.ID, run, vocab.RunCancelled, "cancelled", end); err != nil {
			t.Fatal(err)
		}
		rec, _ := s.GetPreemption(ctx, id)
		if rec.FinalState != vocab.JobCancelled || !*rec.OutputAffected || rec.OutputNote != "affected: the next run resumed from the wrong step" {
			t.Fatalf("final outcome %q, affected %v (%s)", rec.FinalState, *rec.OutputAffected, rec.OutputNote)
		}
	})
	t.Run("verified, then failed", func(t *testing.T) {
		t.Parallel()
		s, id, victim, run := releasedVictim(t, nil)
		finish(t, s, id, run, true, true)
		if err := s.FinishRun(ctx, victim.ID, run, vocab.RunFailed, "exit 3", end); err != nil {
			t.Fatal(err)
		}
		rec, _ := s.GetPreemption(ctx, id)
		if rec.FinalState != vocab.JobFailed || *rec.FailuresSinceResume != 1 || !*rec.OutputAffected ||
			rec.OutputNote != "affected: the job failed after the resume (1 failure(s) since)" {
			t.Fatalf("final outcome %q, %d failures, affected %v (%s)", rec.FinalState, *rec.FailuresSinceResume, *rec.OutputAffected, rec.OutputNote)
		}
	})
}
