package client

import (
	"context"
	"net/http"
	"net/url"

	"github.com/gpugov/gpugov/api"
)

// SetPrerequisite sets the named prerequisite of a pending job ready or not
// ready with message (PUT /v1/jobs/{id}/prerequisites/{name}) and returns the
// job after the change. An unknown prerequisite is a 404 *Error with field
// "name"; a job that is not pending a 409.
func (c *Client) SetPrerequisite(ctx context.Context, id, name string, ready bool, message string) (*api.Job, error) {
	var job api.Job
	_, err := c.do(ctx, http.MethodPut, "/v1/jobs/"+url.PathEscape(id)+"/prerequisites/"+url.PathEscape(name), nil, nil,
		api.PrerequisiteUpdate{Ready: &ready, Message: message}, &job)
	return &job, err
}

// Amend replaces a waiting job's resource request (PATCH /v1/jobs/{id}) and
// returns the job after the change; reason goes to the audit log. Invalid
// resources are a 422 *Error naming the field; a placed, running or final job
// a 409.
func (c *Client) Amend(ctx context.Context, id string, resources api.ResourceSpec, reason string) (*api.Job, error) {
	var job api.Job
	_, err := c.do(ctx, http.MethodPatch, "/v1/jobs/"+url.PathEscape(id), nil, nil,
		api.AmendRequest{Resources: &resources, Reason: reason}, &job)
	return &job, err
}
