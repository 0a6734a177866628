package activities

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"go.temporal.io/sdk/temporal"

	"github.com/gpugov/gpugov/internal/policy"
	"github.com/gpugov/gpugov/internal/vocab"
	"github.com/gpugov/gpugov/internal/webhook"
	"github.com/gpugov/gpugov/store"
)

// NotificationStore is the part of *store.Store the notification
// activities use (the outbox, docs/design.md §3, notifications).
type NotificationStore interface {
	SweepNotifications(ctx context.Context, routed []string, prunedBefore, at time.Time) (*store.NotificationSweep, error)
	PendingNotifications(ctx context.Context, project string, limit int) ([]store.Notification, error)
	GetNotification(ctx context.Context, id string) (*store.Notification, error)
	RecordNotificationAttempt(ctx context.Context, id string, a store.NotificationAttempt) (vocab.NotificationState, error)
	FinishNotification(ctx context.Context, id string, state vocab.NotificationState, lastError string, at time.Time) (vocab.NotificationState, error)
}

var _ NotificationStore = (*store.Store)(nil)

// ErrTypeDeliveryFailed is the application error type of a failed webhook
// attempt (retried by Temporal until the policy's max_attempts).
const ErrTypeDeliveryFailed = "DeliveryFailed"

// Notifications are the activities of the notification workflows:
// SweepNotifications (the dispatcher's pass), LoadNotifications (a
// project's next batch), DeliverNotification (one signed HTTP attempt) and
// DeadLetterNotification (the record after the last attempt).
type Notifications struct {
	d Deps
}

// DeliverySettings are the policy's delivery schedule (policy.Delivery),
// handed to the workflows through activity results so that they stay
// deterministic.
type DeliverySettings struct {
	MaxAttempts            int
	InitialIntervalSeconds float64
	MaxIntervalSeconds     float64
	TimeoutSeconds         float64
	PollIntervalSeconds    float64
}

func deliverySettings(d policy.Delivery) DeliverySettings {
	return DeliverySettings{MaxAttempts: d.MaxAttempts, InitialIntervalSeconds: d.InitialIntervalSeconds,
		MaxIntervalSeconds: d.MaxIntervalSeconds, TimeoutSeconds: d.TimeoutSeconds, PollIntervalSeconds: d.PollIntervalSeconds}
}

// SweepInput is the dispatcher pass's input (nothing: the policy in force decides).
type SweepInput struct{}

// SweepResult is what one dispatcher pass found.
type SweepResult struct {
	// Projects have pending notifications and a webhook, by name.
	Projects []string
	// Unrouted and Pruned count the notifications marked unrouted (no
	// webhook) and deleted by retention in this pass.
	Unrouted, Pruned int64
	Delivery         DeliverySettings
}

// SweepNotifications marks the pending notifications of projects without a
// webhook unrouted, prunes final ones older than the retention, and lists
// the projects whose pending notifications are to be delivered.
func (a *Notifications) SweepNotifications(ctx context.Context, _ *SweepInput) (*SweepResult, error) {
	cfg := a.d.config().Notifications
	now := a.d.now()
	sw, err := a.d.Store.SweepNotifications(ctx, cfg.Projects(), now.Add(-policy.Seconds(cfg.Delivery.RetentionSeconds)), now)
	if err != nil {
		return nil, err
	}
	return &SweepResult{Projects: sw.Projects, Unrouted: sw.Unrouted, Pruned: sw.Pruned, Delivery: deliverySettings(cfg.Delivery)}, nil
}

// LoadInput names the project whose next batch to load.
type LoadInput struct {
	Project string
	Limit   int // at most this many; 0 means 100
}

// LoadResult is a project's next batch, in delivery order.
type LoadResult struct {
	IDs      []string
	Delivery DeliverySettings
}

// LoadNotifications returns the IDs of the project's oldest pending
// notifications and the delivery schedule in force.
func (a *Notifications) LoadNotifications(ctx context.Context, in *LoadInput) (*LoadResult, error) {
	if in == nil || in.Project == "" {
		return nil, invalidInput("load notifications: project is required")
	}
	limit := in.Limit
	if limit <= 0 {
		limit = 100
	}
	ns, err := a.d.Store.PendingNotifications(ctx, in.Project, limit)
	if err != nil {
		return nil, err
	}
	out := &LoadResult{IDs: make([]string, len(ns)), Delivery: deliverySettings(a.d.config().Notifications.Delivery)}
	for i := range ns {
		out.IDs[i] = ns[i].ID
	}
	return out, nil
}

// DeliverInput names the notification to deliver.
type DeliverInput struct {
	ID             string
	TimeoutSeconds float64 // one HTTP attempt's bound; 0 means the policy default
}

// DeliverResult is the notification's state after the attempt.
type DeliverResult struct {
	State  vocab.NotificationState
	Status int // the HTTP status of the answer; 0 when none was needed or came
}

// DeliverNotification makes one delivery attempt of a pending notification:
// it POSTs its body (store.Notification.Body) to the project's webhook as
// the policy has it now, signed with the secret read now (internal/webhook),
// and records the attempt. A 2xx answer delivers it. Any other answer, a
// transport error or an unreadable secret is recorded and returned as a
// retryable DeliveryFailed error. A notification already final is left
// alone; one whose project lost its webhook becomes unrouted.
func (a *Notifications) DeliverNotification(ctx context.Context, in *DeliverInput) (*DeliverResult, error) {
	if in == nil || in.ID == "" {
		return nil, invalidInput("deliver notification: ID is required")
	}
	n, err := a.d.Store.GetNotification(ctx, in.ID)
	if err != nil {
		return nil, nonRetryable(err)
	}
	if n.State != vocab.NotificationPending {
		return &DeliverResult{State: n.State}, nil
	}
	cfg := a.d.config().Notifications
	hook, ok := cfg.Webhook(n.Project)
	if !ok {
		st, err := a.d.Store.FinishNotification(ctx, n.ID, vocab.NotificationUnrouted,
			"no webhook for project "+n.Project+" in the policy", a.d.now())
		if err != nil {
			return nil, nonRetryable(err)
		}
		return &DeliverResult{State: st}, nil
	}
	timeout := policy.Seconds(in.TimeoutSeconds)
	if timeout <= 0 {
		timeout = policy.Seconds(cfg.Delivery.TimeoutSeconds)
	}
	status, failure := a.post(ctx, hook, n, timeout)
	att := store.NotificationAttempt{At: a.d.now(), Status: status, Delivered: failure == "", Error: failure}
	st, err := a.d.Store.RecordNotificationAttempt(ctx, n.ID, att)
	if err != nil {
		return nil, nonRetryable(err)
	}
	if failure != "" && st == vocab.NotificationPending {
		return nil, temporal.NewApplicationError(failure, ErrTypeDeliveryFailed)
	}
	return &DeliverResult{State: st, Status: status}, nil
}

// maxErrorBody is how much of a failed answer's body the error keeps.
const maxErrorBody = 200

// post sends one signed attempt and returns the answer's status and what
// was wrong ("" for a 2xx answer).
func (a *Notifications) post(ctx context.Context, hook policy.Webhook, n *store.Notification, timeout time.Duration) (int, string) {
	secret, err := hook.Secret()
	if err != nil {
		return 0, err.Error()
	}
	body := n.Body()
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, hook.URL, bytes.NewReader(body))
	if err != nil {
		return 0, "build request: " + err.Error()
	}
	webhook.SetHeaders(req.Header, secret, n.ID, string(n.Kind), body, time.Now())
	req.Header.Set("User-Agent", "gpugov-webhook/1")
	client := a.d.HTTPClient
	if client == nil {
		client = http.DefaultClient
	}
	resp, err := client.Do(req)
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) {
			return 0, fmt.Sprintf("no answer within %s", timeout)
		}
		return 0, err.Error()
	}
	defer resp.Body.Close()
	snippet, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
	if resp.StatusCode/100 == 2 {
		return resp.StatusCode, ""
	}
	msg := fmt.Sprintf("webhook answered %d", resp.StatusCode)
	if s := bytes.TrimSpace(snippet); len(s) > 0 {
		msg += ": " + string(s)
	}
	return resp.StatusCode, msg
}

// DeadLetterInput names the notification whose last attempt failed.
type DeadLetterInput struct {
	ID    string
	Error string // the last attempt's error, as the workflow saw it
}

// DeadLetterNotification makes a pending notification dead after its last
// failed attempt, keeping the last error: the dead-letter record
// (`gpugov notifications --state dead`). It returns the state after the call.
func (a *Notifications) DeadLetterNotification(ctx context.Context, in *DeadLetterInput) (*DeliverResult, error) {
	if in == nil || in.ID == "" {
		return nil, invalidInput("dead-letter notification: ID is required")
	}
	st, err := a.d.Store.FinishNotification(ctx, in.ID, vocab.NotificationDead, in.Error, a.d.now())
	if err != nil {
		return nil, nonRetryable(err)
	}
	return &DeliverResult{State: st}, nil
}
