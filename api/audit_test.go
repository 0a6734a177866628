package api

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpugov/gpugov/internal/governance"
	"github.com/gpugov/gpugov/internal/policy"
	"github.com/gpugov/gpugov/internal/scheduling"
	"github.com/gpugov/gpugov/internal/vocab"
	"github.com/gpugov/gpugov/store"
)

// countingDisputes counts the disputes and rejections the API reports.
type countingDisputes struct {
	mu                  sync.Mutex
	disputes, rejected  int
	lastPool, lastClass string
}

func (c *countingDisputes) RecordDispute(_ context.Context, pool, class string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.disputes++
	c.lastPool, c.lastClass = pool, class
}

func (c *countingDisputes) RecordDisputeRejected(context.Context, string, string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.rejected++
}

func (c *countingDisputes) counts() (int, int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.disputes, c.rejected
}

// runningVisionJob stores a vision job of queue train running on gpu and
// returns it with its allocation and run.
func runningVisionJob(t *testing.T, e *testEnv, gpu string) (*store.Job, string, string) {
	t.Helper()
	ctx := context.Background()
	j, _, err := e.store.CreateJob(ctx, &store.NewJob{Project: "vision", Queue: "train", Tier: vocab.TierStandard,
		Request: scheduling.ResourceRequest{GPUs: 1, Pool: "a100-east"}, RunSeconds: 100})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	out, err := e.store.ApplyCycle(ctx, "c-"+j.ID, &scheduling.Result{PolicyVersion: "t", At: now, Placements: []scheduling.Placement{
		{JobID: j.ID, Pool: "a100-east", Node: "node-1", Rank: 1, GPUs: []scheduling.GPUShare{{UUID: gpu, Milli: 1000}}}}}, now)
	if err != nil || len(out.Placed) != 1 {
		t.Fatalf("placement: %+v %v", out, err)
	}
	run, err := e.store.MarkRunning(ctx, j.ID, out.Placed[0].AllocationID, 0, now)
	if err != nil {
		t.Fatal(err)
	}
	return j, out.Placed[0].AllocationID, run
}

// TestCompleteJobRoute: the owner (or an operator) declares a running job's
// work done; a second call changes nothing; another project, a pending
// job, an unknown job and a malformed body are refused and change nothing.
func TestCompleteJobRoute(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t)
	j, alloc, run := runningVisionJob(t, e, "GPU-aaaa")
	pending := e.mustSubmit(tokAlice, validSpec())
	before := e.counts()
	for _, c := range []struct {
		path, token string
		body        any
		want        int
	}{
		{"/v1/jobs/" + j.ID + "/complete", tokBob, map[string]any{"reason": "x"}, http.StatusForbidden},
		{"/v1/jobs/" + pending.ID + "/complete", tokAlice, nil, http.StatusConflict},
		{"/v1/jobs/j-nope/complete", tokOps, nil, http.StatusNotFound},
		{"/v1/jobs/" + j.ID + "/complete", tokAlice, map[string]any{"reason": 5}, http.StatusBadRequest},
		{"/v1/jobs/" + j.ID + "/complete", tokAlice, map[string]any{"why": "x"}, http.StatusBadRequest},
	} {
		if res := e.do(http.MethodPost, c.path, c.token, c.body); res.status != c.want {
			t.Errorf("POST %s as %s: %d %s, want %d", c.path, c.token, res.status, res.body, c.want)
		}
	}
	if after := e.counts(); after["audit_log"] != before["audit_log"] {
		t.Fatalf("refused completions wrote audit entries: %v → %v", before, after)
	}
	var done JobCompletion
	res := e.do(http.MethodPost, "/v1/jobs/"+j.ID+"/complete", tokAlice, map[string]any{"reason": "weights exported"})
	res.decode(t, &done)
	if res.status != http.StatusOK || done.AllocationID != alloc || done.RunID != run || done.DeclaredBy != "alice" ||
		done.Reason != "weights exported" || !strings.Contains(done.Note, "next reclaim scan classifies allocation "+alloc+" completed") {
		t.Fatalf("complete: %d %+v", res.status, done)
	}
	var again JobCompletion
	e.do(http.MethodPost, "/v1/jobs/"+j.ID+"/complete", tokOps, nil).decode(t, &again)
	if again.DeclaredBy != "alice" || !strings.Contains(again.Note, "already declared by alice") {
		t.Fatalf("second declaration %+v, want the first kept", again)
	}
}

// disputeEnv is the API with a one-hour dispute window and a dispute
// counter, holding a released reclaim of a vision job (released now), one
// released two hours ago and one awaiting the owner's decision.
func disputeEnv(t *testing.T) (*testEnv, *countingDisputes, map[string]*store.Reclaim) {
	t.Helper()
	rec := &countingDisputes{}
	cfg := policy.Default()
	cfg.Reclaim.DisputeWindowSeconds = 3600
	e := newTestEnv(t, WithDisputeRecorder(rec), WithGovernancePolicy(func() *policy.Policy { return cfg }))
	ctx := context.Background()
	out := map[string]*store.Reclaim{}
	for i, name := range []string{"recent", "old"} {
		j, alloc, run := runningVisionJob(t, e, []string{"GPU-aaaa", "GPU-bbbb"}[i])
		r, _, err := e.store.OpenReclaim(ctx, store.NewReclaim{
			Evidence: governance.Evidence{AllocationID: alloc, JobID: j.ID, Project: "vision", Queue: "train", Pool: "a100-east",
				GPUs: 1, RunID: run, JobState: vocab.JobRunning, GrantedAt: time.Now()},
			Finding:  governance.Finding{Class: vocab.ClassIdle, Basis: "idle"},
			Decision: governance.ModeDecision{Mode: vocab.ModeAuto, Configured: vocab.ModeAuto, Stage: vocab.StageAutomate}, At: time.Now()})
		if err != nil {
			t.Fatal(err)
		}
		if r, err = e.store.ReleaseReclaimed(ctx, r.ID, vocab.ActorReclaim, time.Now()); err != nil {
			t.Fatal(err)
		}
		out[name] = r
	}
	if _, err := e.store.Pool().Exec(ctx, `UPDATE reclaims SET released_at = now() - interval '2 hours' WHERE id = $1`, out["old"].ID); err != nil {
		t.Fatal(err)
	}
	j, alloc, _ := runningVisionJob(t, e, "GPU-aaaa")
	r, _, err := e.store.OpenReclaim(ctx, store.NewReclaim{
		Evidence: governance.Evidence{AllocationID: alloc, JobID: j.ID, Project: "vision", Queue: "train", Pool: "a100-east", GPUs: 1},
		Finding:  governance.Finding{Class: vocab.ClassIdle, Basis: "idle"},
		Decision: governance.ModeDecision{Mode: vocab.ModeNotify, Configured: vocab.ModeNotify, Stage: vocab.StageAutomate}, At: time.Now()})
	if err != nil {
		t.Fatal(err)
	}
	out["open"] = r
	return e, rec, out
}

// TestDisputeRoutes: the owner disputes a released reclaim within the
// window (counted once as a false reclaim, in the report too); another
// project, no reason, before the release and after the window are refused
// and change nothing; an operator's rejection (not a submitter's) ends the
// false reclaim.
func TestDisputeRoutes(t *testing.T) {
	t.Parallel()
	e, rec, rs := disputeEnv(t)
	path := func(id, verb string) string { return "/v1/reclaims/" + id + "/" + verb }
	reason := map[string]any{"reason": "it was loading a 2 TB dataset"}
	before := e.counts()
	for _, c := range []struct {
		name, path, token string
		body              any
		want              int
		field             string
	}{
		{"another project", path(rs["recent"].ID, "dispute"), tokBob, reason, http.StatusForbidden, ""},
		{"no reason", path(rs["recent"].ID, "dispute"), tokAlice, nil, http.StatusUnprocessableEntity, "reason"},
		{"blank reason", path(rs["recent"].ID, "dispute"), tokAlice, map[string]any{"reason": "  "}, http.StatusUnprocessableEntity, "reason"},
		{"after the window", path(rs["old"].ID, "dispute"), tokAlice, reason, http.StatusConflict, ""},
		{"before the release", path(rs["open"].ID, "dispute"), tokAlice, reason, http.StatusConflict, ""},
		{"unknown", path("rc-nope", "dispute"), tokAlice, reason, http.StatusNotFound, ""},
		{"reject by a submitter", path(rs["recent"].ID, "reject-dispute"), tokAlice, reason, http.StatusForbidden, ""},
		{"reject without a dispute", path(rs["recent"].ID, "reject-dispute"), tokOps, reason, http.StatusConflict, ""},
	} {
		res := e.do(http.MethodPost, c.path, c.token, c.body)
		if res.status != c.want || (c.field != "" && res.apiError(t).Field != c.field) {
			t.Errorf("%s: %d %s, want %d naming %q", c.name, res.status, res.body, c.want, c.field)
		}
	}
	if after := e.counts(); after["audit_log"] != before["audit_log"] {
		t.Fatalf("refused disputes wrote audit entries: %v → %v", before, after)
	}
	if d, _ := rec.counts(); d != 0 {
		t.Fatalf("%d disputes recorded by refused requests", d)
	}

	var r Reclaim
	for range 2 {
		res := e.do(http.MethodPost, path(rs["recent"].ID, "dispute"), tokAlice, reason)
		res.decode(t, &r)
		if res.status != http.StatusOK || !r.Disputed || !r.DisputeAfterRelease || !r.FalseReclaim || r.DisputeBy != "alice" || r.DisputedAt == nil {
			t.Fatalf("dispute: %d %s", res.status, res.body)
		}
	}
	if d, _ := rec.counts(); d != 1 || rec.lastPool != "a100-east" || rec.lastClass != "idle" {
		t.Fatalf("disputes recorded %d (%s/%s), want 1 in a100-east/idle", d, rec.lastPool, rec.lastClass)
	}
	var rep ReclaimReport
	e.do(http.MethodGet, "/v1/reclaims", tokOps, nil).decode(t, &rep)
	if rep.Summary.Disputed != 1 || rep.Summary.FalseReclaims != 1 {
		t.Fatalf("report summary %+v, want 1 disputed, 1 false reclaim", rep.Summary)
	}

	if res := e.do(http.MethodPost, path(rs["recent"].ID, "reject-dispute"), tokOps, nil); res.status != http.StatusUnprocessableEntity ||
		res.apiError(t).Field != "reason" {
		t.Fatalf("reject without a reason: %d %s", res.status, res.body)
	}
	res := e.do(http.MethodPost, path(rs["recent"].ID, "reject-dispute"), tokOps, map[string]any{"reason": "0% for 6 h, no progress"})
	res.decode(t, &r)
	if res.status != http.StatusOK || r.FalseReclaim || r.DisputeRejectedBy != "olga" || r.DisputeRejection != "0% for 6 h, no progress" {
		t.Fatalf("reject: %d %s", res.status, res.body)
	}
	if _, rj := rec.counts(); rj != 1 {
		t.Fatalf("%d rejections recorded, want 1", rj)
	}
	e.do(http.MethodGet, "/v1/reclaims", tokOps, nil).decode(t, &rep)
	if rep.Summary.Disputed != 1 || rep.Summary.FalseReclaims != 0 {
		t.Fatalf("report summary after the rejection %+v", rep.Summary)
	}
}

// TestAuditRoute: operators and admins read the audit log, newest first,
// filtered by subject, action, actor and time, one page at a time; a
// submitter is refused; bad parameters are 400/422 naming the field.
func TestAuditRoute(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t)
	ctx := context.Background()
	t0 := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	for i, a := range []struct{ actor, action, subject string }{
		{"olga", "hold", "j-1"}, {"alice", "release_hold", "j-1"}, {"serve", "activate_policy", "abc123"},
		{"olga", "set_pool_stage", "a100-east"}, {"alice", "reclaim_dispute", "j-2"},
	} {
		if err := e.store.AppendAudit(ctx, store.AuditEntry{At: t0.Add(time.Duration(i) * time.Minute), Actor: a.actor, Action: a.action,
			Subject: a.subject, Reason: "because " + a.action, Evidence: map[string]any{"n": i}}); err != nil {
			t.Fatal(err)
		}
	}
	list := func(q string, token string) (AuditList, response) {
		t.Helper()
		var l AuditList
		res := e.do(http.MethodGet, "/v1/audit"+q, token, nil)
		if res.status == http.StatusOK {
			res.decode(t, &l)
		}
		return l, res
	}
	all, res := list("", tokAdmin)
	if res.status != http.StatusOK || len(all.Entries) != 5 || all.Entries[0].Action != "reclaim_dispute" || all.NextCursor != "" ||
		all.Entries[0].Evidence["n"] != 4.0 || all.Entries[0].Reason != "because reclaim_dispute" {
		t.Fatalf("all: %d %+v", res.status, all)
	}
	since, until := url.QueryEscape(t0.Add(time.Minute).Format(time.RFC3339)), url.QueryEscape(t0.Add(3*time.Minute).Format(time.RFC3339))
	for q, want := range map[string]int{
		"?subject=j-1": 2, "?action=set_pool_stage": 1, "?actor=olga": 2, "?actor=olga&subject=j-1": 1,
		"?since=" + since: 4, "?until=" + until: 3, "?since=" + since + "&until=" + until: 2, "?action=drill": 0,
	} {
		if l, res := list(q, tokOps); res.status != http.StatusOK || len(l.Entries) != want {
			t.Errorf("%s: %d, %d entries, want %d", q, res.status, len(l.Entries), want)
		}
	}
	var seen []string
	q := "?limit=2"
	for pages := 0; pages < 5; pages++ {
		l, res := list(q, tokOps)
		if res.status != http.StatusOK {
			t.Fatalf("page %d: %d %s", pages, res.status, res.body)
		}
		for _, en := range l.Entries {
			seen = append(seen, en.Action)
		}
		if l.NextCursor == "" {
			break
		}
		q = "?limit=2&cursor=" + l.NextCursor
	}
	if strings.Join(seen, ",") != "reclaim_dispute,set_pool_stage,activate_policy,release_hold,hold" {
		t.Fatalf("pages gave %v", seen)
	}
	before := e.counts()
	for q, field := range map[string]string{
		"?since=yesterday":                     "since",
		"?until=2026-13-01T00:00:00Z":          "until",
		"?since=" + until + "&until=" + since:  "until",
		"?limit=0":                             "limit",
		"?limit=1001":                          "limit",
		"?cursor=abc":                          "cursor",
		"?cursor=-3":                           "cursor",
		"?subject=" + strings.Repeat("x", 257): "subject",
		"?action=bogus":                        "action",
	} {
		_, res := list(q, tokOps)
		want := http.StatusUnprocessableEntity
		if field == "cursor" || strings.Contains(q, "yesterday") || strings.Contains(q, "2026-13") {
			want = http.StatusBadRequest // a time that does not parse is malformed, as on /v1/reports/queues
		}
		if res.status != want || res.apiError(t).Field != field {
			t.Errorf("%s: %d %s, want %d naming %s", q, res.status, res.body, want, field)
		}
	}
	if _, res := list("?action=bogus", tokOps); !strings.Contains(res.apiError(t).Message, "reclaim_dispute, reclaim_dispute_reject") {
		t.Errorf("an unknown action does not list the actions: %s", res.body)
	}
	if after := e.counts(); after["audit_log"] != before["audit_log"] {
		t.Fatal("reading the audit log changed it")
	}
	// A submitter's read is refused, and the refusal is the newest entry.
	if _, res := list("", tokAlice); res.status != http.StatusForbidden {
		t.Fatalf("submitter: %d, want 403", res.status)
	}
	if l, res := list("?action="+store.AuditAccessDenied, tokOps); res.status != http.StatusOK || len(l.Entries) != 1 ||
		l.Entries[0].Actor != "alice" || l.Entries[0].Subject != "/v1/audit" || l.Entries[0].Evidence["status"] != 403.0 {
		t.Fatalf("the refusal's entry: %d %+v", res.status, l)
	}
}
