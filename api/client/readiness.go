package client

import (
	"context"
	"net/http"
	"net/url"
	"strconv"

	"github.com/gpugov/gpugov/api"
)

// Drill starts a resume drill of job id (POST /v1/jobs/{id}/drill; an
// operator's or admin's token) with reason ("" lets the server say
// "resume drill through the API"). It returns the drill's record and the
// status: 201 when its workflow started, 202 when the start was deferred
// (the answer's note says so). A refusal is *Error: 409 naming why (not
// running, not checkpointable, protected, already in a preemption or
// drill, inside a protection window), 404 an unknown job, 403 a submitter.
func (c *Client) Drill(ctx context.Context, id, reason string) (*api.DrillStarted, int, error) {
	var out api.DrillStarted
	status, err := c.do(ctx, http.MethodPost, "/v1/jobs/"+url.PathEscape(id)+"/drill", nil, nil, api.ActionRequest{Reason: reason}, &out)
	return &out, status, err
}

// PoolReadiness returns pool's readiness with its numbers and its latest
// history stage changes (GET /v1/pools/{pool}/readiness; history 0 means
// the server's default, 10). An unknown pool is *Error with status 404.
func (c *Client) PoolReadiness(ctx context.Context, pool string, history int) (*api.PoolReadiness, error) {
	q := url.Values{}
	if history > 0 {
		q.Set("history", strconv.Itoa(history))
	}
	var out api.PoolReadiness
	_, err := c.do(ctx, http.MethodGet, "/v1/pools/"+url.PathEscape(pool)+"/readiness", q, nil, nil, &out)
	return &out, err
}

// ApplyPolicyWith is ApplyPolicy with the whole request body, its
// overrides included (POST /v1/policies; an admin's token). A stage
// widening whose pool readiness fails is *Error with status 422 and code
// not_ready, its details listing the failed checks, unless
// p.OverrideReadiness.
func (c *Client) ApplyPolicyWith(ctx context.Context, p api.PolicyApply) (*api.PolicyApplied, error) {
	var out api.PolicyApplied
	_, err := c.do(ctx, http.MethodPost, "/v1/policies", nil, nil, p, &out)
	return &out, err
}
