package store_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/gpugov/gpugov/internal/scheduling"
	"github.com/gpugov/gpugov/internal/vocab"
	"github.com/gpugov/gpugov/store"
)

// TestUnchangedWaitNotRewritten checks store.ExplanationRefresh: cycles 5 s
// apart that see a waiting job in the same situation (same reason and
// detail; rank, score and next-evaluation instant moving) leave its row as
// the first one wrote it until the explanation is ExplanationRefreshFor old;
// a changed detail is written at once; a requeue (placed, then waiting
// again) writes the next cycle's explanation even when it says what the
// digest said before.
func TestUnchangedWaitNotRewritten(t *testing.T) {
	t.Parallel()
	s, _ := newStore(t)
	ctx := context.Background()
	if err := s.UpsertInventory(ctx, []scheduling.Pool{testPool("p", 1, 4)}); err != nil {
		t.Fatal(err)
	}
	job := submit(t, s, "vision", "p", 8, 0)
	at := func(sec int) time.Time { return t0.Add(time.Duration(sec) * time.Second) }
	status := func(sec int, detail string) *scheduling.Result {
		return &scheduling.Result{Waiting: []scheduling.WaitStatus{{JobID: job.ID, Reason: vocab.ReasonCapacityBusy,
			Detail: detail, Rank: 1 + sec, Priority: scheduling.Priority{Score: float64(1000 + sec)},
			Next: scheduling.NextEvaluation{At: at(sec + 5), Kind: vocab.NextEvalTimer}}}}
	}
	apply := func(sec int, detail string) *store.CycleOutcome {
		t.Helper()
		out, err := s.ApplyCycle(ctx, fmt.Sprintf("refresh-%d", sec), status(sec, detail), at(sec))
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	written := func(wantCycle string) {
		t.Helper()
		got, err := s.GetJob(ctx, job.ID)
		if err != nil {
			t.Fatal(err)
		}
		if got.Explanation == nil || got.Explanation.CycleID != wantCycle {
			t.Fatalf("explanation %+v, want the one of cycle %s", got.Explanation, wantCycle)
		}
	}
	if out := apply(0, "0 of 4 free"); out.WaitTransitions != 1 || out.ExplanationsKept != 0 {
		t.Fatalf("first cycle: %+v", out)
	}
	written("refresh-0")
	refresh := int((store.ExplanationRefreshFor(job.ID) + 5*time.Second - 1) / (5 * time.Second) * 5) // the first cycle at or past it
	if d := store.ExplanationRefreshFor(job.ID); d < store.ExplanationRefresh/2 || d >= store.ExplanationRefresh {
		t.Fatalf("ExplanationRefreshFor = %s, want in [%s, %s)", d, store.ExplanationRefresh/2, store.ExplanationRefresh)
	}
	for sec := 5; sec < refresh; sec += 5 {
		if out := apply(sec, "0 of 4 free"); out.ExplanationsKept != 1 || out.WaitTransitions+out.WaitRefreshes != 0 {
			t.Fatalf("cycle at %d s: %+v, want the explanation kept", sec, out)
		}
	}
	written("refresh-0")
	if out := apply(refresh, "0 of 4 free"); out.ExplanationsKept != 0 {
		t.Fatalf("cycle at %d s: %+v, want the explanation rewritten (it is ExplanationRefreshFor old)", refresh, out)
	}
	written(fmt.Sprintf("refresh-%d", refresh))
	if out := apply(refresh+5, "0 of 4 free, 2 draining"); out.WaitRefreshes != 1 || out.ExplanationsKept != 0 {
		t.Fatalf("changed detail: %+v, want one refresh", out)
	}
	written(fmt.Sprintf("refresh-%d", refresh+5))
	if n := queryInt(t, s, `SELECT count(*) FROM wait_events WHERE job_id = $1`, job.ID); n != 1 {
		t.Fatalf("%d wait events, want 1 (one reason throughout)", n)
	}

	// Placed, then requeued: the digest is cleared, so the next cycle's
	// explanation is written although it says the same as before.
	if _, err := s.Pool().Exec(ctx, `UPDATE jobs SET explanation_digest = NULL WHERE id = $1`, job.ID); err != nil {
		t.Fatal(err)
	}
	if out := apply(refresh+10, "0 of 4 free, 2 draining"); out.ExplanationsKept != 0 {
		t.Fatalf("after the digest was cleared: %+v, want the explanation written", out)
	}
	written(fmt.Sprintf("refresh-%d", refresh+10))
}
