package client

import (
	"context"
	"net/http"
	"net/url"
	"time"

	"github.com/gpugov/gpugov/api"
)

// AuditOptions filters Audit; empty fields match everything. Since and
// Until bound the entries' times (Since inclusive, Until exclusive); Cursor
// is a page's next_cursor.
type AuditOptions struct {
	Subject, Action, Actor string
	Since, Until           time.Time
	Limit                  int
	Cursor                 string
}

// Audit returns one page of the audit log, newest first (GET /v1/audit;
// operator and admin tokens).
func (c *Client) Audit(ctx context.Context, o AuditOptions) (*api.AuditList, error) {
	v := map[string]string{"subject": o.Subject, "action": o.Action, "actor": o.Actor, "cursor": o.Cursor}
	if !o.Since.IsZero() {
		v["since"] = o.Since.UTC().Format(time.RFC3339Nano)
	}
	if !o.Until.IsZero() {
		v["until"] = o.Until.UTC().Format(time.RFC3339Nano)
	}
	var out api.AuditList
	_, err := c.do(ctx, http.MethodGet, "/v1/audit", query(v, o.Limit), nil, nil, &out)
	return &out, err
}

// Complete declares a placed or running job's work done, cleanup pending
// (POST /v1/jobs/{id}/complete); reason goes to the audit log.
func (c *Client) Complete(ctx context.Context, id, reason string) (*api.JobCompletion, error) {
	var out api.JobCompletion
	_, err := c.do(ctx, http.MethodPost, "/v1/jobs/"+url.PathEscape(id)+"/complete", nil, nil, api.ActionRequest{Reason: reason}, &out)
	return &out, err
}

// DisputeReclaim disputes a released reclaim (the owning project's token;
// reason required), a false reclaim unless an operator rejects it.
func (c *Client) DisputeReclaim(ctx context.Context, id, reason string) (*api.Reclaim, error) {
	return c.decideReclaim(ctx, id, "dispute", reason)
}

// RejectReclaimDispute rejects a reclaim's dispute (operator or admin token;
// reason required).
func (c *Client) RejectReclaimDispute(ctx context.Context, id, reason string) (*api.Reclaim, error) {
	return c.decideReclaim(ctx, id, "reject-dispute", reason)
}
