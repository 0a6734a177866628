package client

import (
	"context"
	"net/http"
	"net/url"

	"github.com/gpugov/gpugov/api"
)

// Quotas returns every quota (of pool, when not "") with used, borrowed and
// lent out, in milli-GPU (GET /v1/quotas).
func (c *Client) Quotas(ctx context.Context, pool string) (*api.QuotaList, error) {
	q := url.Values{}
	if pool != "" {
		q.Set("pool", pool)
	}
	var out api.QuotaList
	_, err := c.do(ctx, http.MethodGet, "/v1/quotas", q, nil, nil, &out)
	return &out, err
}

// SetQuota sets a project's quota in a pool (PUT /v1/quotas/{pool}/{project},
// admin) and returns what changed. Bad values are a 422 *Error naming the
// field; a token that is not an admin's a 403.
func (c *Client) SetQuota(ctx context.Context, pool, project string, nominalMilli, borrowingLimitMilli int64, reason string) (*api.QuotaChange, error) {
	var out api.QuotaChange
	_, err := c.do(ctx, http.MethodPut, "/v1/quotas/"+url.PathEscape(pool)+"/"+url.PathEscape(project), nil, nil,
		api.QuotaUpdate{NominalMilli: &nominalMilli, BorrowingLimitMilli: &borrowingLimitMilli, Reason: reason}, &out)
	return &out, err
}

// SetQuotaOverride is SetQuota with override_reason: while a policy
// experiment about quotas holds a pool, the PUT is a 409 *Error naming it
// unless overrideReason is given (then the quota is set, ending the
// experiment, and the override is in the set_quota audit evidence).
// overrideReason "" is SetQuota.
func (c *Client) SetQuotaOverride(ctx context.Context, pool, project string, nominalMilli, borrowingLimitMilli int64, reason, overrideReason string) (*api.QuotaChange, error) {
	var out api.QuotaChange
	_, err := c.do(ctx, http.MethodPut, "/v1/quotas/"+url.PathEscape(pool)+"/"+url.PathEscape(project), nil, nil,
		api.QuotaUpdate{NominalMilli: &nominalMilli, BorrowingLimitMilli: &borrowingLimitMilli, Reason: reason,
			OverrideReason: overrideReason}, &out)
	return &out, err
}

// RequestQuota files a quota request (POST /v1/quota-requests) and returns
// it, pending.
func (c *Client) RequestQuota(ctx context.Context, r api.NewQuotaRequest) (*api.QuotaRequest, error) {
	var out api.QuotaRequest
	_, err := c.do(ctx, http.MethodPost, "/v1/quota-requests", nil, nil, r, &out)
	return &out, err
}

// QuotaRequests lists quota requests, newest first (GET /v1/quota-requests),
// filtered by state ("" for all).
func (c *Client) QuotaRequests(ctx context.Context, state string) (*api.QuotaRequestList, error) {
	q := url.Values{}
	if state != "" {
		q.Set("state", state)
	}
	var out api.QuotaRequestList
	_, err := c.do(ctx, http.MethodGet, "/v1/quota-requests", q, nil, nil, &out)
	return &out, err
}

// DecideQuotaRequest approves (approve true) or denies a quota request with a
// comment (POST /v1/quota-requests/{id}/approve or /deny, admin) and returns
// it decided; an approval carries its quota change.
func (c *Client) DecideQuotaRequest(ctx context.Context, id string, approve bool, comment string) (*api.QuotaRequest, error) {
	verb := "/deny"
	if approve {
		verb = "/approve"
	}
	var out api.QuotaRequest
	_, err := c.do(ctx, http.MethodPost, "/v1/quota-requests/"+url.PathEscape(id)+verb, nil, nil, api.QuotaDecision{Comment: comment}, &out)
	return &out, err
}

// ApproveQuotaRequestOverride approves a quota request with a comment and
// override_reason (SetQuotaOverride's; overrideReason "" is
// DecideQuotaRequest's approval).
func (c *Client) ApproveQuotaRequestOverride(ctx context.Context, id, comment, overrideReason string) (*api.QuotaRequest, error) {
	var out api.QuotaRequest
	_, err := c.do(ctx, http.MethodPost, "/v1/quota-requests/"+url.PathEscape(id)+"/approve", nil, nil,
		api.QuotaDecision{Comment: comment, OverrideReason: overrideReason}, &out)
	return &out, err
}
