package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/gpugov/gpugov/internal/queuereport"
	"github.com/gpugov/gpugov/internal/scheduling"
	"github.com/gpugov/gpugov/internal/vocab"
	"github.com/gpugov/gpugov/store"
)

// TestReportCommand runs `gpugov report` against the real API on a database
// with one job that has waited two hours for capacity: the text and JSON
// reports, the reason shares (--reasons, text and JSON), a comparison, and
// the usage errors (exit code 2).
func TestReportCommand(t *testing.T) {
	env := newCLIEnv(t)
	ctx := context.Background()
	submitted := time.Now().UTC().Add(-2 * time.Hour).Truncate(time.Second)
	job, _, err := env.store.CreateJob(ctx, &store.NewJob{Project: "vision", Queue: "train", Tier: vocab.TierStandard,
		SubmitTime: submitted, Request: scheduling.ResourceRequest{GPUs: 1, Pool: "a100-east"}})
	if err != nil {
		t.Fatal(err)
	}
	// A request no node fits: stuck, needing its owner's action, not starving.
	spec, _, err := env.store.CreateJob(ctx, &store.NewJob{Project: "vision", Queue: "train", Tier: vocab.TierStandard,
		SubmitTime: submitted, Request: scheduling.ResourceRequest{GPUs: 64, Pool: "a100-east"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := env.store.ApplyCycle(ctx, "c1", &scheduling.Result{At: submitted, Waiting: []scheduling.WaitStatus{
		{JobID: job.ID, Reason: vocab.ReasonCapacityBusy, Rank: 1},
		{JobID: spec.ID, Reason: vocab.ReasonNoMatchingCapacity, Rank: 2}}}, submitted); err != nil {
		t.Fatal(err)
	}

	out, _, err := env.run(t, "report", "--group-by", "queue")
	if err != nil {
		t.Fatalf("report: %v", err)
	}
	for _, s := range []string{"Queue service report", "group by   queue", "train", "CAPACITY_BUSY", "Starving jobs (0 listed of 0)",
		"Stuck: needs action (1 listed of 1)", spec.ID, "vision", "no_matching_capacity", vocab.ReasonNoMatchingCapacity.NextAction()} {
		if !strings.Contains(out, s) {
			t.Errorf("report lacks %q:\n%s", s, out)
		}
	}

	out, _, err = env.run(t, "report", "--group-by", "", "--format", "json")
	if err != nil {
		t.Fatalf("report json: %v", err)
	}
	var r queuereport.Report
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("decode %s: %v", out, err)
	}
	if r.Total.Jobs != 2 || r.Total.StillWaiting != 2 || len(r.Groups) != 0 || r.Total.LongestWaitS == nil || *r.Total.LongestWaitS < 7100 {
		t.Errorf("json report total %+v, %d groups", r.Total, len(r.Groups))
	}
	if r.Total.StuckJobs != 1 || len(r.Stuck) != 1 || r.Stuck[0].JobID != spec.ID || r.Stuck[0].Project != "vision" ||
		r.Stuck[0].Action != vocab.ReasonNoMatchingCapacity.NextAction() {
		t.Errorf("json report stuck %d: %+v, want %s with its owner and action", r.Total.StuckJobs, r.Stuck, spec.ID)
	}

	hour := func(h int) string {
		return time.Now().UTC().Truncate(time.Hour).Add(time.Duration(h) * time.Hour).Format(time.RFC3339)
	}
	out, _, err = env.run(t, "report", "--compare", hour(-6)+","+hour(-3)+":"+hour(-3)+","+hour(0))
	if err != nil || !strings.Contains(out, "Queue service comparison") || !strings.Contains(out, "still_waiting") {
		t.Fatalf("compare: %v\n%s", err, out)
	}
	out, _, err = env.run(t, "report", "--before", hour(-6)+","+hour(-3), "--after", hour(-3)+","+hour(0), "--format", "json")
	var c queuereport.Comparison
	if err != nil || json.Unmarshal([]byte(out), &c) != nil || c.Before.To.Format(time.RFC3339) != hour(-3) {
		t.Fatalf("compare json: %v\n%s", err, out)
	}

	out, _, err = env.run(t, "report", "--reasons", "--group-by", "queue")
	if err != nil {
		t.Fatalf("report --reasons: %v", err)
	}
	// Two hours of capacity_busy (1 GPU) and of no_matching_capacity (64 GPUs).
	for _, s := range []string{"Wait-reason shares per pool", "service latency", "outside the shares",
		"\npool a100-east: main problem is fragmentation and spec — 98.5% of waiting GPU-seconds (no_matching_capacity 98.5%)\n",
		"\n  capacity  ", "\n    capacity_busy  ", "\n    no_matching_capacity  ", "50.0%", "\n  quota  "} {
		if !strings.Contains(out, s) {
			t.Errorf("report --reasons lacks %q:\n%s", s, out)
		}
	}
	out, _, err = env.run(t, "report", "--reasons", "--format", "json")
	var wr struct {
		ReasonShares []queuereport.PoolReasons `json:"reason_shares"`
	}
	if err != nil || json.Unmarshal([]byte(out), &wr) != nil || len(wr.ReasonShares) != 1 ||
		fmt.Sprint(wr.ReasonShares[0].MainProblem) != "[fragmentation_and_spec]" || *wr.ReasonShares[0].MainShare < 0.98 {
		t.Fatalf("report --reasons json: %v %+v\n%s", err, wr, out)
	}

	for _, args := range [][]string{
		{"--reasons", "--compare", hour(-6) + "," + hour(-3) + ":" + hour(-3) + "," + hour(0)}, // one window only
		{"--reasons", "--format", "yaml"},
		{"--group-by", "queue,colour"},                      // rejected by the server: 400
		{"--from", hour(-1), "--to", hour(-2)},              // rejected by the server: 400
		{"--from", "yesterday"},                             // rejected here
		{"--compare", hour(-6) + "," + hour(-3)},            // one window only
		{"--before", hour(-6) + "," + hour(-3)},             // no --after
		{"--compare", "x", "--before", "y", "--after", "z"}, // both forms
		{"--format", "yaml"},
	} {
		_, _, err := env.run(t, append([]string{"report"}, args...)...)
		var ue usageError
		if !errors.As(err, &ue) {
			t.Errorf("report %v: %T %v, want a usage error (exit 2)", args, err, err)
		}
	}
}

// TestSplitCompare checks that the colon between two windows is found among
// the colons of RFC 3339 times.
func TestSplitCompare(t *testing.T) {
	b, a, ok := splitCompare("2026-11-22T00:00:00+01:00,2026-11-29T00:00:00Z:2026-11-29T00:00:00Z,2026-12-06T00:00:00-05:00")
	if !ok || b != "2026-11-22T00:00:00+01:00,2026-11-29T00:00:00Z" || a != "2026-11-29T00:00:00Z,2026-12-06T00:00:00-05:00" {
		t.Fatalf("%q %q %v", b, a, ok)
	}
	b, a, ok = splitCompare("2026-11-22T00:00:00+01:00,2026-11-29T00:00:00+01:00:2026-11-29T00:00:00+01:00,2026-12-06T00:00:00Z")
	if !ok || b != "2026-11-22T00:00:00+01:00,2026-11-29T00:00:00+01:00" || a != "2026-11-29T00:00:00+01:00,2026-12-06T00:00:00Z" {
		t.Fatalf("offsets: %q %q %v", b, a, ok)
	}
	if _, _, ok := splitCompare("2026-11-22T00:00:00Z,2026-11-29T00:00:00Z"); ok {
		t.Fatal("one window accepted")
	}
}
