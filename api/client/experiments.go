package client

import (
	"context"
	"net/http"
	"net/url"
	"strconv"

	"github.com/gpugov/gpugov/api"
	"github.com/gpugov/gpugov/internal/experiment"
)

// CreateExperiment creates a policy experiment (POST /v1/experiments, admin)
// and returns it, stored with its workflow started. An invalid spec is a 400
// *Error whose Body.Details lists every problem; an active experiment in one
// of the pools a 409 naming it.
func (c *Client) CreateExperiment(ctx context.Context, spec *experiment.Spec) (*api.Experiment, error) {
	var out api.Experiment
	_, err := c.do(ctx, http.MethodPost, "/v1/experiments", nil, nil, spec, &out)
	return &out, err
}

// Experiments lists experiments, newest first (GET /v1/experiments); limit 0
// is the server's default.
func (c *Client) Experiments(ctx context.Context, limit int) (*api.ExperimentList, error) {
	q := url.Values{}
	if limit > 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	var out api.ExperimentList
	_, err := c.do(ctx, http.MethodGet, "/v1/experiments", q, nil, nil, &out)
	return &out, err
}

// Experiment returns one experiment with its timeline and outcome (GET
// /v1/experiments/{id}).
func (c *Client) Experiment(ctx context.Context, id string) (*api.ExperimentDetail, error) {
	var out api.ExperimentDetail
	_, err := c.do(ctx, http.MethodGet, "/v1/experiments/"+url.PathEscape(id), nil, nil, nil, &out)
	return &out, err
}

// DecideExperiment sends action (api.ActionPromote or api.ActionAbort) with
// a reason to an experiment (POST /v1/experiments/{id}/promote or /abort,
// admin) and returns the experiment as it was when its workflow was
// signalled; a state that does not allow it is a 409 *Error.
func (c *Client) DecideExperiment(ctx context.Context, id, action, reason string) (*api.Experiment, error) {
	var out api.Experiment
	_, err := c.do(ctx, http.MethodPost, "/v1/experiments/"+url.PathEscape(id)+"/"+url.PathEscape(action), nil, nil,
		api.ExperimentDecision{Reason: reason}, &out)
	return &out, err
}

// ApplyPolicyOverride is ApplyPolicy with override_reason: while a policy
// experiment holds a pool, POST /v1/policies is a 409 *Error naming it
// unless overrideReason is given (then the version is applied, ending the
// experiment, and the override is in the activation's audit evidence).
// overrideReason "" is ApplyPolicy.
func (c *Client) ApplyPolicyOverride(ctx context.Context, text, file, reason, overrideReason string) (*api.PolicyApplied, error) {
	var out api.PolicyApplied
	_, err := c.do(ctx, http.MethodPost, "/v1/policies", nil, nil,
		api.PolicyApply{Policy: text, Reason: reason, File: file, OverrideReason: overrideReason}, &out)
	return &out, err
}
