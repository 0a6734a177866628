package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpugov/gpugov/api"
	apiclient "github.com/gpugov/gpugov/api/client"
	"github.com/gpugov/gpugov/internal/policy"
	"github.com/gpugov/gpugov/internal/vocab"
	"github.com/gpugov/gpugov/internal/webhook"
)

// hookSecret is the loopback receiver's signing secret, read by the
// service from a file (policy secret_file).
const hookSecret = "e2e-webhook-secret"

// receivedEvent is one request the receiver accepted as correctly signed.
type receivedEvent struct {
	ID, Type, JobID string
	Reason          string // data.reason of a job.wait_reason event
	Status          int    // what the receiver answered
}

// loopbackHook is a webhook receiver on 127.0.0.1 that verifies each
// request as the README tells receivers to (internal/webhook.Verify: HMAC
// over the timestamp and the raw body, timestamp within 5 minutes), answers
// a scripted status per request (fail: always 500; else the script, then
// 200), and records what it got.
type loopbackHook struct {
	t        *testing.T
	mu       sync.Mutex
	script   []int
	fail     bool
	events   []receivedEvent
	badSigns int
}

func (h *loopbackHook) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	h.mu.Lock()
	defer h.mu.Unlock()
	if err := webhook.Verify([]byte(hookSecret), r.Header, body, 0, time.Now()); err != nil {
		h.badSigns++
		http.Error(w, err.Error(), http.StatusUnauthorized)
		return
	}
	var ev struct {
		ID, Type string
		JobID    string `json:"job_id"`
		Data     map[string]any
	}
	if err := json.Unmarshal(body, &ev); err != nil || ev.ID != r.Header.Get(webhook.HeaderEventID) || ev.Type != r.Header.Get(webhook.HeaderEvent) {
		h.t.Errorf("receiver: body %s does not match headers %v (%v)", body, r.Header, err)
	}
	status := http.StatusOK
	switch {
	case h.fail:
		status = http.StatusInternalServerError
	case len(h.script) > 0:
		status, h.script = h.script[0], h.script[1:]
	}
	reason, _ := ev.Data["reason"].(string)
	h.events = append(h.events, receivedEvent{ID: ev.ID, Type: ev.Type, JobID: ev.JobID, Reason: reason, Status: status})
	w.WriteHeader(status)
}

func (h *loopbackHook) received() ([]receivedEvent, int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]receivedEvent(nil), h.events...), h.badSigns
}

// webhookPolicy is the default policy with project drill's webhook at url
// (its secret in a file) and a short retry schedule of attempts attempts.
func webhookPolicy(t *testing.T, url string, attempts int) *policy.Policy {
	t.Helper()
	secret := filepath.Join(t.TempDir(), "drill-hook-secret")
	if err := os.WriteFile(secret, []byte(hookSecret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	p := policy.Default()
	p.Notifications.Webhooks = []policy.Webhook{{Project: "drill", URL: url, SecretFile: secret}}
	p.Notifications.Delivery = policy.Delivery{MaxAttempts: attempts, InitialIntervalSeconds: 0.2, MaxIntervalSeconds: 0.5,
		TimeoutSeconds: 5, PollIntervalSeconds: 0.5, RetentionSeconds: 3600}
	return p
}

// notificationsOf lists the outbox rows of project through the API,
// oldest first.
func notificationsOf(t *testing.T, c *apiclient.Client, project, state string) []api.Notification {
	t.Helper()
	l, err := c.Notifications(context.Background(), apiclient.NotificationOptions{Project: project, State: state, Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	out := make([]api.Notification, 0, len(l.Notifications))
	for i := len(l.Notifications) - 1; i >= 0; i-- {
		out = append(out, l.Notifications[i])
	}
	return out
}

// TestWebhookGetsSignedEventsInOrder is the notification flow on the live
// stack (API, PostgreSQL, Temporal dev server, the service's dispatcher):
// project drill's receiver on loopback gets, correctly signed and in outbox
// order, a placement, a spec wait (4 GPUs fit no node), an environment wait
// and — once the prerequisite is set ready through the API — that job's
// placement. The first delivery is answered 500 and is retried until the
// 200; every event is then delivered once more than it failed. A project
// without a webhook (other) gets nothing sent: its notification is marked
// unrouted (final, pruned by retention) instead of piling up as pending.
func TestWebhookGetsSignedEventsInOrder(t *testing.T) {
	hook := &loopbackHook{t: t, script: []int{http.StatusInternalServerError}}
	srv := httptest.NewServer(hook)
	defer srv.Close()
	e := startEnv(t, envOptions{pools: actionPool, simSpeed: 1, policy: webhookPolicy(t, srv.URL+"/gpugov", 5)})
	ctx := context.Background()

	placed := submitAction(t, e.client, 1, nil)
	waitFor(t, 20*time.Second, "first job placed", func() (bool, string) {
		return e.queryInt(t, `SELECT count(*) FROM allocations WHERE job_id = $1`, placed.ID) == 1, ""
	})
	spec := submitAction(t, e.client, 4, nil)
	waitReason(t, e, spec.ID, vocab.ReasonNoMatchingCapacity, 1)
	env := submitAction(t, e.client, 1, []api.PrerequisiteSpec{{Name: "dataset", Ready: false, Message: "not staged"}})
	waitReason(t, e, env.ID, vocab.ReasonEnvironmentNotReady, 1)
	if _, err := e.client.SetPrerequisite(ctx, env.ID, "dataset", true, "staged"); err != nil {
		t.Fatal(err)
	}
	other, status, err := e.client.Submit(ctx, &api.JobSpec{Project: "other", Queue: "standard", RunSeconds: 3600,
		Resources: api.ResourceSpec{GPUs: 4, Pool: "actions"}}, "")
	if err != nil || status != http.StatusCreated {
		t.Fatalf("submit other: %d %v", status, err)
	}

	want := []string{placed.ID + " job.placed", spec.ID + " job.wait_reason:no_matching_capacity",
		env.ID + " job.wait_reason:environment_not_ready", env.ID + " job.placed"}
	var delivered []receivedEvent
	waitFor(t, 60*time.Second, "every drill event delivered", func() (bool, string) {
		got, _ := hook.received()
		delivered = delivered[:0]
		for _, ev := range got {
			if ev.Status == http.StatusOK {
				delivered = append(delivered, ev)
			}
		}
		return len(delivered) >= len(want), fmt.Sprintf("%d delivered of %d received", len(delivered), len(got))
	})
	got, bad := hook.received()
	if bad != 0 {
		t.Fatalf("%d requests failed the receiver's signature check", bad)
	}
	var seen []string
	for _, ev := range delivered {
		s := ev.JobID + " " + ev.Type
		if ev.Type == string(vocab.NotifyWaitReason) {
			s += ":" + ev.Reason
		}
		seen = append(seen, s)
	}
	if strings.Join(seen, "\n") != strings.Join(want, "\n") {
		t.Fatalf("delivered in this order:\n%s\nwant:\n%s", strings.Join(seen, "\n"), strings.Join(want, "\n"))
	}
	if got[0].Status != http.StatusInternalServerError || got[1].ID != got[0].ID || got[1].Status != http.StatusOK {
		t.Fatalf("the first event was not retried after its 500: %+v", got[:2])
	}
	rows := notificationsOf(t, e.client, "drill", "")
	if len(rows) != len(want) {
		t.Fatalf("drill has %d notifications, want %d: %+v", len(rows), len(want), rows)
	}
	for i, n := range rows {
		wantAttempts := 1
		if i == 0 {
			wantAttempts = 2
		}
		if n.ID != delivered[i].ID || n.State != string(vocab.NotificationDelivered) || n.Attempts != wantAttempts ||
			n.LastStatus == nil || *n.LastStatus != 200 {
			t.Errorf("notification %d = %+v, want delivered after %d attempt(s) as event %s", i, n, wantAttempts, delivered[i].ID)
		}
	}
	waitFor(t, 20*time.Second, "other's notification unrouted", func() (bool, string) {
		ns := notificationsOf(t, e.client, "other", "")
		return len(ns) == 1 && ns[0].State == string(vocab.NotificationUnrouted), fmt.Sprintf("%+v", ns)
	})
	for _, ev := range got {
		if ev.JobID == other.ID {
			t.Fatalf("project other has no webhook, yet its event reached drill's receiver: %+v", ev)
		}
	}
	if n := e.queryInt(t, `SELECT count(*) FROM notifications WHERE state = 'pending'`); n != 0 {
		t.Fatalf("%d notifications still pending", n)
	}
}

// TestWebhookDeadLetter: a receiver that answers 500 to everything gets
// each event exactly max_attempts (2) times; then the event is dead with
// the last error kept (GET /v1/notifications?state=dead), and the next
// event of the project is still attempted (a dead one blocks nothing).
func TestWebhookDeadLetter(t *testing.T) {
	hook := &loopbackHook{t: t, fail: true}
	srv := httptest.NewServer(hook)
	defer srv.Close()
	e := startEnv(t, envOptions{pools: actionPool, simSpeed: 1, policy: webhookPolicy(t, srv.URL, 2)})
	first := submitAction(t, e.client, 1, nil)
	second := submitAction(t, e.client, 4, nil)
	var dead []api.Notification
	waitFor(t, 60*time.Second, "both events dead-lettered", func() (bool, string) {
		dead = notificationsOf(t, e.client, "drill", string(vocab.NotificationDead))
		return len(dead) == 2, fmt.Sprintf("%d dead", len(dead))
	})
	jobs := map[string]bool{first.ID: true, second.ID: true}
	for i, n := range dead {
		if !jobs[n.JobID] || n.Attempts != 2 || n.LastStatus == nil || *n.LastStatus != 500 ||
			n.LastError != "webhook answered 500" || n.FinishedAt == nil {
			t.Errorf("dead letter %d = %+v", i, n)
		}
		delete(jobs, n.JobID)
	}
	got, bad := hook.received()
	if bad != 0 || len(got) != 4 || got[0].ID != dead[0].ID || got[1].ID != dead[0].ID || got[2].ID != dead[1].ID || got[3].ID != dead[1].ID {
		t.Fatalf("receiver got %+v (%d bad signatures), want each of two events twice, in order", got, bad)
	}
}
