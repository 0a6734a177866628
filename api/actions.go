package api

import (
	"context"
	"errors"
	"io"
	"net/http"
	"unicode/utf8"

	"github.com/gin-gonic/gin"

	"github.com/gpugov/gpugov/internal/vocab"
	"github.com/gpugov/gpugov/store"
)

// The action flows a wait reason implies (docs/design.md §3, "Act on a
// wait"):
//
//	PUT   /v1/jobs/{id}/prerequisites/{name}  environment_not_ready: set a prerequisite ready or not
//	PATCH /v1/jobs/{id}                       no_matching_capacity, fragmented: amend the resource request
//
// Both are audited by the store with the token's name, before and after, and
// wake the scheduler so that the next cycle sees the change. A rejected
// request changes nothing.

// routePrerequisite is the gin full path of PUT …/prerequisites/{name}; an
// agent token may call it too (agentRoutes).
const routePrerequisite = "/v1/jobs/:id/prerequisites/:name"

// MaxPrerequisiteMessage bounds a prerequisite's message, in bytes, here and
// at submit (vocab.MaxPrerequisiteMessageLength).
const MaxPrerequisiteMessage = vocab.MaxPrerequisiteMessageLength

// PrerequisiteUpdate is the body of PUT /v1/jobs/{id}/prerequisites/{name}.
// Ready is required.
type PrerequisiteUpdate struct {
	Ready   *bool  `json:"ready"`
	Message string `json:"message,omitempty"`
}

// AmendRequest is the body of PATCH /v1/jobs/{id}: the whole new resource
// request, which replaces the job's (fields left out take their submission
// defaults, exactly as in POST /v1/jobs). Resources is required.
type AmendRequest struct {
	Resources *ResourceSpec `json:"resources"`
	// Reason is why, for the audit log; optional, at most
	// vocab.MaxReasonLength bytes.
	Reason string `json:"reason,omitempty"`
}

// DecodeAmendRequest reads the body of PATCH /v1/jobs/{id} strictly, as
// DecodeJobSpec reads a submission: unknown fields (named by their path,
// e.g. "resources.gpu_mili"), wrong types, trailing data and a missing
// resources object are 400 errors naming the field. The meaning of the
// resources is checked by the handler with ValidateJobSpec.
func DecodeAmendRequest(r io.Reader) (*AmendRequest, *Error) {
	var body AmendRequest
	if err := decodeStrict(r, &body, false); err != nil {
		return nil, err
	}
	if body.Resources == nil {
		return nil, newError(http.StatusBadRequest, CodeMalformed, "resources", "required: the new resource request")
	}
	if err := checkReason(body.Reason); err != nil {
		return nil, err
	}
	return &body, nil
}

// checkReason refuses a caller's free-text reason longer than
// vocab.MaxReasonLength bytes: a 422 naming `reason`. A 100 KB reason was
// copied into the audit log and a held job's wait detail.
func checkReason(reason string) *Error {
	if len(reason) > vocab.MaxReasonLength {
		return newError(http.StatusUnprocessableEntity, CodeInvalid, "reason", "at most %d bytes, got %d", vocab.MaxReasonLength, len(reason))
	}
	return nil
}

// setPrerequisite handles PUT /v1/jobs/:id/prerequisites/:name (the job's
// project, an agent of a node in the job's pool, an operator or an admin). 200 with the job; 400 a bad
// body; 404 no such job or prerequisite; 409 a job that is not pending.
func (s *Server) setPrerequisite(c *gin.Context) {
	ctx, cancel := s.storeCtx(c)
	defer cancel()
	job, ok := s.loadActionJob(ctx, c) // another project's job is 403 whatever the body
	if !ok {
		return
	}
	var body PrerequisiteUpdate
	if err := decodeStrict(c.Request.Body, &body, false); err != nil {
		writeError(c, err)
		return
	}
	switch {
	case body.Ready == nil:
		writeError(c, newError(http.StatusBadRequest, CodeMalformed, "ready", "required: true or false"))
		return
	case len(body.Message) > MaxPrerequisiteMessage:
		writeError(c, newError(http.StatusUnprocessableEntity, CodeInvalid, "message", "longer than %d bytes", MaxPrerequisiteMessage))
		return
	case !utf8.ValidString(body.Message):
		writeError(c, newError(http.StatusUnprocessableEntity, CodeInvalid, "message", "not valid UTF-8"))
		return
	}
	name := c.Param("name")
	changed, err := s.store.SetPrerequisite(ctx, job.ID, name, *body.Ready, body.Message, principal(c).Name)
	switch {
	case errors.Is(err, store.ErrNoPrerequisite):
		writeError(c, newError(http.StatusNotFound, CodeNotFound, "name", "job %s has no prerequisite %q", job.ID, name))
		return
	case err != nil:
		writeError(c, err)
		return
	}
	s.wakeAfterAction(c, job.ID, changed)
	s.answerJob(c, job.ID, http.StatusOK, "")
}

// amendJob handles PATCH /v1/jobs/:id (the job's project, an operator or an
// admin): the body's resources replace the job's request, validated exactly
// like a submission (DecodeJobSpec's strict decoding, ValidateJobSpec on the
// job's spec with the new resources). 200 with the job; 400/422 naming the
// field; 409 a job that is placed, running or final.
func (s *Server) amendJob(c *gin.Context) {
	ctx, cancel := s.storeCtx(c)
	defer cancel()
	job, ok := s.loadOwnedJob(ctx, c) // another project's job is 403 whatever the body
	if !ok {
		return
	}
	body, apiErr := DecodeAmendRequest(c.Request.Body)
	if apiErr != nil {
		writeError(c, apiErr)
		return
	}
	if !job.State.Pending() {
		writeError(c, newError(http.StatusConflict, CodeConflict, "", "job %s is %s; only a submitted or waiting job can be amended", job.ID, job.State))
		return
	}
	spec := specOf(job)
	spec.Resources = *body.Resources
	if errs := ValidateJobSpec(spec, func(name string) bool { return name == job.Queue }); len(errs) > 0 {
		writeError(c, invalid(errs))
		return
	}
	reason := body.Reason
	if reason == "" {
		reason = "resources amended through the API"
	}
	changed, err := s.store.AmendJob(ctx, job.ID, spec.Resources.Request(), principal(c).Name, reason)
	if err != nil {
		writeError(c, err)
		return
	}
	s.wakeAfterAction(c, job.ID, changed)
	s.answerJob(c, job.ID, http.StatusOK, "")
}

// loadActionJob loads the :id job for an action: an agent may act on any
// project's job in its node's pool (it reports the environment the pool's
// jobs depend on; another pool's job is 403), other roles as loadOwnedJob
// allows. On failure it has answered.
func (s *Server) loadActionJob(ctx context.Context, c *gin.Context) (*store.Job, bool) {
	if principal(c).Role != vocab.RoleAgent {
		return s.loadOwnedJob(ctx, c)
	}
	job, err := s.store.GetJob(ctx, c.Param("id"))
	if err != nil {
		writeError(c, jobLookupError(c.Param("id"), err))
		return nil, false
	}
	// An agent reports the environment of its own pool's jobs only: a job
	// waits for a prerequisite before it has a node, so the node's pool is
	// the nearest the agent can vouch for.
	ns, ok := s.nodeStore(c)
	if !ok {
		return nil, false
	}
	p := principal(c)
	pool, err := ns.NodePool(ctx, p.Node)
	switch {
	case errors.Is(err, store.ErrNotFound):
		pool = ""
	case err != nil:
		writeError(c, err)
		return nil, false
	}
	if pool != job.Request.Pool {
		writeError(c, newError(http.StatusForbidden, CodeForbidden, "",
			"an agent token of node %q may set prerequisites only of jobs in its node's pool (job %s is in pool %q)", p.Node, job.ID, job.Request.Pool))
		return nil, false
	}
	return job, true
}

// wakeAfterAction asks the scheduler for a cycle when an action changed the job.
func (s *Server) wakeAfterAction(c *gin.Context, jobID string, changed bool) {
	if !changed {
		return
	}
	wctx, cancel := s.workflowCtx(c)
	defer cancel()
	s.notifyScheduler(wctx, jobID)
}

// specOf rebuilds the submission spec of a stored job, the input
// ValidateJobSpec checks an amendment against.
func specOf(j *store.Job) *JobSpec {
	spec := &JobSpec{Project: j.Project, Queue: j.Queue, Resources: resourcesFromRequest(j.Request),
		Command: j.Command, Env: j.Env, RunSeconds: j.RunSeconds, Protected: j.Protected, Hold: j.Held,
		Recovery: RecoverySpec{Checkpointable: j.Recovery.Checkpointable, CheckpointIntervalSeconds: j.Recovery.CheckpointIntervalSeconds,
			TotalSteps: j.Recovery.TotalSteps}}
	for _, p := range j.Prerequisites {
		spec.Prerequisites = append(spec.Prerequisites, PrerequisiteSpec{Name: p.Name, Ready: p.Ready, Message: p.Message})
	}
	return spec
}
