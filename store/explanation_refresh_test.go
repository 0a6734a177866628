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

// TestExplanationRefreshForSpread checks that ExplanationRefreshFor spreads
// job IDs over the whole of [ExplanationRefresh/2, ExplanationRefresh), not
// its first seconds, so that explanations written in one cycle come due in
// different later ones.
func TestExplanationRefreshForSpread(t *testing.T) {
	t.Parallel()
	lo, hi := store.ExplanationRefresh, time.Duration(0)
	for i := range 1000 {
		d := store.ExplanationRefreshFor(fmt.Sprintf("j-%d", i))
		lo, hi = min(lo, d), max(hi, d)
	}
	half := store.ExplanationRefresh / 2
	if lo < half || hi >= store.ExplanationRefresh || hi-lo < half*9/10 {
		t.Fatalf("1,000 IDs spread over [%s, %s], want most of [%s, %s)", lo, hi, half, store.ExplanationRefresh)
	}
}

// TestApplyCycleAfterSnapshot checks the path of a cycle applied after a
// LoadSnapshot on the same Store (the scheduler's): the jobs whose
// explanation the snapshot saw current are kept without being read, a
// changed detail is refreshed, a due explanation is rewritten, and a due
// explanation whose digest a concurrent writer cleared after the load is
// left to the next cycle, which writes it. The snapshot carries each
// pending job's stored reason.
func TestApplyCycleAfterSnapshot(t *testing.T) {
	t.Parallel()
	s, _ := newStore(t)
	ctx := context.Background()
	if err := s.UpsertInventory(ctx, []scheduling.Pool{testPool("p", 1, 4)}); err != nil {
		t.Fatal(err)
	}
	a, b := submit(t, s, "vision", "p", 8, 0), submit(t, s, "vision", "p", 8, 0)
	at := func(sec int) time.Time { return t0.Add(time.Duration(sec) * time.Second) }
	cycle := func(sec int, detailB string) *store.CycleOutcome {
		t.Helper()
		snap, err := s.LoadSnapshot(ctx, at(sec))
		if err != nil {
			t.Fatal(err)
		}
		if sec > 0 {
			for _, p := range snap.Pending {
				if p.StoredReason != vocab.ReasonCapacityBusy {
					t.Fatalf("cycle at %d s: snapshot's stored reason of %s is %q", sec, p.ID, p.StoredReason)
				}
			}
		}
		res := &scheduling.Result{Waiting: []scheduling.WaitStatus{
			{JobID: a.ID, Reason: vocab.ReasonCapacityBusy, Detail: "0 of 4 free", Rank: 1},
			{JobID: b.ID, Reason: vocab.ReasonCapacityBusy, Detail: detailB, Rank: 2}}}
		out, err := s.ApplyCycle(ctx, fmt.Sprintf("snap-%d", sec), res, at(sec))
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	explainedAt := func(id string) time.Time {
		t.Helper()
		var ts time.Time
		if err := s.Pool().QueryRow(ctx, `SELECT explained_at FROM jobs WHERE id = $1`, id).Scan(&ts); err != nil {
			t.Fatal(err)
		}
		return ts.UTC()
	}
	if out := cycle(0, "0 of 4 free"); out.WaitTransitions != 2 {
		t.Fatalf("first cycle: %+v", out)
	}
	if out := cycle(5, "0 of 4 free"); out.ExplanationsKept != 2 || out.WaitRefreshes != 0 {
		t.Fatalf("unchanged cycle: %+v, want both kept", out)
	}
	if out := cycle(10, "0 of 4 free, 1 draining"); out.ExplanationsKept != 1 || out.WaitRefreshes != 1 {
		t.Fatalf("changed detail: %+v, want one kept, one refreshed", out)
	}
	// At 75 s both are due (written at 0 s and 10 s, more than
	// ExplanationRefresh ago). A concurrent writer clears b's digest between
	// the load and the apply.
	snap, err := s.LoadSnapshot(ctx, at(75))
	if err != nil || len(snap.Pending) != 2 {
		t.Fatalf("load: %v", err)
	}
	if _, err := s.Pool().Exec(ctx, `UPDATE jobs SET explanation_digest = NULL WHERE id = $1`, b.ID); err != nil {
		t.Fatal(err)
	}
	res := &scheduling.Result{Waiting: []scheduling.WaitStatus{
		{JobID: a.ID, Reason: vocab.ReasonCapacityBusy, Detail: "0 of 4 free", Rank: 1},
		{JobID: b.ID, Reason: vocab.ReasonCapacityBusy, Detail: "0 of 4 free, 1 draining", Rank: 2}}}
	if _, err := s.ApplyCycle(ctx, "snap-75", res, at(75)); err != nil {
		t.Fatal(err)
	}
	if got := explainedAt(a.ID); !got.Equal(at(75)) {
		t.Fatalf("a explained at %s, want the due rewrite at %s", got, at(75))
	}
	if got := explainedAt(b.ID); !got.Equal(at(10)) {
		t.Fatalf("b explained at %s, want left at %s (its digest changed after the load)", got, at(10))
	}
	if out := cycle(80, "0 of 4 free, 1 draining"); out.ExplanationsKept != 1 {
		t.Fatalf("next cycle: %+v, want a kept and b written", out)
	}
	if got := explainedAt(b.ID); !got.Equal(at(80)) {
		t.Fatalf("b explained at %s, want %s", got, at(80))
	}
	if n := queryInt(t, s, `SELECT count(*) FROM wait_events WHERE job_id = ANY($1)`, []string{a.ID, b.ID}); n != 2 {
		t.Fatalf("%d wait events, want 2 (one reason each throughout)", n)
	}
}

// TestExplanationRefreshInterval checks the depth tiers of
// store.ExplanationRefreshInterval: the first ExplanationRefreshDepth ranks
// (and an unknown rank, 0) keep ExplanationRefreshFor; beyond them the
// interval is that times ⌈rank / depth⌉, at most ExplanationRefreshMax,
// and the deepest jobs' intervals still spread over most of
// [ExplanationRefreshMax/2, ExplanationRefreshMax).
func TestExplanationRefreshInterval(t *testing.T) {
	t.Parallel()
	depth := store.ExplanationRefreshDepth
	for i := range 200 {
		id := fmt.Sprintf("j-%d", i)
		base := store.ExplanationRefreshFor(id)
		for _, c := range []struct {
			rank, times int
		}{{0, 1}, {1, 1}, {depth, 1}, {depth + 1, 2}, {2 * depth, 2}, {2*depth + 1, 3}, {5 * depth, 5},
			{9*depth + 1, 10}, {10 * depth, 10}, {10*depth + 1, 10}, {100 * depth, 10}} {
			got := store.ExplanationRefreshInterval(id, c.rank)
			if want := base * time.Duration(c.times); got != want {
				t.Fatalf("%s at rank %d: %s, want %s (%d × %s)", id, c.rank, got, want, c.times, base)
			}
			if got > store.ExplanationRefreshMax {
				t.Fatalf("%s at rank %d: %s, above ExplanationRefreshMax", id, c.rank, got)
			}
		}
	}
	lo, hi := store.ExplanationRefreshMax, time.Duration(0)
	for i := range 1000 {
		d := store.ExplanationRefreshInterval(fmt.Sprintf("j-%d", i), 100*depth)
		lo, hi = min(lo, d), max(hi, d)
	}
	half := store.ExplanationRefreshMax / 2
	if lo < half || hi >= store.ExplanationRefreshMax || hi-lo < half*9/10 {
		t.Fatalf("1,000 deep IDs spread over [%s, %s], want most of [%s, %s)", lo, hi, half, store.ExplanationRefreshMax)
	}
}

// TestDeepWaitRefreshedLess checks the depth tiers in ApplyCycle, with and
// without the snapshot's memo: once the head interval has passed, a job at
// the head (rank 1) is rewritten while an unchanged job deep in the queue
// (rank 5,001: six times the interval) is kept, and a deep job whose
// detail changed is written at once; the deep unchanged job is rewritten
// when its own interval has passed.
func TestDeepWaitRefreshedLess(t *testing.T) {
	t.Parallel()
	for _, withSnapshot := range []bool{false, true} {
		t.Run(fmt.Sprintf("snapshot=%t", withSnapshot), func(t *testing.T) {
			t.Parallel()
			s, _ := newStore(t)
			ctx := context.Background()
			if err := s.UpsertInventory(ctx, []scheduling.Pool{testPool("p", 1, 4)}); err != nil {
				t.Fatal(err)
			}
			head, deep, deepChanged := submit(t, s, "vision", "p", 8, 0), submit(t, s, "vision", "p", 8, 0),
				submit(t, s, "vision", "p", 8, 0)
			const deepRank = 5*store.ExplanationRefreshDepth + 1
			at := func(sec int) time.Time { return t0.Add(time.Duration(sec) * time.Second) }
			apply := func(sec int, changedDetail string) *store.CycleOutcome {
				t.Helper()
				if withSnapshot {
					if _, err := s.LoadSnapshot(ctx, at(sec)); err != nil {
						t.Fatal(err)
					}
				}
				w := func(id string, rank int, detail string) scheduling.WaitStatus {
					return scheduling.WaitStatus{JobID: id, Reason: vocab.ReasonCapacityBusy, Detail: detail, Rank: rank,
						Priority: scheduling.Priority{Score: float64(1000 + sec)}}
				}
				res := &scheduling.Result{Waiting: []scheduling.WaitStatus{w(head.ID, 1, "0 of 4 free"),
					w(deep.ID, deepRank, "0 of 4 free"), w(deepChanged.ID, deepRank+1, changedDetail)}}
				out, err := s.ApplyCycle(ctx, fmt.Sprintf("deep-%d", sec), res, at(sec))
				if err != nil {
					t.Fatal(err)
				}
				return out
			}
			explainedAt := func(id string) time.Time {
				t.Helper()
				var ts time.Time
				if err := s.Pool().QueryRow(ctx, `SELECT explained_at FROM jobs WHERE id = $1`, id).Scan(&ts); err != nil {
					t.Fatal(err)
				}
				return ts.UTC()
			}
			if out := apply(0, "0 of 4 free"); out.WaitTransitions != 3 {
				t.Fatalf("first cycle: %+v", out)
			}
			// The first cycle past the head's interval and every deep one's
			// head interval, before the deep job's own.
			sec := int(max(store.ExplanationRefreshFor(head.ID), store.ExplanationRefreshFor(deep.ID),
				store.ExplanationRefreshFor(deepChanged.ID))/time.Second) + 1
			if d := store.ExplanationRefreshInterval(deep.ID, deepRank); time.Duration(sec)*time.Second >= d {
				t.Fatalf("deep interval %s, want above %d s", d, sec)
			}
			out := apply(sec, "0 of 4 free, 1 draining")
			if out.ExplanationsKept != 1 || out.WaitRefreshes != 1 {
				t.Fatalf("cycle at %d s: %+v, want the deep unchanged job kept and the deep changed one refreshed", sec, out)
			}
			if got := explainedAt(head.ID); !got.Equal(at(sec)) {
				t.Fatalf("head job explained at %s, want rewritten at %s", got, at(sec))
			}
			if got := explainedAt(deep.ID); !got.Equal(at(0)) {
				t.Fatalf("deep unchanged job explained at %s, want kept from %s", got, at(0))
			}
			if got := explainedAt(deepChanged.ID); !got.Equal(at(sec)) {
				t.Fatalf("deep changed job explained at %s, want written at %s", got, at(sec))
			}
			due := int(store.ExplanationRefreshInterval(deep.ID, deepRank)/time.Second) + 1
			apply(due, "0 of 4 free, 1 draining")
			if got := explainedAt(deep.ID); !got.Equal(at(due)) {
				t.Fatalf("deep unchanged job explained at %s, want rewritten at %s (its interval passed)", got, at(due))
			}
		})
	}
}

// TestDeepReleasesRefreshedAtDepthInterval checks that the expected
// releases are in the digest only within ExplanationRefreshDepth ranks: a
// new release list rewrites the head job's explanation at once and leaves
// the deep job's stored one (and its old list) until its depth's interval,
// when the new list is written; with and without the snapshot's memo.
func TestDeepReleasesRefreshedAtDepthInterval(t *testing.T) {
	t.Parallel()
	for _, withSnapshot := range []bool{false, true} {
		t.Run(fmt.Sprintf("snapshot=%t", withSnapshot), func(t *testing.T) {
			t.Parallel()
			s, _ := newStore(t)
			ctx := context.Background()
			if err := s.UpsertInventory(ctx, []scheduling.Pool{testPool("p", 1, 4)}); err != nil {
				t.Fatal(err)
			}
			head, deep := submit(t, s, "vision", "p", 8, 0), submit(t, s, "vision", "p", 8, 0)
			const deepRank = 5*store.ExplanationRefreshDepth + 1
			at := func(sec int) time.Time { return t0.Add(time.Duration(sec) * time.Second) }
			apply := func(sec int, releaser string) *store.CycleOutcome {
				t.Helper()
				if withSnapshot {
					if _, err := s.LoadSnapshot(ctx, at(sec)); err != nil {
						t.Fatal(err)
					}
				}
				rel := []scheduling.ExpectedRelease{{JobID: releaser, Milli: 1000, ExpectedEnd: t0.Add(time.Hour)}}
				w := func(id string, rank int) scheduling.WaitStatus {
					return scheduling.WaitStatus{JobID: id, Reason: vocab.ReasonQuotaExhausted, Detail: "quota used", Rank: rank,
						Releases: rel, Priority: scheduling.Priority{Score: float64(1000 + sec)}}
				}
				res := &scheduling.Result{Waiting: []scheduling.WaitStatus{w(head.ID, 1), w(deep.ID, deepRank)}}
				out, err := s.ApplyCycle(ctx, fmt.Sprintf("rel-%d", sec), res, at(sec))
				if err != nil {
					t.Fatal(err)
				}
				return out
			}
			releaseOf := func(id string) (string, time.Time) {
				t.Helper()
				var job string
				var ts time.Time
				if err := s.Pool().QueryRow(ctx, `SELECT explanation->'releases'->0->>'job_id', explained_at FROM jobs WHERE id = $1`,
					id).Scan(&job, &ts); err != nil {
					t.Fatal(err)
				}
				return job, ts.UTC()
			}
			apply(0, "run-a")
			out := apply(5, "run-b") // run-a ended: the next release is run-b's
			if out.ExplanationsKept != 1 {
				t.Fatalf("cycle at 5 s: %+v, want the deep job kept", out)
			}
			if job, ts := releaseOf(head.ID); job != "run-b" || !ts.Equal(at(5)) {
				t.Fatalf("head job: release %q explained at %s, want run-b at %s", job, ts, at(5))
			}
			if job, ts := releaseOf(deep.ID); job != "run-a" || !ts.Equal(at(0)) {
				t.Fatalf("deep job: release %q explained at %s, want run-a kept from %s", job, ts, at(0))
			}
			due := int(store.ExplanationRefreshInterval(deep.ID, deepRank)/time.Second) + 1
			apply(due, "run-b")
			if job, ts := releaseOf(deep.ID); job != "run-b" || !ts.Equal(at(due)) {
				t.Fatalf("deep job: release %q explained at %s, want run-b at %s (its interval passed)", job, ts, at(due))
			}
		})
	}
}
