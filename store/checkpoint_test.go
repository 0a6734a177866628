package store_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/gpugov/gpugov/internal/scheduling"
	"github.com/gpugov/gpugov/internal/vocab"
	"github.com/gpugov/gpugov/store"
	"github.com/gpugov/gpugov/store/storetest"
)

// TestRecordCheckpointChecksEvidence checks that a checkpoint is checked
// against its run, not believed: each bogus one is refused — naming the
// field, or as a conflict (an ended run) or stale (an older checkpoint) —
// and changes nothing, while a valid one, a re-save of the same step and a
// repeat are recorded.
func TestRecordCheckpointChecksEvidence(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testPool("p", 1, 3)
	s := newStoreWith(t, pool)
	n := pool.Nodes[0]
	started := t0.Add(10 * time.Minute)
	start := func(nj *store.NewJob, gpu int, startStep int64) (*store.Job, string) {
		t.Helper()
		nj.Queue, nj.Tier, nj.SubmitTime = "train", vocab.TierStandard, t0
		nj.Request = scheduling.ResourceRequest{GPUs: 1, Pool: "p"}
		nj.Recovery.Checkpointable = true
		j := storetest.Submit(t, s, nj)
		out := storetest.Place(t, s, "c-"+j.ID, started, place(j.ID, "p", n.Name, 1000, n.GPUs[gpu].UUID))
		run, err := s.MarkRunning(ctx, j.ID, out.Placed[0].AllocationID, startStep, started)
		if err != nil {
			t.Fatal(err)
		}
		return j, run
	}
	// A simulated job declares run_seconds (one step per second): 1000 steps,
	// resumed at step 40 of a checkpoint it had.
	sim, simRun := start(&store.NewJob{Project: "vision", RunSeconds: 999.5}, 0, 40)
	// A job with a command declaring recovery.total_steps.
	cmd, cmdRun := start(&store.NewJob{Project: "vision", Command: []string{"train"},
		Recovery: scheduling.RecoveryEvidence{TotalSteps: 500}}, 1, 0)
	// One declaring no work: only going backwards is checked.
	free, freeRun := start(&store.NewJob{Project: "vision", Command: []string{"train"}}, 2, 0)

	ok := func(job, run string, cp scheduling.Checkpoint) {
		t.Helper()
		if err := s.RecordCheckpoint(ctx, job, run, cp); err != nil {
			t.Fatalf("checkpoint %+v refused: %v", cp, err)
		}
	}
	state := func(job, run string) string {
		var doc string
		if err := s.Pool().QueryRow(ctx, `SELECT coalesce(r.last_checkpoint::text, '') || ' ' || coalesce(j.recovery->>'last_checkpoint', '')
			FROM runs r JOIN jobs j ON j.id = r.job_id WHERE r.id = $1`, run).Scan(&doc); err != nil {
			t.Fatal(err)
		}
		return doc
	}
	refused := func(job, run string, cp scheduling.Checkpoint, field string, sentinel error) {
		t.Helper()
		before := state(job, run)
		err := s.RecordCheckpoint(ctx, job, run, cp)
		var ve *store.ValidationError
		switch {
		case field != "" && (!errors.As(err, &ve) || ve.Field != field):
			t.Errorf("checkpoint %+v: %v, want a validation error naming %s", cp, err, field)
		case sentinel != nil && !errors.Is(err, sentinel):
			t.Errorf("checkpoint %+v: %v, want %v", cp, err, sentinel)
		}
		if after := state(job, run); after != before {
			t.Errorf("refused checkpoint %+v changed the record: %s → %s", cp, before, after)
		}
	}

	at := func(d time.Duration) time.Time { return started.Add(d) }
	refused(sim.ID, simRun, scheduling.Checkpoint{At: at(-2 * time.Minute), Step: 50}, "at", nil)       // before the run started
	ok(sim.ID, simRun, scheduling.Checkpoint{At: at(-30 * time.Second), Step: 40, Location: "s3://40"}) // within the clock skew
	refused(sim.ID, simRun, scheduling.Checkpoint{At: at(time.Minute), Step: 30}, "step", nil)          // below the run's start step
	refused(sim.ID, simRun, scheduling.Checkpoint{At: at(time.Minute), Step: 1001}, "step", nil)        // beyond run_seconds
	ok(sim.ID, simRun, scheduling.Checkpoint{At: at(5 * time.Minute), Step: 300, Location: "s3://300"})
	ok(sim.ID, simRun, scheduling.Checkpoint{At: at(5 * time.Minute), Step: 300, Location: "s3://300"})              // the same again
	refused(sim.ID, simRun, scheduling.Checkpoint{At: at(2 * time.Minute), Step: 100}, "", store.ErrStaleCheckpoint) // older
	refused(sim.ID, simRun, scheduling.Checkpoint{At: at(4 * time.Minute), Step: 300}, "", store.ErrStaleCheckpoint) // same step, saved earlier
	refused(sim.ID, simRun, scheduling.Checkpoint{At: at(6 * time.Minute), Step: 200}, "step", nil)                  // backwards, later
	refused(sim.ID, simRun, scheduling.Checkpoint{At: at(4 * time.Minute), Step: 400}, "at", nil)                    // forwards, earlier
	ok(sim.ID, simRun, scheduling.Checkpoint{At: at(6 * time.Minute), Step: 300, Location: "s3://300b"})             // re-saved later
	ok(sim.ID, simRun, scheduling.Checkpoint{At: at(9 * time.Minute), Step: 1000, Location: "s3://1000"})            // the last step

	refused(cmd.ID, cmdRun, scheduling.Checkpoint{At: at(time.Minute), Step: 501}, "step", nil)
	ok(cmd.ID, cmdRun, scheduling.Checkpoint{At: at(time.Minute), Step: 500})
	ok(free.ID, freeRun, scheduling.Checkpoint{At: at(time.Minute), Step: 1 << 40})

	// A run whose allocation was released reports no evidence.
	if err := s.FinishRun(ctx, sim.ID, simRun, vocab.RunSucceeded, "done", at(10*time.Minute)); err != nil {
		t.Fatal(err)
	}
	refused(sim.ID, simRun, scheduling.Checkpoint{At: at(11 * time.Minute), Step: 1000, Location: "s3://late"}, "", store.ErrConflict)
	if errors.Is(s.RecordCheckpoint(ctx, sim.ID, simRun, scheduling.Checkpoint{At: at(11 * time.Minute), Step: 1000}), store.ErrStaleCheckpoint) {
		t.Error("a released run's checkpoint is called stale; want the release named")
	}
	if err := s.RecordCheckpoint(ctx, sim.ID, "r-unknown", scheduling.Checkpoint{At: at(time.Minute), Step: 1}); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("unknown run: %v", err)
	}
}
