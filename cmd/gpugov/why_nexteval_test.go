package main

import (
	"strings"
	"testing"
	"time"

	"github.com/gpugov/gpugov/api"
)

// A next re-evaluation already past (the stored explanation is up to a minute
// old) says how long ago and why, instead of "(in 0s)".
func TestDescribeNextEvaluationInThePast(t *testing.T) {
	now := time.Date(2026, 12, 3, 11, 14, 25, 0, time.UTC)
	clientNow = func() time.Time { return now }
	t.Cleanup(func() { clientNow = time.Now })
	e := &api.Explanation{NextEvaluation: &api.NextEvaluation{At: now.Add(-40 * time.Second), Kind: "timer"}}
	got := describeNextEvaluation(e)
	if !strings.Contains(got, "(40s ago; the job is re-evaluated at every cycle") {
		t.Fatalf("past next evaluation: %q", got)
	}
	e.NextEvaluation.At = now.Add(5 * time.Second)
	if got := describeNextEvaluation(e); !strings.Contains(got, "(in 5s), the next timer cycle") {
		t.Fatalf("future next evaluation: %q", got)
	}
}
