package main

import (
	"strings"
	"testing"
	"time"

	"github.com/gpugov/gpugov/api"
)

// A next re-evaluation already past is never printed as the next one: a
// job waiting on environment_not_ready showed "next re-evaluation: 11:14
// (11s ago; …)". Its explanation, rewritten only every 30–60 s while it
// stays the same, was 16 s old, and its instant (the writing cycle's plus
// the 5 s timer period) had passed while later cycles evaluated the job
// without rewriting it: the next cycle is due.
func TestDescribeNextEvaluationInThePast(t *testing.T) {
	now := time.Date(2026, 12, 3, 11, 14, 25, 0, time.UTC)
	clientNow = func() time.Time { return now }
	t.Cleanup(func() { clientNow = time.Now })
	evaluated := now.Add(-16 * time.Second)
	e := &api.Explanation{Reason: "environment_not_ready", EvaluatedAt: &evaluated,
		NextEvaluation: &api.NextEvaluation{At: evaluated.Add(5 * time.Second), Kind: "timer"}}
	got := describeNextEvaluation(e)
	want := "at the next cycle, within 5s (the timer runs one at least that often); this explanation is 16s old, and an unchanged one is rewritten only every 30–60 s"
	if got != want {
		t.Fatalf("past timer instant:\n got %q\nwant %q", got, want)
	}
	if strings.Contains(got, "ago") || strings.Contains(got, formatClock(e.NextEvaluation.At)) {
		t.Fatalf("a past instant printed as the next: %q", got)
	}
	// Just due (less than a second left) is due, not "(in 0s)".
	e.NextEvaluation.At = now.Add(300 * time.Millisecond)
	if got := describeNextEvaluation(e); !strings.HasPrefix(got, "at the next cycle") {
		t.Fatalf("due now: %q", got)
	}
	// A past aging instant: due too, without a timer period.
	e.NextEvaluation = &api.NextEvaluation{At: now.Add(-3 * time.Second), Kind: "aging_overtake"}
	if got := describeNextEvaluation(e); !strings.HasPrefix(got, "at the next cycle; this explanation is 16s old") {
		t.Fatalf("past aging instant: %q", got)
	}
	// A future instant keeps its time.
	e.NextEvaluation = &api.NextEvaluation{At: now.Add(5 * time.Second), Kind: "timer"}
	if got := describeNextEvaluation(e); !strings.Contains(got, "(in 5s), the next timer cycle") {
		t.Fatalf("future next evaluation: %q", got)
	}
}
