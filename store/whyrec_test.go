package store_test

import (
	"context"
	"fmt"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/gpugov/gpugov/internal/scheduling"
	"github.com/gpugov/gpugov/internal/vocab"
	"github.com/gpugov/gpugov/store"
)

// TestOneWaitIsOneEvent checks docs/design.md §1's rule: one continuous wait
// for one reason is one wait event however its detail's numbers change. Five
// cycles give job a capacity_busy status whose detail, re-evaluation
// condition and blocking job change each time: one open event remains,
// started at the first cycle, holding the latest texts; no cycle counts a
// transition after the first, each counts one refresh; the explanation names
// each cycle; a new reason then closes it and opens the second event.
func TestOneWaitIsOneEvent(t *testing.T) {
	t.Parallel()
	s, _ := newStore(t)
	ctx := context.Background()
	if err := s.UpsertInventory(ctx, []scheduling.Pool{testPool("p", 1, 4)}); err != nil {
		t.Fatal(err)
	}
	job := submit(t, s, "vision", "p", 4, 0)
	at := func(c int) time.Time { return t0.Add(time.Duration(c) * time.Minute) }
	for c := range 5 {
		w := scheduling.WaitStatus{JobID: job.ID, Reason: vocab.ReasonCapacityBusy, Rank: 1,
			Detail:     fmt.Sprintf("needs 4 × GPU on one node; 4 match in pool, %d free", c%4),
			ReEvaluate: fmt.Sprintf("when 4 matching GPU(s) on one node are free, or at %s when aging lifts rank", at(c+30).Format(time.RFC3339)),
			Next:       scheduling.NextEvaluation{At: at(c).Add(5 * time.Second), Kind: vocab.NextEvalTimer}}
		out, err := s.ApplyCycle(ctx, fmt.Sprintf("one-wait-%d", c), &scheduling.Result{Waiting: []scheduling.WaitStatus{w}}, at(c))
		if err != nil {
			t.Fatal(err)
		}
		wantTr, wantRf := 0, 1
		if c == 0 {
			wantTr, wantRf = 1, 0
		}
		if out.WaitTransitions != wantTr || out.WaitRefreshes != wantRf {
			t.Fatalf("cycle %d: %d transitions, %d refreshes; want %d, %d", c, out.WaitTransitions, out.WaitRefreshes, wantTr, wantRf)
		}
		got, err := s.GetJob(ctx, job.ID)
		if err != nil {
			t.Fatal(err)
		}
		e := got.Explanation
		if e == nil || e.CycleID != fmt.Sprintf("one-wait-%d", c) || e.EvaluatedAt == nil || !e.EvaluatedAt.Equal(at(c)) ||
			e.NextEvaluation == nil || e.NextEvaluation.Kind != vocab.NextEvalTimer || !e.NextEvaluation.At.Equal(at(c).Add(5*time.Second)) {
			t.Fatalf("cycle %d: explanation %+v", c, e)
		}
	}
	events, err := s.JobWaitEvents(ctx, job.ID)
	if err != nil {
		t.Fatal(err)
	}
	// One capacity_busy event (the job was submitted after t0: no
	// not_yet_evaluated event before it).
	if len(events) != 1 || events[0].Reason != vocab.ReasonCapacityBusy || events[0].EndedAt != nil ||
		!events[0].StartedAt.Equal(at(0)) || events[0].Detail != "needs 4 × GPU on one node; 4 match in pool, 0 free" ||
		events[0].ReEvaluate != fmt.Sprintf("when 4 matching GPU(s) on one node are free, or at %s when aging lifts rank", at(34).Format(time.RFC3339)) {
		t.Fatalf("events %+v, want one open capacity_busy since the first cycle with the latest texts", events)
	}
	if n := queryInt(t, s, `SELECT count(*) FROM decisions WHERE job_id = $1 AND kind = 'wait'`, job.ID); n != 1 {
		t.Fatalf("%d wait decisions, want 1 (the reason changed once)", n)
	}
	out, err := s.ApplyCycle(ctx, "one-wait-held", &scheduling.Result{Waiting: []scheduling.WaitStatus{{JobID: job.ID,
		Reason: vocab.ReasonHeld, Detail: "held by its owner or an operator", Rank: 1}}}, at(5))
	if err != nil || out.WaitTransitions != 1 {
		t.Fatalf("held: %+v, %v", out, err)
	}
	if events, _ = s.JobWaitEvents(ctx, job.ID); len(events) != 2 || events[0].EndedAt == nil || !events[0].EndedAt.Equal(at(5)) ||
		events[1].Reason != vocab.ReasonHeld {
		t.Fatalf("after the reason changed: %+v", events)
	}
}

// TestLastDecision checks the last scheduling action read from decisions
// and the explanation: a reservation holding the job back names the holder
// and keeps its start over cycles that change nothing but numbers; a new
// holder starts a new action; a preemption proposal of the latest cycle is
// the action; a refused placement is; a placement is; a job no cycle saw
// has none.
func TestLastDecision(t *testing.T) {
	t.Parallel()
	s, _ := newStore(t)
	ctx := context.Background()
	pool := testPool("p", 1, 2)
	if err := s.UpsertInventory(ctx, []scheduling.Pool{pool}); err != nil {
		t.Fatal(err)
	}
	job := submit(t, s, "vision", "p", 2, 0)
	other := submit(t, s, "vision", "p", 1, 0)
	last := func(when string) *store.LastDecision {
		t.Helper()
		j, err := s.GetJob(ctx, job.ID)
		if err != nil {
			t.Fatal(err)
		}
		d, err := s.LastDecision(ctx, j)
		if err != nil {
			t.Fatalf("%s: %v", when, err)
		}
		return d
	}
	if d := last("before any cycle"); d != nil {
		t.Fatalf("before any cycle: %+v, want none", d)
	}
	at := func(c int) time.Time { return t0.Add(time.Duration(c) * time.Minute) }
	reserved := func(c int, holder string, free int, props ...scheduling.PreemptionProposal) {
		t.Helper()
		res := &scheduling.Result{Preemptions: props, Waiting: []scheduling.WaitStatus{{JobID: job.ID,
			Reason: vocab.ReasonReservedForHigherPriority, BlockingJobID: holder, Rank: 2,
			Detail: fmt.Sprintf("2 match in pool, %d free; it fits only on GPUs reserved for job %s", free, holder)}}}
		if _, err := s.ApplyCycle(ctx, fmt.Sprintf("ld-%d", c), res, at(c)); err != nil {
			t.Fatal(err)
		}
	}
	reserved(0, "j-holder", 2)
	reserved(1, "j-holder", 1)
	reserved(2, "j-holder", 0)
	d := last("reserved")
	if d == nil || d.Action != vocab.ActionHeldByReservation || d.JobID != "j-holder" || d.CycleID != "ld-2" ||
		!d.At.Equal(at(2)) || !d.Since.Equal(at(0)) || d.Rank != 2 || d.Reason != vocab.ReasonReservedForHigherPriority {
		t.Fatalf("reserved over three cycles: %+v, want held_by_reservation for j-holder at ld-2 since ld-0", d)
	}
	reserved(3, "j-other", 0)
	if d := last("new holder"); d.JobID != "j-other" || !d.Since.Equal(at(3)) {
		t.Fatalf("new holder: %+v, want j-other since ld-3", d)
	}
	reserved(4, "j-other", 0, scheduling.PreemptionProposal{ForJobID: job.ID, Pool: "p", Act: false, Reason: "observe stage",
		Victims: []scheduling.Victim{{JobID: "j-victim", AllocationID: "a-none", GPUs: 2}}})
	if d := last("proposal"); d.Action != vocab.ActionPreemptionProposed || !slices.Equal(d.Victims, []string{"j-victim"}) ||
		d.CycleID != "ld-4" || d.Detail != "observe stage" {
		t.Fatalf("proposal: %+v", d)
	}
	reserved(5, "j-other", 0) // no proposal any more: the explanation's cycle is newer
	if d := last("after the proposal"); d.Action != vocab.ActionHeldByReservation || d.CycleID != "ld-5" || !d.Since.Equal(at(3)) {
		t.Fatalf("after the proposal: %+v, want held_by_reservation since ld-3", d)
	}
	// other holds a GPU; placing job on both conflicts.
	node := pool.Nodes[0]
	if _, err := s.ApplyCycle(ctx, "ld-6", &scheduling.Result{Placements: []scheduling.Placement{
		place(other.ID, "p", node.Name, 1000, node.GPUs[0].UUID)}}, at(6)); err != nil {
		t.Fatal(err)
	}
	out, err := s.ApplyCycle(ctx, "ld-7", &scheduling.Result{Placements: []scheduling.Placement{
		place(job.ID, "p", node.Name, 1000, node.GPUs[0].UUID, node.GPUs[1].UUID)}}, at(7))
	if err != nil || len(out.Conflicts) != 1 {
		t.Fatalf("conflicting placement: %+v, %v", out, err)
	}
	if d := last("refused"); d.Action != vocab.ActionPlacementRefused || d.CycleID != "ld-7" || d.Detail == "" {
		t.Fatalf("refused: %+v", d)
	}
	var alloc string
	if err := s.Pool().QueryRow(ctx, `SELECT id FROM allocations WHERE job_id = $1`, other.ID).Scan(&alloc); err != nil {
		t.Fatal(err)
	}
	if err := s.ReleasePlacement(ctx, other.ID, alloc, vocab.RunCancelled, "test", at(8)); err != nil {
		t.Fatal(err)
	}
	if _, err := s.ApplyCycle(ctx, "ld-9", &scheduling.Result{Placements: []scheduling.Placement{
		place(job.ID, "p", node.Name, 1000, node.GPUs[0].UUID, node.GPUs[1].UUID)}}, at(9)); err != nil {
		t.Fatal(err)
	}
	if d := last("placed"); d.Action != vocab.ActionPlaced || d.CycleID != "ld-9" || !d.At.Equal(at(9)) {
		t.Fatalf("placed: %+v", d)
	}
}

// TestPruneDecisions checks the decisions retention: rows before the cutoff
// go, in batches, except the latest wait decision of a job not yet final,
// which LastDecision still reads as the start of its action.
func TestPruneDecisions(t *testing.T) {
	t.Parallel()
	s, _ := newStore(t)
	ctx := context.Background()
	pool := testPool("p", 1, 2)
	if err := s.UpsertInventory(ctx, []scheduling.Pool{pool}); err != nil {
		t.Fatal(err)
	}
	waiting := submit(t, s, "vision", "p", 2, 0)
	placed := submit(t, s, "vision", "p", 1, 0)
	at := func(c int) time.Time { return t0.Add(time.Duration(c) * time.Minute) }
	cycle := func(c int, res *scheduling.Result) {
		t.Helper()
		if _, err := s.ApplyCycle(ctx, fmt.Sprintf("prune-%d", c), res, at(c)); err != nil {
			t.Fatal(err)
		}
	}
	cycle(0, &scheduling.Result{Waiting: []scheduling.WaitStatus{{JobID: waiting.ID, Reason: vocab.ReasonCapacityBusy, Detail: "0 free"}}})
	cycle(1, &scheduling.Result{Waiting: []scheduling.WaitStatus{{JobID: waiting.ID, Reason: vocab.ReasonQuotaExhausted, Detail: "quota"}},
		Placements: []scheduling.Placement{place(placed.ID, "p", pool.Nodes[0].Name, 1000, pool.Nodes[0].GPUs[0].UUID)}})
	cycle(2, &scheduling.Result{Waiting: []scheduling.WaitStatus{{JobID: waiting.ID, Reason: vocab.ReasonQuotaExhausted, Detail: "quota"}},
		Preemptions: []scheduling.PreemptionProposal{{ForJobID: waiting.ID, Pool: "p", Reason: "observe"}}})
	if n := queryInt(t, s, `SELECT count(*) FROM decisions`); n != 4 {
		t.Fatalf("%d decisions, want 4 (two waits, a placement, a proposal)", n)
	}
	last := func(id string) *store.LastDecision {
		t.Helper()
		j, err := s.GetJob(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		d, err := s.LastDecision(ctx, j)
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	waitingBefore, placedBefore := last(waiting.ID), last(placed.ID)
	deleted, err := s.PruneDecisions(ctx, at(10), 1)
	if err != nil || deleted != 1 {
		t.Fatalf("pruned %d, %v; want 1 (the waiting job's first wait decision)", deleted, err)
	}
	kept := map[string]bool{}
	rows, err := s.Pool().Query(ctx, `SELECT job_id, kind, at FROM decisions`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var job, kind string
		var when time.Time
		if err := rows.Scan(&job, &kind, &when); err != nil {
			t.Fatal(err)
		}
		kept[fmt.Sprintf("%s %s %d", job, kind, int(when.Sub(t0).Minutes()))] = true
	}
	rows.Close()
	for _, want := range []string{waiting.ID + " wait 1", placed.ID + " place 1"} {
		if !kept[want] {
			t.Fatalf("kept %v, want %q among them", kept, want)
		}
	}
	// Pruning changes no job's last scheduling action: the waiting job's is
	// still the standing proposal, and a job placed longer ago than the
	// retention still reads as placed.
	if d := last(waiting.ID); !reflect.DeepEqual(d, waitingBefore) || d.Action != vocab.ActionPreemptionProposed {
		t.Fatalf("waiting job after pruning: %+v, before %+v", d, waitingBefore)
	}
	if d := last(placed.ID); !reflect.DeepEqual(d, placedBefore) || d.Action != vocab.ActionPlaced {
		t.Fatalf("placed job after pruning: %+v, before %+v", d, placedBefore)
	}
	// Once final, its rows go too.
	if err := s.CancelJob(ctx, waiting.ID, "alice", "done"); err != nil {
		t.Fatal(err)
	}
	if n, err := s.PruneDecisions(ctx, at(10), 0); err != nil || n != 2 {
		t.Fatalf("pruned %d after cancel, %v; want 2 (its wait and its proposal)", n, err)
	}
}
