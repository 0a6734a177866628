package main

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/gpugov/gpugov/api"
	"github.com/gpugov/gpugov/internal/governance"
	"github.com/gpugov/gpugov/internal/policy"
	"github.com/gpugov/gpugov/internal/scheduling"
	"github.com/gpugov/gpugov/internal/vocab"
	"github.com/gpugov/gpugov/store"
)

// heldAfterRun stores a vision job on gpu whose run ended with outcome
// without its allocation being released: what the reclaim scan finds.
func heldAfterRun(t *testing.T, st *store.Store, gpu, outcome string) string {
	t.Helper()
	j, _, err := st.CreateJob(context.Background(), &store.NewJob{Project: "vision", Queue: govQueue, Tier: vocab.TierStandard,
		RunSeconds: 600, Request: scheduling.ResourceRequest{GPUs: 1, Pool: govPool}})
	if err != nil {
		t.Fatal(err)
	}
	alloc, run := placeAndRun(t, st, j.ID, []string{gpu}, 0, time.Now().Add(-time.Hour))
	if _, err := st.Pool().Exec(context.Background(), `UPDATE runs SET ended_at = now() - interval '10 minutes', outcome = $2 WHERE id = $1`,
		run, outcome); err != nil {
		t.Fatal(err)
	}
	return alloc
}

// recordReclaims classifies every active allocation from its stored
// evidence and records a reclaim of each finding in the mode the rules
// give, as AssessReclaim does; it returns the reclaims by allocation.
func recordReclaims(t *testing.T, st *store.Store, cfg *policy.Policy) map[string]*store.Reclaim {
	t.Helper()
	ctx := context.Background()
	now := time.Now()
	evs, err := st.ReclaimEvidence(ctx, now.Add(-policy.Seconds(cfg.Reclaim.ObservationWindowSeconds)))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]*store.Reclaim{}
	for i := range evs {
		ev := &evs[i]
		f, ok := governance.Classify(ev, cfg, now)
		if !ok {
			continue
		}
		d := governance.DecideMode(cfg, ev.Stage, ev.Pool, ev.Queue, f.Class, ev.Protected)
		r, _, err := st.OpenReclaim(ctx, store.NewReclaim{Evidence: *ev, Finding: f, Decision: d,
			WorkflowID: "reclaim/" + ev.AllocationID, At: now})
		if err != nil {
			t.Fatal(err)
		}
		out[ev.AllocationID] = r
	}
	return out
}

// TestReclaimsCommand runs `gpugov reclaims` against the real API: with none
// recorded it says so; then a notified failed allocation and a completed one
// released at once are listed with the totals, filtered, printed as JSON;
// the owner keeps the notified one (the API signals its workflow); and bad
// flags, values, a confirm by a submitter and a keep of a released reclaim
// exit 2.
func TestReclaimsCommand(t *testing.T) {
	ctx := context.Background()
	env := newGovCLIEnv(t, alice)
	out, _, err := env.run(t, "reclaims")
	if err != nil || !strings.HasPrefix(out, "no reclaims") || strings.Contains(out, "BASIS") {
		t.Fatalf("reclaims with none: %v\n%s", err, out)
	}

	failedAlloc := heldAfterRun(t, env.store, "GPU-0", "failed")
	doneAlloc := heldAfterRun(t, env.store, "GPU-1", "succeeded")
	cfg := policy.Default()
	cfg.Reclaim.Rules = []policy.ModeRule{{Class: vocab.ClassFailed, Mode: vocab.ModeNotify},
		{Class: vocab.ClassCompleted, Mode: vocab.ModeAuto}}
	rs := recordReclaims(t, env.store, cfg)
	failed, done := rs[failedAlloc], rs[doneAlloc]
	if failed == nil || done == nil {
		t.Fatalf("reclaims %+v, want one of each allocation", rs)
	}
	now := time.Now()
	if _, err := env.store.NoticeReclaim(ctx, failed.ID, now.Add(15*time.Minute), now); err != nil {
		t.Fatal(err)
	}
	if _, err := env.store.ReleaseReclaimed(ctx, done.ID, vocab.ActorReclaim, now); err != nil {
		t.Fatal(err)
	}

	out, _, err = env.run(t, "reclaims")
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"BASIS", failed.ID, "failed", "notify", "notified", done.ID, "completed", "auto", "released",
		"run " + failed.Evidence["run_id"].(string) + " ended failed",
		"2 reclaims: by class completed 1, failed 1; by mode auto 1, notify 1; 1 GPU released; 0 disputed, 0 false reclaims (disputes not rejected)"} {
		if !strings.Contains(out, s) {
			t.Errorf("report lacks %q:\n%s", s, out)
		}
	}
	writeCLIArtifact(t, "cli-reclaims.txt", out)

	out, _, err = env.run(t, "reclaims", "--class", "failed", "--mode", "notify", "--pool", govPool, "--format", "json")
	var rep api.ReclaimReport
	if err != nil || json.Unmarshal([]byte(out), &rep) != nil || len(rep.Reclaims) != 1 || rep.Reclaims[0].ID != failed.ID ||
		rep.Reclaims[0].NoticeDeadline == nil {
		t.Fatalf("filtered JSON report: %v\n%s", err, out)
	}
	out, _, err = env.run(t, "reclaims", "--state", "kept")
	if err != nil || !strings.HasPrefix(out, "no reclaims") {
		t.Fatalf("no match: %v\n%s", err, out)
	}

	out, _, err = env.run(t, "reclaims", "keep", failed.ID, "--reason", "still debugging the failure")
	if err != nil || !strings.Contains(out, "keep sent to reclaim "+failed.ID) {
		t.Fatalf("keep: %v\n%s", err, out)
	}
	if want := "keep " + failedAlloc + " alice: still debugging the failure"; len(env.wf.decisions) != 1 || env.wf.decisions[0] != want {
		t.Fatalf("decisions %v, want %q", env.wf.decisions, want)
	}

	for _, args := range [][]string{
		{"--mode", "bogus"}, // rejected by the server: 422
		{"--limit", "-1"},
		{"--format", "csv"},
		{"extra"},
		{"confirm", failed.ID}, // a submitter may not confirm: 403
		{"keep", done.ID},      // released: no decision awaited, 409
		{"keep"},
	} {
		_, _, err := env.run(t, append([]string{"reclaims"}, args...)...)
		var ue usageError
		if !errors.As(err, &ue) {
			t.Errorf("reclaims %v: %T %v, want a usage error (exit 2)", args, err, err)
		}
	}
	if len(env.wf.decisions) != 1 {
		t.Fatalf("decisions %v after refused commands, want the one keep", env.wf.decisions)
	}
}
