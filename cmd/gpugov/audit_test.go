package main

import (
	"context"
	"encoding/json"
	"errors"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/gpugov/gpugov/api"
	"github.com/gpugov/gpugov/internal/policy"
	"github.com/gpugov/gpugov/internal/scheduling"
	"github.com/gpugov/gpugov/internal/vocab"
	"github.com/gpugov/gpugov/store"
	"github.com/gpugov/gpugov/store/storetest"
)

// opsToken is held by olga, an operator, in TestAuditAndDisputeCommands.
const opsToken = "tok-ops"

// TestAuditAndDisputeCommands runs, against the real API, the owner's
// `gpugov complete` of a running job and `gpugov reclaims dispute` of a
// released reclaim, an operator's `gpugov reclaims reject-dispute`, and
// `gpugov audit` listing them (table, filters, JSON, pages); a submitter's
// audit, a dispute without --reason and bad flags exit 2.
func TestAuditAndDisputeCommands(t *testing.T) {
	ctx := context.Background()
	node := scheduling.Node{Name: govNode, CPUMilli: 64000, MemoryMiB: 512 * 1024, Schedulable: true}
	for _, u := range []string{"GPU-0", "GPU-1"} {
		node.GPUs = append(node.GPUs, scheduling.GPU{UUID: u, Model: "A100-SXM4-80GB", MemoryMiB: 81920, Healthy: true})
	}
	st, _ := storetest.NewStore(t, storetest.Fixture{
		Pools:  []scheduling.Pool{{Name: govPool, Available: true, Stage: vocab.StageAutomate, Nodes: []scheduling.Node{node}}},
		Queues: []scheduling.Queue{{Name: govQueue, Tier: vocab.TierStandard, ServiceShare: 1}},
	})
	env := serveCLIEnv(t, st, &decidingWorkflows{}, map[string]api.Principal{
		cliToken: alice, opsToken: {Name: "olga", Project: "platform", Role: vocab.RoleOperator}})
	mk := func() *store.Job {
		j, _, err := st.CreateJob(ctx, &store.NewJob{Project: "vision", Queue: govQueue, Tier: vocab.TierStandard,
			RunSeconds: 600, Request: scheduling.ResourceRequest{GPUs: 1, Pool: govPool}})
		if err != nil {
			t.Fatal(err)
		}
		return j
	}
	done := mk()
	placeAndRun(t, st, done.ID, []string{"GPU-0"}, 0, time.Now().Add(-time.Hour))

	out, _, err := env.run(t, "complete", done.ID, "--reason", "weights exported; uploading logs")
	if err != nil || !strings.Contains(out, done.ID+": work declared done by alice") ||
		!strings.Contains(out, "the next reclaim scan classifies allocation") {
		t.Fatalf("complete: %v\n%s", err, out)
	}

	// The scan finds the declared allocation completed; the rule releases it.
	cfg := policy.Default()
	cfg.Reclaim.Rules = []policy.ModeRule{{Class: vocab.ClassCompleted, Mode: vocab.ModeAuto}}
	var r *store.Reclaim
	for _, rc := range recordReclaims(t, st, cfg) {
		r = rc
	}
	if r == nil || r.Class != vocab.ClassCompleted {
		t.Fatalf("reclaim %+v, want the declared allocation completed", r)
	}
	if r, err = st.ReleaseReclaimed(ctx, r.ID, vocab.ActorReclaim, time.Now()); err != nil {
		t.Fatal(err)
	}

	out, _, err = env.run(t, "reclaims", "dispute", r.ID, "--reason", "the upload was still writing the final shard")
	if err != nil || !strings.Contains(out, "reclaim "+r.ID) || !strings.Contains(out, "disputed by alice: a false reclaim unless an operator rejects the dispute") {
		t.Fatalf("dispute: %v\n%s", err, out)
	}
	env.token = opsToken
	out, _, err = env.run(t, "reclaims", "reject-dispute", r.ID, "--reason", "declared complete by its owner; the upload is the owner's to retry")
	if err != nil || !strings.Contains(out, "no longer a false reclaim (dispute rejected by olga)") {
		t.Fatalf("reject-dispute: %v\n%s", err, out)
	}

	out, _, err = env.run(t, "audit", "--subject", done.ID)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("gpugov audit --subject %s:\n%s", done.ID, out)
	writeCLIArtifact(t, "cli-audit.txt", out)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if !strings.HasPrefix(lines[0], "AT") || !strings.HasSuffix(lines[0], "REASON") {
		t.Fatalf("no table header:\n%s", out)
	}
	var actions []string
	for i, l := range lines[1:] {
		if i%2 == 1 {
			if !strings.HasPrefix(l, "    evidence: ") {
				t.Fatalf("line %d is not an evidence line: %q", i+2, l)
			}
			continue
		}
		actions = append(actions, strings.Fields(l)[2])
	}
	// In the order recorded, newest first: the rejection, the dispute, the
	// release, the reclaim's record, the declaration, the placement, the
	// submission.
	want := []string{"reclaim_dispute_reject", "reclaim_dispute", "reclaim_release", "reclaim_open", "complete_job", "place", "submit"}
	if strings.Join(actions, ",") != strings.Join(want, ",") {
		t.Fatalf("actions %v, want %v:\n%s", actions, want, out)
	}
	for _, s := range []string{"olga", "alice", "reclaim ", "weights exported; uploading logs", "after_release=true",
		"class=completed", "reclaim_id=" + r.ID} {
		if !strings.Contains(out, s) {
			t.Errorf("audit lacks %q:\n%s", s, out)
		}
	}

	out, _, err = env.run(t, "audit", "--action", "reclaim_dispute", "--actor", "alice", "--since", "1h", "--format", "json")
	var l api.AuditList
	if err != nil || json.Unmarshal([]byte(out), &l) != nil || len(l.Entries) != 1 || l.Entries[0].Evidence["reclaim_id"] != r.ID {
		t.Fatalf("filtered JSON: %v\n%s", err, out)
	}
	out, _, err = env.run(t, "audit", "--limit", "2")
	m := regexp.MustCompile(`older ones: --cursor (\d+)`).FindStringSubmatch(out)
	if err != nil || m == nil {
		t.Fatalf("first page: %v\n%s", err, out)
	}
	out2, _, err := env.run(t, "audit", "--limit", "2", "--cursor", m[1])
	if err != nil || out2 == out || !strings.HasPrefix(out2, "AT") {
		t.Fatalf("second page: %v\n%s", err, out2)
	}
	out, _, err = env.run(t, "audit", "--until", time.Now().Add(-24*time.Hour).UTC().Format(time.RFC3339))
	if err != nil || !strings.HasPrefix(out, "no audit entries") {
		t.Fatalf("nothing before yesterday: %v\n%s", err, out)
	}

	for _, c := range []struct {
		token string
		args  []string
	}{
		{cliToken, []string{"audit"}}, // a submitter: 403
		{opsToken, []string{"audit", "--since", "yesterday"}},
		{opsToken, []string{"audit", "--until", "-5m"}},
		{opsToken, []string{"audit", "--limit", "0"}},
		{opsToken, []string{"audit", "--format", "csv"}},
		{opsToken, []string{"audit", "--cursor", "abc"}}, // the API's 400
		{opsToken, []string{"audit", "extra"}},
		{cliToken, []string{"reclaims", "dispute", r.ID}}, // no --reason
		{cliToken, []string{"reclaims", "dispute", "rc-nope", "--reason", "x"}},
		{cliToken, []string{"reclaims", "reject-dispute", r.ID, "--reason", "x"}}, // a submitter: 403
		{cliToken, []string{"complete", done.ID}},                                 // released: 409
		{cliToken, []string{"complete"}},
	} {
		env.token = c.token
		_, _, err := env.run(t, c.args...)
		var ue usageError
		if !errors.As(err, &ue) {
			t.Errorf("gpugov %v: %T %v, want a usage error (exit 2)", c.args, err, err)
		}
	}
}

// TestPointInTime checks --since/--until parsing: RFC 3339, a duration
// before now, empty; anything else is a usage error naming the flag.
func TestPointInTime(t *testing.T) {
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	defer func(f func() time.Time) { clientNow = f }(clientNow)
	clientNow = func() time.Time { return now }
	for v, want := range map[string]time.Time{
		"":                     {},
		"2026-11-30T08:00:00Z": time.Date(2026, 11, 30, 8, 0, 0, 0, time.UTC),
		"24h":                  now.Add(-24 * time.Hour),
		" 90m ":                now.Add(-90 * time.Minute),
	} {
		if got, err := pointInTime("--since", v); err != nil || !got.Equal(want) {
			t.Errorf("%q: %v %v, want %v", v, got, err, want)
		}
	}
	for _, v := range []string{"yesterday", "-1h", "2026-11-30"} {
		if _, err := pointInTime("--since", v); err == nil || !isUsage(err) || !strings.Contains(err.Error(), "--since") {
			t.Errorf("%q: %v, want a usage error naming --since", v, err)
		}
	}
}

// TestEvidenceText checks the audit table's evidence column: sorted pairs,
// JSON for non-strings, one line, cut at the width.
func TestEvidenceText(t *testing.T) {
	got := evidenceText(map[string]any{"to": "automate", "from": "trial", "n": 2.0, "list": []any{"a", "b"}, "note": "a\nb"})
	if want := `from=trial list=["a","b"] n=2 note=a b to=automate`; got != want {
		t.Fatalf("evidence %q, want %q", got, want)
	}
	if evidenceText(nil) != "-" {
		t.Fatal("empty evidence")
	}
	long := evidenceText(map[string]any{"k": strings.Repeat("x", 500)})
	if r := []rune(long); len(r) != maxEvidenceWidth || !strings.HasSuffix(long, "…") {
		t.Fatalf("long evidence %d runes", len(r))
	}
}

// TestAuditUnknownActionIsUsageError: an --action that is not an audit
// action is a usage error (exit 2) naming --action and listing the actions
// from vocab.AuditActions, before any request (it printed "no audit entries"
// and exited 0).
func TestAuditUnknownActionIsUsageError(t *testing.T) {
	defer resetFlags(rootCmd)
	env := &cliEnv{url: "http://127.0.0.1:1"}
	_, _, err := env.run(t, "audit", "--action", "bogus")
	if err == nil || !isUsage(err) || !strings.Contains(err.Error(), "--action") ||
		!strings.Contains(err.Error(), strings.Join(vocab.AuditActions, ", ")) {
		t.Fatalf("audit --action bogus: %v, want a usage error naming --action with the actions", err)
	}
}
