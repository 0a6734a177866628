package activities_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"

	"github.com/gpugov/gpugov/activities"
	"github.com/gpugov/gpugov/internal/policy"
	"github.com/gpugov/gpugov/internal/scheduling"
	"github.com/gpugov/gpugov/internal/vocab"
	"github.com/gpugov/gpugov/internal/webhook"
	"github.com/gpugov/gpugov/store"
	"github.com/gpugov/gpugov/store/storetest"
)

// hookReceiver is a loopback webhook that answers the scripted statuses in
// turn (200 once they run out) and keeps every request it got.
type hookReceiver struct {
	mu       sync.Mutex
	statuses []int
	got      []receivedHook
}

type receivedHook struct {
	header http.Header
	body   []byte
}

func (h *hookReceiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	h.mu.Lock()
	defer h.mu.Unlock()
	h.got = append(h.got, receivedHook{header: r.Header.Clone(), body: body})
	status := http.StatusOK
	if len(h.statuses) > 0 {
		status, h.statuses = h.statuses[0], h.statuses[1:]
	}
	w.WriteHeader(status)
	_, _ = io.WriteString(w, http.StatusText(status))
}

func (h *hookReceiver) requests() []receivedHook {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]receivedHook(nil), h.got...)
}

// TestNotificationActivities runs the notification activities on a real
// store against a loopback receiver: the sweep routes vision (webhook) and
// marks drill's notification unrouted; a 500 answer is recorded and is a
// retryable DeliveryFailed error; the next attempt is delivered, signed
// (the receiver's check passes), with the event ID and the documented body;
// an unset secret fails without a request; the dead letter keeps the last
// error; a final notification is not sent again; and a project whose
// webhook was removed gets its notification unrouted.
func TestNotificationActivities(t *testing.T) {
	ctx := context.Background()
	t.Setenv("GPUGOV_TEST_VISION_SECRET", "s3cret")
	st, _ := storetest.NewStore(t, storetest.Fixture{
		Pools: []scheduling.Pool{storetest.Pool(testPool, vocab.StageObserve, 1, 4)}, Queues: []scheduling.Queue{storetest.TrainQueue}})
	var placements []scheduling.Placement
	var visionJobs []string
	for i, project := range []string{"vision", "vision", "vision", "drill"} {
		j := storetest.Submit(t, st, &store.NewJob{Project: project, Queue: "train", Tier: vocab.TierStandard,
			Request: scheduling.ResourceRequest{GPUs: 1, Pool: testPool}})
		if project == "vision" {
			visionJobs = append(visionJobs, j.ID)
		}
		placements = append(placements, storetest.Placement(j.ID, testPool, storetest.NodeName(testPool, 0), 1000, storetest.GPUName(testPool, 0, i)))
	}
	storetest.Place(t, st, "c1", time.Now(), placements...)

	recv := &hookReceiver{statuses: []int{http.StatusInternalServerError}}
	srv := httptest.NewServer(recv)
	defer srv.Close()
	cfg := policy.Default()
	cfg.Notifications.Webhooks = []policy.Webhook{{Project: "vision", URL: srv.URL + "/hook", SecretEnv: "GPUGOV_TEST_VISION_SECRET"}}
	var mu sync.Mutex
	current := cfg
	suite := testsuite.WorkflowTestSuite{}
	env := suite.NewTestActivityEnvironment()
	activities.Register(env, activities.Deps{Store: st, Governance: func() *policy.Policy { mu.Lock(); defer mu.Unlock(); return current }})

	val, err := env.ExecuteActivity("SweepNotifications", &activities.SweepInput{})
	if err != nil {
		t.Fatal(err)
	}
	var sw activities.SweepResult
	if err := val.Get(&sw); err != nil || len(sw.Projects) != 1 || sw.Projects[0] != "vision" || sw.Unrouted != 1 ||
		sw.Delivery.MaxAttempts != policy.DefaultNotifyMaxAttempts {
		t.Fatalf("sweep = %+v, %v", sw, err)
	}
	val, err = env.ExecuteActivity("LoadNotifications", &activities.LoadInput{Project: "vision"})
	if err != nil {
		t.Fatal(err)
	}
	var batch activities.LoadResult
	if err := val.Get(&batch); err != nil || len(batch.IDs) != 3 {
		t.Fatalf("batch = %+v, %v", batch, err)
	}
	deliver := func(id string) (activities.DeliverResult, error) {
		var out activities.DeliverResult
		val, err := env.ExecuteActivity("DeliverNotification", &activities.DeliverInput{ID: id, TimeoutSeconds: 5})
		if err == nil {
			err = val.Get(&out)
		}
		return out, err
	}
	first := batch.IDs[0]
	_, err = deliver(first)
	var app *temporal.ApplicationError
	if !errors.As(err, &app) || app.Type() != activities.ErrTypeDeliveryFailed || app.NonRetryable() || !strings.Contains(err.Error(), "webhook answered 500") {
		t.Fatalf("500 answer: %v, want a retryable DeliveryFailed error", err)
	}
	n, _ := st.GetNotification(ctx, first)
	if n.State != vocab.NotificationPending || n.Attempts != 1 || n.LastStatus == nil || *n.LastStatus != 500 {
		t.Fatalf("after the 500: %+v", n)
	}
	if out, err := deliver(first); err != nil || out.State != vocab.NotificationDelivered || out.Status != 200 {
		t.Fatalf("second attempt: %+v, %v", out, err)
	}
	reqs := recv.requests()
	if len(reqs) != 2 {
		t.Fatalf("receiver got %d requests, want 2", len(reqs))
	}
	for _, r := range reqs {
		if err := webhook.Verify([]byte("s3cret"), r.header, r.body, 0, time.Now()); err != nil {
			t.Fatalf("receiver's check: %v", err)
		}
		if r.header.Get(webhook.HeaderEventID) != first || r.header.Get(webhook.HeaderEvent) != "job.placed" {
			t.Fatalf("headers %v", r.header)
		}
	}
	var body map[string]any
	if err := json.Unmarshal(reqs[1].body, &body); err != nil {
		t.Fatal(err)
	}
	if body["id"] != first || body["type"] != "job.placed" || body["project"] != "vision" ||
		body["job_id"] != visionJobs[0] || body["created_at"] == nil || body["data"].(map[string]any)["node"] == nil {
		t.Fatalf("body = %s", reqs[1].body)
	}
	if string(reqs[0].body) != string(reqs[1].body) {
		t.Fatal("a retry must send the same body")
	}

	second := batch.IDs[1]
	t.Setenv("GPUGOV_TEST_VISION_SECRET", "")
	if _, err := deliver(second); err == nil || !strings.Contains(err.Error(), "GPUGOV_TEST_VISION_SECRET") {
		t.Fatalf("unset secret: %v", err)
	}
	if len(recv.requests()) != 2 {
		t.Fatal("a delivery without a secret must send nothing")
	}
	if _, err := env.ExecuteActivity("DeadLetterNotification", &activities.DeadLetterInput{ID: second}); err != nil {
		t.Fatal(err)
	}
	n, _ = st.GetNotification(ctx, second)
	if n.State != vocab.NotificationDead || !strings.Contains(n.LastError, "GPUGOV_TEST_VISION_SECRET") || n.FinishedAt == nil {
		t.Fatalf("dead letter = %+v", n)
	}
	if out, err := deliver(second); err != nil || out.State != vocab.NotificationDead || len(recv.requests()) != 2 {
		t.Fatalf("delivering a dead notification: %+v, %v", out, err)
	}

	mu.Lock()
	current = policy.Default()
	mu.Unlock()
	if out, err := deliver(batch.IDs[2]); err != nil || out.State != vocab.NotificationUnrouted || len(recv.requests()) != 2 {
		t.Fatalf("webhook removed: %+v, %v", out, err)
	}
}
