package workflows_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/mock"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/gpugov/gpugov/activities"
	"github.com/gpugov/gpugov/internal/policy"
	"github.com/gpugov/gpugov/internal/scheduling"
	"github.com/gpugov/gpugov/internal/vocab"
	"github.com/gpugov/gpugov/internal/webhook"
	"github.com/gpugov/gpugov/store"
	"github.com/gpugov/gpugov/store/storetest"
	"github.com/gpugov/gpugov/workflows"
)

// scriptedHook answers each request with the next status of its script
// (200 once it runs out), checking every signature, and keeps the event IDs
// in arrival order.
type scriptedHook struct {
	t        *testing.T
	secret   []byte
	mu       sync.Mutex
	statuses []int
	events   []string // event ID per request
}

func (h *scriptedHook) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	if err := webhook.Verify(h.secret, r.Header, body, 0, time.Now()); err != nil {
		h.t.Errorf("receiver: %v", err)
		w.WriteHeader(http.StatusUnauthorized)
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.events = append(h.events, r.Header.Get(webhook.HeaderEventID))
	status := http.StatusOK
	if len(h.statuses) > 0 {
		status, h.statuses = h.statuses[0], h.statuses[1:]
	}
	w.WriteHeader(status)
}

func (h *scriptedHook) received() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.events...)
}

// notifyFixture stores n placed jobs of project vision (n job.placed
// notifications, in job order) and returns the store, the notification IDs
// in delivery order, and a policy routing vision to recv with a short
// retry schedule of attempts attempts.
func notifyFixture(t *testing.T, n, attempts int, recv http.Handler) (*store.Store, []string, *policy.Policy) {
	t.Helper()
	st, _ := storetest.NewStore(t, storetest.Fixture{Pools: []scheduling.Pool{storetest.Pool(testPool, vocab.StageObserve, 1, n)},
		Queues: []scheduling.Queue{storetest.TrainQueue}})
	var ps []scheduling.Placement
	for i := range n {
		j := storetest.Submit(t, st, &store.NewJob{Project: "vision", Queue: "train", Tier: vocab.TierStandard,
			Request: scheduling.ResourceRequest{GPUs: 1, Pool: testPool}})
		ps = append(ps, storetest.Placement(j.ID, testPool, testNode, 1000, gpuUUID(i)))
	}
	storetest.Place(t, st, "c-notify", time.Now(), ps...)
	pend, err := st.PendingNotifications(context.Background(), "vision", 100)
	if err != nil || len(pend) != n {
		t.Fatalf("pending: %d, %v", len(pend), err)
	}
	ids := make([]string, n)
	for i := range pend {
		ids[i] = pend[i].ID
	}
	srv := httptest.NewServer(recv)
	t.Cleanup(srv.Close)
	t.Setenv("GPUGOV_TEST_HOOK_SECRET", "wf-secret")
	cfg := policy.Default()
	cfg.Notifications.Webhooks = []policy.Webhook{{Project: "vision", URL: srv.URL, SecretEnv: "GPUGOV_TEST_HOOK_SECRET"}}
	cfg.Notifications.Delivery = policy.Delivery{MaxAttempts: attempts, InitialIntervalSeconds: 0.01, MaxIntervalSeconds: 0.02,
		TimeoutSeconds: 2, PollIntervalSeconds: 1, RetentionSeconds: 3600}
	return st, ids, cfg
}

func notifyEnv(st *store.Store, cfg *policy.Policy) *testEnv {
	return newWorkflowEnv(func(env *testEnv) {
		workflows.RegisterServiceWorker(env, activities.Deps{Store: st, Governance: func() *policy.Policy { return cfg }})
	})
}

// TestNotifyProjectRetriesThenDeadLetters: the first notification's
// receiver answers 500 on every one of the 3 attempts, so it is
// dead-lettered with the last error after the third; the second is
// answered 500 once and delivered on its retry; the third at once. The
// receiver sees them in outbox order, each signed.
func TestNotifyProjectRetriesThenDeadLetters(t *testing.T) {
	hook := &scriptedHook{t: t, secret: []byte("wf-secret"), statuses: []int{500, 500, 500, 500, 200}}
	st, ids, cfg := notifyFixture(t, 3, 3, hook)
	env := notifyEnv(st, cfg)
	env.ExecuteWorkflow(workflows.NotifyProjectWorkflowName, &workflows.NotifyProjectInput{Project: "vision"})
	if err := env.GetWorkflowError(); err != nil {
		t.Fatal(err)
	}
	var res workflows.NotifyProjectResult
	if err := env.GetWorkflowResult(&res); err != nil || res.Delivered != 2 || res.Dead != 1 {
		t.Fatalf("result %+v, %v", res, err)
	}
	want := []string{ids[0], ids[0], ids[0], ids[1], ids[1], ids[2]}
	if got := hook.received(); strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("receiver got %q, want %q", got, want)
	}
	ctx := context.Background()
	dead, _ := st.GetNotification(ctx, ids[0])
	if dead.State != vocab.NotificationDead || dead.Attempts != 3 || !strings.Contains(dead.LastError, "webhook answered 500") {
		t.Fatalf("dead letter = %+v", dead)
	}
	for _, id := range ids[1:] {
		if n, _ := st.GetNotification(ctx, id); n.State != vocab.NotificationDelivered {
			t.Fatalf("%s = %+v", id, n)
		}
	}
}

// TestNotifyProjectFailurePaths: a project workflow without a project fails
// at once (non-retryable); one whose dead-letter step keeps failing fails
// and leaves the notification pending for the next run (nothing is lost);
// a failing load fails the workflow too.
func TestNotifyProjectFailurePaths(t *testing.T) {
	hook := &scriptedHook{t: t, secret: []byte("wf-secret"), statuses: []int{500}}
	st, ids, cfg := notifyFixture(t, 1, 1, hook)

	env := notifyEnv(st, cfg)
	env.ExecuteWorkflow(workflows.NotifyProjectWorkflowName, &workflows.NotifyProjectInput{})
	var app *temporal.ApplicationError
	if err := env.GetWorkflowError(); !errors.As(err, &app) || !app.NonRetryable() {
		t.Fatalf("no project: %v, want a non-retryable error", err)
	}

	env = notifyEnv(st, cfg)
	env.OnActivity("DeadLetterNotification", mock.Anything, mock.Anything).Return(nil,
		temporal.NewNonRetryableApplicationError("store down", "Test", nil))
	env.ExecuteWorkflow(workflows.NotifyProjectWorkflowName, &workflows.NotifyProjectInput{Project: "vision"})
	if err := env.GetWorkflowError(); err == nil || !strings.Contains(err.Error(), "store down") {
		t.Fatalf("dead letter failing: %v", err)
	}
	n, _ := st.GetNotification(context.Background(), ids[0])
	if n.State != vocab.NotificationPending || n.Attempts != 1 {
		t.Fatalf("after a failed dead letter: %+v, want pending with its attempt counted", n)
	}

	env = notifyEnv(st, cfg)
	env.OnActivity("LoadNotifications", mock.Anything, mock.Anything).Return(nil,
		temporal.NewNonRetryableApplicationError("load failed", "Test", nil))
	env.ExecuteWorkflow(workflows.NotifyProjectWorkflowName, &workflows.NotifyProjectInput{Project: "vision"})
	if err := env.GetWorkflowError(); err == nil || !strings.Contains(err.Error(), "load failed") {
		t.Fatalf("load failing: %v", err)
	}
}

// TestNotificationDispatchStartsProjectDeliveries: one dispatcher pass
// routes vision's notification to its project workflow (delivered) and
// continues as new; a failing sweep is logged and the pass still sleeps
// and continues (nothing delivered, nothing lost).
func TestNotificationDispatchStartsProjectDeliveries(t *testing.T) {
	hook := &scriptedHook{t: t, secret: []byte("wf-secret")}
	st, ids, cfg := notifyFixture(t, 1, 2, hook)

	env := notifyEnv(st, cfg)
	env.OnActivity("SweepNotifications", mock.Anything, mock.Anything).Return(nil, temporal.NewNonRetryableApplicationError("database unreachable", "Test", nil)).Once()
	env.ExecuteWorkflow(workflows.NotificationDispatchWorkflowName, &workflows.NotificationDispatchInput{IterationsPerRun: 1})
	if err := env.GetWorkflowError(); !workflowContinuedAsNew(err) {
		t.Fatalf("dispatcher with a failing sweep: %v, want continue-as-new", err)
	}
	if n, _ := st.GetNotification(context.Background(), ids[0]); n.State != vocab.NotificationPending || len(hook.received()) != 0 {
		t.Fatalf("after a failed sweep: %+v", n)
	}

	env = notifyEnv(st, cfg)
	env.ExecuteWorkflow(workflows.NotificationDispatchWorkflowName, &workflows.NotificationDispatchInput{IterationsPerRun: 1})
	if err := env.GetWorkflowError(); !workflowContinuedAsNew(err) {
		t.Fatalf("dispatcher: %v, want continue-as-new", err)
	}
	if n, _ := st.GetNotification(context.Background(), ids[0]); n.State != vocab.NotificationDelivered {
		t.Fatalf("after a pass: %+v", n)
	}
}

func workflowContinuedAsNew(err error) bool {
	var can *workflow.ContinueAsNewError
	return errors.As(err, &can)
}
