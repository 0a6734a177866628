package api

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/gpugov/gpugov/internal/scheduling"
	"github.com/gpugov/gpugov/internal/temporalx"
	"github.com/gpugov/gpugov/internal/vocab"
)

func TestSubmitStoresJobAndStartsWorkflow(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t)
	r := env.submit(tokAlice, validSpec(), "")
	if r.status != http.StatusCreated {
		t.Fatalf("status %d: %s", r.status, r.body)
	}
	var j Job
	r.decode(t, &j)
	if j.ID == "" || j.Project != "vision" || j.Queue != "train" || j.Tier != "standard" || j.State != "submitted" {
		t.Fatalf("job %+v", j)
	}
	if j.Resources.GPUs != 2 || j.Resources.GPUMemoryMiB != 40960 || j.Resources.Topology != "same-node" ||
		!j.Recovery.Checkpointable || j.Recovery.CheckpointIntervalSeconds != 600 || j.RunSeconds != 3600 {
		t.Fatalf("spec not kept: %+v", j)
	}
	if got := env.wf.startedJobs(); len(got) != 1 || got[0] != j.ID {
		t.Fatalf("workflows started %v, want [%s]", got, j.ID)
	}
	if a := env.wf.attrs[0]; a != (temporalx.JobAttributes{Queue: "train", Tier: "standard", Pool: "a100-east", State: "submitted"}) {
		t.Fatalf("search attributes %+v", a)
	}
	if env.wf.notified != 1 {
		t.Fatalf("scheduler notified %d times", env.wf.notified)
	}
	stored, err := env.store.GetJob(context.Background(), j.ID)
	if err != nil || stored.Project != "vision" {
		t.Fatalf("stored job %+v, %v", stored, err)
	}
	audit, err := env.store.AuditFor(context.Background(), j.ID, 0)
	if err != nil || len(audit) != 1 || audit[0].Action != "submit" {
		t.Fatalf("audit %+v, %v", audit, err)
	}
}

func TestSubmitIdempotencyKeyGivesOneJob(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t)
	first := env.submit(tokAlice, validSpec(), "key-1")
	second := env.submit(tokAlice, validSpec(), "key-1")
	if first.status != http.StatusCreated || second.status != http.StatusOK {
		t.Fatalf("statuses %d, %d: %s %s", first.status, second.status, first.body, second.body)
	}
	var a, b Job
	first.decode(t, &a)
	second.decode(t, &b)
	if a.ID != b.ID {
		t.Fatalf("two jobs for one key: %s, %s", a.ID, b.ID)
	}
	if n := env.counts()["jobs"]; n != 1 {
		t.Fatalf("%d job rows, want 1", n)
	}
	// The retry asks Temporal again; StartJob is idempotent by workflow ID.
	if got := env.wf.startedJobs(); len(got) != 2 || got[0] != a.ID || got[1] != a.ID {
		t.Fatalf("StartJob calls %v", got)
	}

	// The same key with a different spec is a client bug: 409, nothing stored.
	before := env.counts()
	r := env.submit(tokAlice, with(func(s map[string]any) { res(s)["gpus"] = 1 }), "key-1")
	if r.status != http.StatusConflict || r.apiError(t).Field != IdempotencyKeyHeader {
		t.Fatalf("status %d: %s", r.status, r.body)
	}
	if after := env.counts(); fmt.Sprint(after) != fmt.Sprint(before) {
		t.Fatalf("rows changed by a rejected retry: %v → %v", before, after)
	}

	// Keys are per project: bob's "key-1" is another job.
	r = env.submit(tokBob, validSpec(), "key-1")
	if r.status != http.StatusCreated {
		t.Fatalf("bob: %d %s", r.status, r.body)
	}
	if n := env.counts()["jobs"]; n != 2 {
		t.Fatalf("%d job rows, want 2", n)
	}
}

// TestSubmitAcceptsWhenWorkflowStartFails checks the 202 path: the job is
// committed, stays submitted for the reconciler, and a retry with the same key
// starts the workflow and answers 200.
func TestSubmitAcceptsWhenWorkflowStartFails(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t)
	env.wf.startErr = errTemporalDown
	r := env.submit(tokAlice, validSpec(), "retry-me")
	if r.status != http.StatusAccepted {
		t.Fatalf("status %d: %s", r.status, r.body)
	}
	var j Job
	r.decode(t, &j)
	if j.State != "submitted" || !strings.Contains(j.Note, "reconciler") {
		t.Fatalf("job %+v", j)
	}
	if _, err := env.store.GetJob(context.Background(), j.ID); err != nil {
		t.Fatalf("202 job not committed: %v", err)
	}
	if env.wf.notified != 0 {
		t.Fatal("scheduler notified although the workflow did not start")
	}

	env.wf.startErr = nil
	r = env.submit(tokAlice, validSpec(), "retry-me")
	if r.status != http.StatusOK {
		t.Fatalf("retry status %d: %s", r.status, r.body)
	}
	if got := env.wf.startedJobs(); len(got) != 1 || got[0] != j.ID {
		t.Fatalf("started %v", got)
	}
}

func TestAuthentication(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t)
	for _, tc := range []struct {
		name, header string
	}{
		{"no header", ""},
		{"unknown token", "Bearer nope"},
		{"wrong scheme", "Basic " + tokAlice},
		{"empty bearer", "Bearer "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := env.counts()
			for _, route := range []struct{ method, path string }{
				{http.MethodPost, "/v1/jobs"}, {http.MethodGet, "/v1/jobs"}, {http.MethodGet, "/v1/queues"},
				{http.MethodGet, "/v1/inventory"}, {http.MethodPost, "/v1/jobs/x/cancel"},
			} {
				var r response
				if tc.header == "" {
					r = env.do(route.method, route.path, "", validSpec())
				} else {
					r = env.do(route.method, route.path, "", validSpec(), "Authorization", tc.header)
				}
				if r.status != http.StatusUnauthorized || r.apiError(t).Code != CodeUnauthorized {
					t.Fatalf("%s %s: %d %s", route.method, route.path, r.status, r.body)
				}
				if !strings.HasPrefix(r.header.Get("WWW-Authenticate"), "Bearer") {
					t.Fatalf("no WWW-Authenticate challenge: %v", r.header)
				}
			}
			if after := env.counts(); fmt.Sprint(after) != fmt.Sprint(before) {
				t.Fatalf("rows changed: %v → %v", before, after)
			}
		})
	}
	// Probes and the OpenAPI document need no token.
	for _, path := range []string{"/healthz", "/readyz", "/v1/openapi.json"} {
		if r := env.do(http.MethodGet, path, "", nil); r.status != http.StatusOK {
			t.Errorf("%s: %d %s", path, r.status, r.body)
		}
	}
}

// TestProjectIsolation checks the 403 rules: a submitter sees and changes only
// its own project's jobs; operators and admins see and change all.
func TestProjectIsolation(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t)
	alices := env.mustSubmit(tokAlice, validSpec())
	bobs := env.mustSubmit(tokBob, validSpec())

	before := env.counts()
	for _, path := range []string{"/v1/jobs/" + alices.ID, "/v1/jobs/" + alices.ID + "/events"} {
		if r := env.do(http.MethodGet, path, tokBob, nil); r.status != http.StatusForbidden || r.apiError(t).Code != CodeForbidden {
			t.Fatalf("bob GET %s: %d %s", path, r.status, r.body)
		}
	}
	for _, action := range []string{"cancel", "hold", "release"} {
		r := env.do(http.MethodPost, "/v1/jobs/"+alices.ID+"/"+action, tokBob, map[string]string{"reason": "mine now"})
		if r.status != http.StatusForbidden {
			t.Fatalf("bob %s alice's job: %d %s", action, r.status, r.body)
		}
	}
	if after := env.counts(); fmt.Sprint(after) != fmt.Sprint(before) {
		t.Fatalf("rows changed by forbidden requests: %v → %v", before, after)
	}
	if j, _ := env.store.GetJob(context.Background(), alices.ID); j.Held || j.State != vocab.JobSubmitted {
		t.Fatalf("alice's job changed: %+v", j)
	}
	if len(env.wf.cancelled) != 0 {
		t.Fatal("workflow signalled by a forbidden cancel")
	}

	// Listing: a submitter sees only its project, and may not ask for another.
	var list JobList
	env.do(http.MethodGet, "/v1/jobs", tokBob, nil).decode(t, &list)
	if len(list.Jobs) != 1 || list.Jobs[0].ID != bobs.ID {
		t.Fatalf("bob's listing %+v", list.Jobs)
	}
	if r := env.do(http.MethodGet, "/v1/jobs?project=vision", tokBob, nil); r.status != http.StatusForbidden {
		t.Fatalf("bob lists vision: %d %s", r.status, r.body)
	}
	for _, tok := range []string{tokOps, tokAdmin} {
		list = JobList{}
		env.do(http.MethodGet, "/v1/jobs", tok, nil).decode(t, &list)
		if len(list.Jobs) != 2 {
			t.Fatalf("%s sees %d jobs, want 2", tok, len(list.Jobs))
		}
		list = JobList{}
		env.do(http.MethodGet, "/v1/jobs?project=vision", tok, nil).decode(t, &list)
		if len(list.Jobs) != 1 || list.Jobs[0].ID != alices.ID {
			t.Fatalf("%s ?project=vision: %+v", tok, list.Jobs)
		}
		if r := env.do(http.MethodGet, "/v1/jobs/"+alices.ID, tok, nil); r.status != http.StatusOK {
			t.Fatalf("%s GET: %d", tok, r.status)
		}
	}
	if r := env.do(http.MethodGet, "/v1/jobs/j-nope", tokOps, nil); r.status != http.StatusNotFound || r.apiError(t).Code != CodeNotFound {
		t.Fatalf("unknown job: %d %s", r.status, r.body)
	}
}

// TestHoldReleaseCancelAreAudited checks the owner and an operator can hold,
// release and cancel, that each change is audited with the token's name and
// reason, and that the workflow is signalled on cancel.
func TestHoldReleaseCancelAreAudited(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t)
	j := env.mustSubmit(tokAlice, validSpec())
	ctx := context.Background()

	var got Job
	r := env.do(http.MethodPost, "/v1/jobs/"+j.ID+"/hold", tokAlice, map[string]string{"reason": "dataset refresh"})
	if r.status != http.StatusOK {
		t.Fatalf("hold: %d %s", r.status, r.body)
	}
	r.decode(t, &got)
	if !got.Held || got.Note != "" {
		t.Fatalf("not held: %+v", got)
	}
	// Holding it again is idempotent (Slurm's scontrol hold): 200 with a
	// note that nothing changed, and audited as such.
	r = env.do(http.MethodPost, "/v1/jobs/"+j.ID+"/hold", tokOps, nil)
	got = Job{}
	r.decode(t, &got)
	if r.status != http.StatusOK || !got.Held || got.Note != noteHoldUnchanged {
		t.Fatalf("repeated hold: %d %+v", r.status, got)
	}
	// An operator releases it without a body.
	r = env.do(http.MethodPost, "/v1/jobs/"+j.ID+"/release", tokOps, nil)
	if r.status != http.StatusOK {
		t.Fatalf("release: %d %s", r.status, r.body)
	}
	got = Job{}
	r.decode(t, &got)
	if got.Held || got.Note != "" {
		t.Fatalf("still held: %+v", got)
	}
	r = env.do(http.MethodPost, "/v1/jobs/"+j.ID+"/release", tokAlice, map[string]string{"reason": "again"})
	got = Job{}
	r.decode(t, &got)
	if r.status != http.StatusOK || got.Held || got.Note != noteReleaseUnchanged {
		t.Fatalf("release of a job not held: %d %+v", r.status, got)
	}
	if r := env.do(http.MethodPost, "/v1/jobs/"+j.ID+"/hold", tokAlice, `{"why": "x"}`); r.status != http.StatusBadRequest || r.apiError(t).Field != "why" {
		t.Fatalf("unknown action field: %d %s", r.status, r.body)
	}

	r = env.do(http.MethodPost, "/v1/jobs/"+j.ID+"/cancel", tokAlice, map[string]string{"reason": "wrong data"})
	if r.status != http.StatusOK {
		t.Fatalf("cancel: %d %s", r.status, r.body)
	}
	got = Job{}
	r.decode(t, &got)
	if got.State != "cancelled" || len(env.wf.cancelled) != 1 || env.wf.cancelled[0] != j.ID {
		t.Fatalf("cancel: %+v, signalled %v", got, env.wf.cancelled)
	}
	// A cancelled job cannot be held.
	if r := env.do(http.MethodPost, "/v1/jobs/"+j.ID+"/hold", tokAlice, nil); r.status != http.StatusConflict {
		t.Fatalf("hold cancelled job: %d %s", r.status, r.body)
	}

	audit, err := env.store.AuditFor(ctx, j.ID, 0)
	if err != nil {
		t.Fatal(err)
	}
	var trail []string
	for _, a := range audit {
		entry := a.Actor + ":" + a.Action + ":" + a.Reason
		if c, ok := a.Evidence["changed"]; ok {
			entry += fmt.Sprintf(":changed=%v", c)
		}
		trail = append(trail, entry)
	}
	want := []string{
		"alice:submit:submitted to queue train", // the token's name, as for every later action
		"alice:hold:dataset refresh:changed=true",
		"olga:hold:held through the API, no reason given:changed=false",
		"olga:release_hold:released through the API, no reason given:changed=true",
		"alice:release_hold:again:changed=false",
		"alice:cancel:wrong data",
	}
	if strings.Join(trail, "|") != strings.Join(want, "|") {
		t.Fatalf("audit trail\n got %v\nwant %v", trail, want)
	}
}

func TestCancelAcceptedWhenWorkflowSignalFails(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t)
	j := env.mustSubmit(tokAlice, validSpec())
	env.wf.cancelErr = errTemporalDown
	r := env.do(http.MethodPost, "/v1/jobs/"+j.ID+"/cancel", tokAlice, nil)
	if r.status != http.StatusAccepted {
		t.Fatalf("status %d: %s", r.status, r.body)
	}
	var got Job
	r.decode(t, &got)
	if got.State != "cancelled" || got.Note == "" {
		t.Fatalf("job %+v", got)
	}
}

// TestCancelAnsweredAfterSlowSignal checks that a cancel whose workflow
// signal outlasts the request's store deadline is still answered 200 with the
// stored job: the answer's re-read has a deadline of its own (`make load` saw
// 503 "get job: context deadline exceeded" for cancels already stored).
func TestCancelAnsweredAfterSlowSignal(t *testing.T) {
	t.Parallel()
	const storeTimeout = 300 * time.Millisecond
	env := newTestEnv(t, WithStoreTimeout(storeTimeout))
	j := env.mustSubmit(tokAlice, validSpec())
	env.wf.mu.Lock()
	env.wf.cancelHook = func(string) { time.Sleep(2 * storeTimeout) }
	env.wf.mu.Unlock()
	r := env.do(http.MethodPost, "/v1/jobs/"+j.ID+"/cancel", tokAlice, nil)
	if r.status != http.StatusOK {
		t.Fatalf("status %d: %s", r.status, r.body)
	}
	var got Job
	r.decode(t, &got)
	if got.State != "cancelled" {
		t.Fatalf("job %+v", got)
	}
}

// TestStoreUnreachableGives503 checks that with PostgreSQL unreachable every
// call that needs it answers 503 store_unavailable, never a 2xx, and that no
// workflow is started for an unpersisted submission.
func TestStoreUnreachableGives503(t *testing.T) {
	t.Parallel()
	url := newTestEnv(t).url // a migrated database; this env is not used further
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	proxy := newTCPProxy(t, net.JoinHostPort(cfg.Host, strconv.Itoa(int(cfg.Port))))
	env := newTestEnvAt(t, proxiedURL(url, proxy.addr()), WithStoreTimeout(2*time.Second))
	j := env.mustSubmit(tokAlice, validSpec())
	proxy.Close()

	for _, tc := range []struct{ method, path string }{
		{http.MethodPost, "/v1/jobs"},
		{http.MethodGet, "/v1/jobs/" + j.ID},
		{http.MethodGet, "/v1/jobs/" + j.ID + "/events"},
		{http.MethodGet, "/v1/jobs"},
		{http.MethodPost, "/v1/jobs/" + j.ID + "/cancel"},
		{http.MethodPost, "/v1/jobs/" + j.ID + "/hold"},
		{http.MethodGet, "/v1/queues"},
		{http.MethodGet, "/v1/inventory"},
		{http.MethodGet, "/readyz"},
	} {
		var body any
		if tc.path == "/v1/jobs" && tc.method == http.MethodPost {
			body = validSpec()
		}
		r := env.do(tc.method, tc.path, tokAlice, body, IdempotencyKeyHeader, "k")
		if r.status != http.StatusServiceUnavailable || r.apiError(t).Code != CodeStoreUnavailable {
			t.Errorf("%s %s: %d %s", tc.method, tc.path, r.status, r.body)
		}
	}
	if got := env.wf.startedJobs(); len(got) != 1 {
		t.Fatalf("workflows started %v, want only the job submitted before the outage", got)
	}
	if r := env.do(http.MethodGet, "/healthz", "", nil); r.status != http.StatusOK {
		t.Fatalf("healthz while the database is down: %d", r.status)
	}
}

func TestStoreClosedPoolGives503(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t)
	env.store.Close()
	r := env.submit(tokAlice, validSpec(), "")
	if r.status != http.StatusServiceUnavailable || r.apiError(t).Code != CodeStoreUnavailable {
		t.Fatalf("%d %s", r.status, r.body)
	}
	if len(env.wf.startedJobs()) != 0 {
		t.Fatal("workflow started for an unpersisted job")
	}
}

func TestListJobsPaginates(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t)
	var ids []string
	for i := 0; i < 5; i++ {
		ids = append(ids, env.mustSubmit(tokAlice, validSpec()).ID)
	}
	env.mustSubmit(tokAlice, with(func(s map[string]any) { s["queue"] = "delivery" }))

	var seen []string
	cursor, pages := "", 0
	for {
		var page JobList
		r := env.do(http.MethodGet, "/v1/jobs?queue=train&state=submitted&limit=2&cursor="+cursor, tokAlice, nil)
		if r.status != http.StatusOK {
			t.Fatalf("%d %s", r.status, r.body)
		}
		r.decode(t, &page)
		pages++
		if len(page.Jobs) > 2 {
			t.Fatalf("page of %d jobs with limit 2", len(page.Jobs))
		}
		for _, j := range page.Jobs {
			seen = append(seen, j.ID)
		}
		if page.NextCursor == "" {
			break
		}
		cursor = page.NextCursor
	}
	if strings.Join(seen, ",") != strings.Join(ids, ",") || pages != 3 {
		t.Fatalf("%d pages gave %v, want %v", pages, seen, ids)
	}

	for _, tc := range []struct {
		query  string
		status int
		field  string
	}{
		{"limit=0", 422, "limit"},
		{"limit=1001", 422, "limit"},
		{"limit=ten", 400, "limit"},
		{"state=sleeping", 422, "state"},
		{"queue=bogus", 422, "queue"},
		{"reason=bored", 422, "reason"},
		{"cursor=garbage", 400, "cursor"},
		{"cursor=" + strings.ToLower(ids[0]), 400, "cursor"},
		{"cursor=" + ids[0] + "X", 400, "cursor"},
	} {
		r := env.do(http.MethodGet, "/v1/jobs?"+tc.query, tokAlice, nil)
		if r.status != tc.status || r.apiError(t).Field != tc.field {
			t.Errorf("%s: %d %s", tc.query, r.status, r.body)
		}
	}
	if e := env.do(http.MethodGet, "/v1/jobs?queue=bogus", tokAlice, nil).apiError(t); !strings.Contains(e.Message, "train") || !strings.Contains(e.Message, "GET /v1/queues") {
		t.Errorf("unknown queue does not list the queues: %q", e.Message)
	}
	var none JobList
	env.do(http.MethodGet, "/v1/jobs?reason=capacity_busy", tokAlice, nil).decode(t, &none)
	if len(none.Jobs) != 0 || none.Jobs == nil {
		t.Fatalf("reason filter: %+v", none)
	}
}

// TestGetJobExplainsWait applies a real scheduling cycle result through the
// store and checks that the job shows its reason, detail, since-when, rank and
// priority parts, and that the events endpoint lists the transitions.
func TestGetJobExplainsWait(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t)
	j := env.mustSubmit(tokAlice, validSpec())
	blocker := env.mustSubmit(tokOps, with(func(s map[string]any) { s["queue"] = "inference" }))
	// The first cycle runs a minute after the submission: the store covers
	// that minute with a not_yet_evaluated event.
	t0 := time.Now().UTC().Add(time.Minute).Truncate(time.Second)
	applyWait(t, env, "c1", t0, scheduling.WaitStatus{
		JobID: j.ID, Reason: vocab.ReasonCapacityBusy, Rank: 3,
		Detail:     "needs 2 × ≥40960 MiB on one node; 2 match in pool, 0 free",
		ReEvaluate: "when 2 matching GPUs on one node are free",
		Priority:   scheduling.Priority{Score: 10450, TierBase: 10000, AgingCredit: 300, FairShare: 150, FairFactor: 0.15, SubmitTime: t0},
	})
	t1 := t0.Add(14 * time.Minute)
	applyWait(t, env, "c2", t1, scheduling.WaitStatus{
		JobID: j.ID, Reason: vocab.ReasonReservedForHigherPriority, Rank: 2, BlockingJobID: blocker.ID,
		Detail:   "2 matching GPUs free on node-1, reserved for " + blocker.ID,
		Priority: scheduling.Priority{Score: 10600, TierBase: 10000, AgingCredit: 400, FairShare: 200, FairFactor: 0.2, SubmitTime: t0},
	})

	var got Job
	r := env.do(http.MethodGet, "/v1/jobs/"+j.ID, tokAlice, nil)
	if r.status != http.StatusOK {
		t.Fatalf("%d %s", r.status, r.body)
	}
	r.decode(t, &got)
	if got.State != "waiting" || got.Wait == nil || got.Explanation == nil {
		t.Fatalf("job %s", r.body)
	}
	w, e := got.Wait, got.Explanation
	if w.Reason != "reserved_for_higher_priority" || !w.Since.Equal(t1) || w.BlockingJobID != blocker.ID ||
		w.NextAction == "" || !strings.Contains(w.Detail, "reserved for") {
		t.Fatalf("wait %+v", w)
	}
	if e.Rank != 2 || e.Pool != "a100-east" || e.Priority.Score != 10600 || e.Priority.AgingCredit != 400 ||
		e.Priority.FairShare != 200 || e.BlockingJobID != blocker.ID {
		t.Fatalf("explanation %+v", e)
	}

	var events WaitEventList
	env.server.now = func() time.Time { return t1.Add(time.Minute) }
	env.do(http.MethodGet, "/v1/jobs/"+j.ID+"/events", tokAlice, nil).decode(t, &events)
	if len(events.Events) != 3 {
		t.Fatalf("events %+v", events)
	}
	if pre := events.Events[0]; pre.Reason != "not_yet_evaluated" || pre.EndedAt == nil || !pre.EndedAt.Equal(t0) {
		t.Fatalf("event before the first cycle %+v", pre)
	}
	first, cur := events.Events[1], events.Events[2]
	if first.Reason != "capacity_busy" || first.EndedAt == nil || first.DurationSeconds != 14*60 {
		t.Fatalf("first event %+v", first)
	}
	if cur.EndedAt != nil || cur.DurationSeconds != 60 {
		t.Fatalf("current event %+v", cur)
	}
}

// TestWhyRecordFields checks the why record's new fields in GET
// /v1/jobs/{id} and /events: one wait event for one reason whose numbers
// changed, the explanation's cycle, next re-evaluation and overtake, and the
// last scheduling action with its start; the events answer carries the same
// record with the submit time and the wait's start.
func TestWhyRecordFields(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t)
	j := env.mustSubmit(tokAlice, validSpec())
	t0 := time.Now().UTC().Add(time.Minute).Truncate(time.Second)
	over := t0.Add(3 * time.Hour)
	for c := range 3 {
		at := t0.Add(time.Duration(c) * time.Minute)
		applyWait(t, env, fmt.Sprintf("w%d", c), at, scheduling.WaitStatus{
			JobID: j.ID, Reason: vocab.ReasonCapacityBusy, Rank: 2,
			Detail:   fmt.Sprintf("needs 2 × ≥40960 MiB on one node; 2 match in pool, %d free", c%2),
			Overtake: &scheduling.Overtake{AheadJobID: "j-ahead", GapPoints: 50, HeadroomPoints: 2000, BoundPoints: 3000, At: over},
			Next:     scheduling.NextEvaluation{At: over, Kind: vocab.NextEvalAgingOvertake},
		})
	}
	var got Job
	env.do(http.MethodGet, "/v1/jobs/"+j.ID, tokAlice, nil).decode(t, &got)
	e, d := got.Explanation, got.LastDecision
	if e == nil || e.CycleID != "w2" || e.EvaluatedAt == nil || !e.EvaluatedAt.Equal(t0.Add(2*time.Minute)) ||
		e.NextEvaluation == nil || e.NextEvaluation.Kind != "aging_overtake" || !e.NextEvaluation.At.Equal(over) ||
		e.Overtake == nil || e.Overtake.AheadJobID != "j-ahead" || e.Overtake.At == nil || e.Overtake.Never {
		t.Fatalf("explanation %+v", e)
	}
	if d == nil || d.Action != "left_waiting" || d.CycleID != "w2" || d.Reason != "capacity_busy" || !d.Since.Equal(t0) ||
		d.Rank != 2 {
		t.Fatalf("last decision %+v", d)
	}
	if got.Wait == nil || !got.Wait.Since.Equal(t0) || !strings.HasSuffix(got.Wait.Detail, "0 free") {
		t.Fatalf("wait %+v: want one wait since the first cycle with the latest detail", got.Wait)
	}
	var events WaitEventList
	env.do(http.MethodGet, "/v1/jobs/"+j.ID+"/events", tokAlice, nil).decode(t, &events)
	busy := 0
	for _, ev := range events.Events {
		if ev.Reason == "capacity_busy" {
			busy++
		}
	}
	if busy != 1 || events.State != vocab.JobWaiting || !events.SubmittedAt.Equal(got.SubmittedAt) ||
		events.WaitingSince == nil || events.LastDecision == nil || events.LastDecision.CycleID != "w2" ||
		events.Explanation == nil || events.Explanation.Rank != 2 || events.Explanation.NextEvaluation == nil {
		t.Fatalf("events %+v", events)
	}
}

// applyWait records one cycle in which the given job waits.
func applyWait(t testing.TB, env *testEnv, cycle string, at time.Time, w scheduling.WaitStatus) {
	t.Helper()
	_, err := env.store.ApplyCycle(context.Background(), cycle, &scheduling.Result{
		PolicyVersion: "default", At: at, Waiting: []scheduling.WaitStatus{w},
	}, at)
	if err != nil {
		t.Fatal(err)
	}
}

func TestQueuesAndInventory(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t)
	var qs QueueList
	env.do(http.MethodGet, "/v1/queues", tokBob, nil).decode(t, &qs)
	if len(qs.Queues) != 3 || qs.Queues[0].Name != "delivery" || qs.Queues[0].Tier != "key-project" ||
		qs.Queues[0].MaxWaitSec != 1800 || !qs.Queues[1].Protected {
		t.Fatalf("queues %+v", qs)
	}
	var inv Inventory
	env.do(http.MethodGet, "/v1/inventory", tokBob, nil).decode(t, &inv)
	if len(inv.Pools) != 1 || len(inv.Pools[0].Nodes) != 1 || len(inv.Pools[0].Nodes[0].GPUs) != 2 ||
		inv.Pools[0].Nodes[0].GPUs[0].MemoryMiB != 81920 || inv.Pools[0].Stage != "observe" {
		t.Fatalf("inventory %+v", inv)
	}
}

func TestUnknownRouteAndMethodAreJSON(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t)
	r := env.do(http.MethodGet, "/v2/nothing", tokAlice, nil)
	if r.status != http.StatusNotFound || r.apiError(t).Code != CodeNotFound {
		t.Fatalf("%d %s", r.status, r.body)
	}
	r = env.do(http.MethodDelete, "/v1/queues", tokAlice, nil)
	if r.status != http.StatusMethodNotAllowed || r.apiError(t).Code != CodeMethodNotAllowed {
		t.Fatalf("%d %s", r.status, r.body)
	}
	var h Health
	env.do(http.MethodGet, "/healthz", "", nil).decode(t, &h)
	if h.Status != "ok" {
		t.Fatalf("healthz %+v", h)
	}
	if !json.Valid(env.do(http.MethodGet, "/v1/openapi.json", "", nil).body) {
		t.Fatal("openapi.json is not JSON")
	}
}
