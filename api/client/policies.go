package client

import (
	"context"
	"net/http"
	"net/url"
	"strconv"

	"github.com/gpugov/gpugov/api"
)

// ApplyPolicy sends the text of a policy file (file names it in error
// messages) to POST /v1/policies (admin) and returns the applied version
// with its diff against the version active before. A file the loader
// refuses is a 4xx *Error whose Body.Details lists every problem as
// "file:line: field: what is wrong".
func (c *Client) ApplyPolicy(ctx context.Context, text, file, reason string) (*api.PolicyApplied, error) {
	var out api.PolicyApplied
	_, err := c.do(ctx, http.MethodPost, "/v1/policies", nil, nil, api.PolicyApply{Policy: text, Reason: reason, File: file}, &out)
	return &out, err
}

// PolicyVersions lists the stored policy versions, newest first, at most
// limit (0: the server's default) (GET /v1/policies, operator or admin).
func (c *Client) PolicyVersions(ctx context.Context, limit int) (*api.PolicyVersionList, error) {
	q := url.Values{}
	if limit > 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	var out api.PolicyVersionList
	_, err := c.do(ctx, http.MethodGet, "/v1/policies", q, nil, nil, &out)
	return &out, err
}

// PolicyVersion returns one version by hash or unique prefix of at least 8
// hex digits (GET /v1/policies/{hash}, operator or admin).
func (c *Client) PolicyVersion(ctx context.Context, hash string) (*api.PolicyVersionDetail, error) {
	var out api.PolicyVersionDetail
	_, err := c.do(ctx, http.MethodGet, "/v1/policies/"+url.PathEscape(hash), nil, nil, nil, &out)
	return &out, err
}

// PolicyDiff returns what differs from version a to version b, by variable
// group (GET /v1/policies/{a}/diff/{b}, operator or admin).
func (c *Client) PolicyDiff(ctx context.Context, a, b string) (*api.PolicyDiff, error) {
	var out api.PolicyDiff
	_, err := c.do(ctx, http.MethodGet, "/v1/policies/"+url.PathEscape(a)+"/diff/"+url.PathEscape(b), nil, nil, nil, &out)
	return &out, err
}
