package main

import (
	"strings"
	"testing"
	"time"

	"github.com/gpugov/gpugov/api"
	"github.com/gpugov/gpugov/internal/vocab"
)

// formatLength keeps the seconds of a declared length under an hour: a
// 100 s run reads 1m40s, not 1m; whole minutes stay 14m; hours and days
// read as formatDuration's.
func TestFormatLength(t *testing.T) {
	for d, want := range map[time.Duration]string{
		-time.Second:                                 "0s",
		45 * time.Second:                             "45s",
		100 * time.Second:                            "1m40s",
		65 * time.Second:                             "1m05s",
		14 * time.Minute:                             "14m",
		14*time.Minute + 1500*time.Millisecond:       "14m01s",
		2*time.Hour + 5*time.Minute + 30*time.Second: "2h05m",
		76 * time.Hour:                               "3d04h",
	} {
		if got := formatLength(d); got != want {
			t.Errorf("formatLength(%v) = %q, want %q", d, got, want)
		}
	}
}

// get prints a rank only for a pending job: a succeeded or running job's
// last explanation still carries a rank, which orders nothing any more.
func TestPrintJobRankOnlyWhilePending(t *testing.T) {
	at := time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)
	for state, wantRank := range map[vocab.JobState]bool{vocab.JobSucceeded: false, vocab.JobRunning: false, vocab.JobWaiting: true} {
		j := api.Job{ID: "j-1", Project: "p", Queue: "train", Tier: "standard", State: state, RunSeconds: 100, SubmittedAt: at,
			Explanation: &api.Explanation{Rank: 3, Pool: "a100-east"}}
		var b strings.Builder
		if err := printJob(&b, &j); err != nil {
			t.Fatal(err)
		}
		out := b.String()
		if got := strings.Contains(out, "RANK"); got != wantRank {
			t.Errorf("%s: RANK printed %v, want %v:\n%s", state, got, wantRank, out)
		}
		if !strings.Contains(out, "simulated, 1m40s\n") {
			t.Errorf("%s: RUN of a 100 s run is not 1m40s:\n%s", state, out)
		}
	}
}
