package client

import (
	"context"
	"net/http"
	"net/url"
	"strconv"

	"github.com/gpugov/gpugov/api"
)

// PreemptionOptions filters Preemptions; empty fields match everything.
type PreemptionOptions struct {
	State, Outcome, Pool, Job string
	Kind                      string // preemption or drill
	Limit                     int
}

// Preemptions returns preemption records, newest first.
func (c *Client) Preemptions(ctx context.Context, o PreemptionOptions) (*api.PreemptionList, error) {
	q := query(map[string]string{"state": o.State, "outcome": o.Outcome, "pool": o.Pool, "job": o.Job, "kind": o.Kind}, o.Limit)
	var out api.PreemptionList
	_, err := c.do(ctx, http.MethodGet, "/v1/preemptions", q, nil, nil, &out)
	return &out, err
}

// Preemption returns one preemption record.
func (c *Client) Preemption(ctx context.Context, id string) (*api.Preemption, error) {
	var out api.Preemption
	_, err := c.do(ctx, http.MethodGet, "/v1/preemptions/"+url.PathEscape(id), nil, nil, nil, &out)
	return &out, err
}

// ReclaimOptions filters Reclaims; empty fields match everything.
type ReclaimOptions struct {
	Class, Mode, Pool, State string
	Limit                    int
}

// Reclaims returns the reclaim report: reclaims newest first and their totals.
func (c *Client) Reclaims(ctx context.Context, o ReclaimOptions) (*api.ReclaimReport, error) {
	q := query(map[string]string{"class": o.Class, "mode": o.Mode, "pool": o.Pool, "state": o.State}, o.Limit)
	var out api.ReclaimReport
	_, err := c.do(ctx, http.MethodGet, "/v1/reclaims", q, nil, nil, &out)
	return &out, err
}

// ConfirmReclaim approves a reclaim's release (operator or admin token);
// reason goes to the audit log. The answer is the reclaim before the
// workflow records the decision.
func (c *Client) ConfirmReclaim(ctx context.Context, id, reason string) (*api.Reclaim, error) {
	return c.decideReclaim(ctx, id, "confirm", reason)
}

// KeepReclaim keeps an allocation a reclaim would release (the owning
// project's token), recording a dispute; reason goes to the audit log.
func (c *Client) KeepReclaim(ctx context.Context, id, reason string) (*api.Reclaim, error) {
	return c.decideReclaim(ctx, id, "keep", reason)
}

func (c *Client) decideReclaim(ctx context.Context, id, verb, reason string) (*api.Reclaim, error) {
	var out api.Reclaim
	_, err := c.do(ctx, http.MethodPost, "/v1/reclaims/"+url.PathEscape(id)+"/"+verb, nil, nil, api.ActionRequest{Reason: reason}, &out)
	return &out, err
}

// query builds a query string from the non-empty values and a positive limit.
func query(values map[string]string, limit int) url.Values {
	q := url.Values{}
	for k, v := range values {
		if v != "" {
			q.Set(k, v)
		}
	}
	if limit > 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	return q
}

// NotificationOptions filters Notifications; empty fields match everything
// (a submitter token sees only its own project's).
type NotificationOptions struct {
	Project, Job, State string
	Limit               int
}

// Notifications returns the notification outbox, newest first
// (GET /v1/notifications).
func (c *Client) Notifications(ctx context.Context, o NotificationOptions) (*api.NotificationList, error) {
	q := query(map[string]string{"project": o.Project, "job": o.Job, "state": o.State}, o.Limit)
	var out api.NotificationList
	_, err := c.do(ctx, http.MethodGet, "/v1/notifications", q, nil, nil, &out)
	return &out, err
}
