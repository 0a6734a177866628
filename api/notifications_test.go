package api

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gpugov/gpugov/internal/scheduling"
	"github.com/gpugov/gpugov/internal/vocab"
	"github.com/gpugov/gpugov/store"
)

// TestListNotifications: GET /v1/notifications shows a submitter only its
// own project's (naming another is 403), an operator every project's and
// filters by project, job and state; bad filters are 422 naming the field.
func TestListNotifications(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t)
	ctx := context.Background()
	var jobs []*store.Job
	for _, project := range []string{"vision", "speech"} {
		j, _, err := e.store.CreateJob(ctx, &store.NewJob{Project: project, Queue: "train", Tier: vocab.TierStandard,
			Request: scheduling.ResourceRequest{GPUs: 1, Pool: "a100-east"}, RunSeconds: 100})
		if err != nil {
			t.Fatal(err)
		}
		jobs = append(jobs, j)
	}
	now := time.Now()
	if _, err := e.store.ApplyCycle(ctx, "c1", &scheduling.Result{At: now,
		Placements: []scheduling.Placement{{JobID: jobs[0].ID, Pool: "a100-east", Node: "node-1", Rank: 1,
			GPUs: []scheduling.GPUShare{{UUID: "GPU-aaaa", Milli: 1000}}}},
		Waiting: []scheduling.WaitStatus{{JobID: jobs[1].ID, Reason: vocab.ReasonQuotaExhausted, Detail: "speech is at its quota"}}}, now); err != nil {
		t.Fatal(err)
	}
	list := func(token, query string) (int, NotificationList, string) {
		r := e.do(http.MethodGet, "/v1/notifications"+query, token, nil)
		var l NotificationList
		if r.status == http.StatusOK {
			if err := json.Unmarshal(r.body, &l); err != nil {
				t.Fatal(err)
			}
		}
		return r.status, l, string(r.body)
	}
	status, l, body := list(tokAlice, "")
	if status != http.StatusOK || len(l.Notifications) != 1 || l.Notifications[0].Project != "vision" ||
		l.Notifications[0].Type != "job.placed" || l.Notifications[0].State != "pending" || l.Notifications[0].Data["node"] != "node-1" {
		t.Fatalf("alice: %d %s", status, body)
	}
	if status, _, body := list(tokAlice, "?project=speech"); status != http.StatusForbidden || !strings.Contains(body, "speech") {
		t.Fatalf("alice asking for speech: %d %s", status, body)
	}
	if status, l, _ := list(tokOps, ""); status != http.StatusOK || len(l.Notifications) != 2 {
		t.Fatalf("operator: %d %+v", status, l)
	}
	if _, l, _ := list(tokOps, "?project=speech&state=pending&job="+jobs[1].ID); len(l.Notifications) != 1 ||
		l.Notifications[0].Data["reason"] != "quota_exhausted" {
		t.Fatalf("operator filtered: %+v", l)
	}
	if _, l, _ := list(tokOps, "?state=dead"); len(l.Notifications) != 0 {
		t.Fatalf("no dead letters yet: %+v", l)
	}
	for _, q := range []string{"?state=lost", "?limit=0", "?limit=x"} {
		status, _, body := list(tokOps, q)
		field := strings.TrimPrefix(strings.SplitN(q, "=", 2)[0], "?")
		if status != http.StatusUnprocessableEntity || !strings.Contains(body, `"field":"`+field+`"`) {
			t.Errorf("%s: %d %s, want 422 naming %s", q, status, body, field)
		}
	}
}
