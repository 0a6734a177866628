package api

import (
	"context"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/gin-gonic/gin"

	"github.com/gpugov/gpugov/internal/scheduling"
	"github.com/gpugov/gpugov/internal/vocab"
	"github.com/gpugov/gpugov/store"
)

// IdempotencyKeyHeader names the submit header that makes retries safe.
const IdempotencyKeyHeader = "Idempotency-Key"

// maxIdempotencyKey bounds the header's length, in bytes.
const maxIdempotencyKey = 255

// Notes returned with a 202 or when a follow-up call failed after the change
// was committed.
const (
	noteStartDeferred = "the job is stored but its workflow could not be started now; " +
		"the reconciler will start it (or retry this request with the same Idempotency-Key)"
	noteCancelDeferred = "the cancellation is stored but the job workflow could not be signalled now; " +
		"it acts on the stored cancellation when it next reads the job"
)

// submitJob handles POST /v1/jobs. Order matters for invariant 3: validate
// (nothing stored on a rejection) → commit the row → start the workflow →
// answer 201 (new), 200 (same Idempotency-Key again) or 202 (committed, start
// deferred to the reconciler). With WithStartQueue a new job's start is
// queued and the answer is 201 at once; a repeated key still starts its
// workflow in the request, so a client's retry confirms the start.
func (s *Server) submitJob(c *gin.Context) {
	p := principal(c)
	key := c.GetHeader(IdempotencyKeyHeader)
	if len(key) > maxIdempotencyKey {
		writeError(c, newError(http.StatusBadRequest, CodeMalformed, IdempotencyKeyHeader, "longer than %d bytes", maxIdempotencyKey))
		return
	}
	spec, apiErr := DecodeJobSpec(c.Request.Body)
	if apiErr == nil {
		apiErr = AuthorizeJobSpec(spec, p)
	}
	if apiErr != nil {
		writeError(c, apiErr)
		return
	}
	ctx, cancel := s.storeCtx(c)
	defer cancel()
	queues, err := s.store.ListQueues(ctx)
	if err != nil {
		writeError(c, err)
		return
	}
	queue, known := findQueue(queues, spec.Queue)
	if errs := ValidateJobSpec(spec, func(string) bool { return known }); len(errs) > 0 {
		writeError(c, invalid(errs))
		return
	}
	nj := newJob(spec, p, queue, key)
	job, created, err := s.store.CreateJob(ctx, nj)
	if err != nil {
		writeError(c, err)
		return
	}
	if !created {
		if field, differs := sameSubmission(nj, job); differs {
			writeError(c, newError(http.StatusConflict, CodeConflict, IdempotencyKeyHeader,
				"key already used for job %s, whose %s differs from this request", job.ID, field))
			return
		}
	}
	c.JSON(s.startJobWorkflow(c, job, created))
}

// startJobWorkflow starts (or, for a retried submit, re-starts idempotently)
// the job's workflow and returns the status and body to answer with.
func (s *Server) startJobWorkflow(c *gin.Context, job *store.Job, created bool) (int, Job) {
	out := jobFromStore(job, nil)
	if created && s.startQueue != nil && s.startQueue.Offer(job.ID, job.WorkflowAttributes()) {
		return http.StatusCreated, out
	}
	wctx, cancel := s.workflowCtx(c)
	defer cancel()
	attrs := job.WorkflowAttributes()
	if err := s.workflows.StartJob(wctx, job.ID, attrs); err != nil {
		s.log.Warn("api: job stored, workflow start deferred to the reconciler", "job", job.ID, "err", err)
		out.Note = noteStartDeferred
		return http.StatusAccepted, out
	}
	s.notifyScheduler(wctx, job.ID)
	if !created {
		return http.StatusOK, out
	}
	return http.StatusCreated, out
}

// notifyScheduler asks for a cycle now. A failure is only logged: the
// scheduler's timer runs a cycle anyway, so the job is merely seen later.
func (s *Server) notifyScheduler(ctx context.Context, jobID string) {
	if err := s.workflows.NotifySubmitted(ctx, jobID); err != nil {
		s.log.Warn("api: scheduler not signalled; its timer will pick the change up", "job", jobID, "err", err)
	}
}

// unknownQueue is the 422 naming field `queue` for a queue name that is not
// among the configured queues qs, listing them.
func unknownQueue(name string, qs []scheduling.Queue) *Error {
	known := make([]string, len(qs))
	for i, q := range qs {
		known[i] = q.Name
	}
	return newError(http.StatusUnprocessableEntity, CodeInvalid, "queue", "unknown queue %q (want one of %s; GET /v1/queues lists them)",
		name, strings.Join(known, ", "))
}

// findQueue returns the named queue and whether it exists.
func findQueue(qs []scheduling.Queue, name string) (scheduling.Queue, bool) {
	for _, q := range qs {
		if q.Name == name {
			return q, true
		}
	}
	return scheduling.Queue{}, false
}

// NewStoreJob is the store submission POST /v1/jobs commits for spec
// (validated by ValidateJobSpec) from principal p into queue q, without an
// idempotency key: `gpugov load --backlog` stores its jobs with it through
// store.CreateJobs, so that its rows are those the API would write.
func NewStoreJob(spec *JobSpec, p Principal, q scheduling.Queue) *store.NewJob {
	return newJob(spec, p, q, "")
}

// newJob converts a validated spec into the store's submission. The tier is
// the queue's; the project defaults to the token's.
func newJob(spec *JobSpec, p Principal, q scheduling.Queue, key string) *store.NewJob {
	project := spec.Project
	if project == "" {
		project = p.Project
	}
	nj := &store.NewJob{
		Project: project, Queue: q.Name, Tier: q.Tier, Request: spec.Resources.Request(),
		Recovery: scheduling.RecoveryEvidence{
			Checkpointable:            spec.Recovery.Checkpointable,
			CheckpointIntervalSeconds: spec.Recovery.CheckpointIntervalSeconds,
			Profile:                   store.ProfileOf(project, spec.Recovery.Profile, spec.Command),
			TotalSteps:                spec.Recovery.TotalSteps,
		},
		Protected: spec.Protected, Held: spec.Hold, Command: spec.Command, Env: spec.Env,
		RunSeconds: spec.RunSeconds, IdempotencyKey: key, Submitter: p.Name,
	}
	for _, pr := range spec.Prerequisites {
		nj.Prerequisites = append(nj.Prerequisites, scheduling.Prerequisite{Name: pr.Name, Ready: pr.Ready, Message: pr.Message})
	}
	return nj
}

// sameSubmission compares a retried submission with the job its key already
// names, on what decides scheduling and execution, and returns the first field
// that differs. A key reused for a different job is a client bug that must not
// silently return the old job.
func sameSubmission(nj *store.NewJob, j *store.Job) (field string, differs bool) {
	a, b := nj.Request, j.Request
	checks := []struct {
		field string
		same  bool
	}{
		{"queue", nj.Queue == j.Queue},
		{"resources.pool", a.Pool == b.Pool},
		{"resources.gpus", a.GPUs == b.GPUs},
		{"resources.gpu_milli", a.MilliPerDevice() == b.MilliPerDevice()},
		{"resources.gpu_memory_mib", a.GPUMemoryMiB == b.GPUMemoryMiB},
		{"resources.gpu_models", slices.Equal(a.GPUModels, b.GPUModels)},
		{"resources.topology", normTopology(a.Topology) == normTopology(b.Topology)},
		{"resources.node_selector", maps.Equal(a.NodeSelector, b.NodeSelector)},
		{"command", slices.Equal(nj.Command, j.Command)},
		{"run_seconds", nj.RunSeconds == j.RunSeconds},
		{"recovery.profile", nj.Recovery.Profile == j.Recovery.Profile},
		{"recovery.total_steps", nj.Recovery.TotalSteps == j.Recovery.TotalSteps},
	}
	for _, ch := range checks {
		if !ch.same {
			return ch.field, true
		}
	}
	return "", false
}

func normTopology(t scheduling.Topology) scheduling.Topology {
	if t == "" {
		return scheduling.TopologyAny
	}
	return t
}

// loadOwnedJob fetches the :id job and checks that the caller may see it; on
// failure it has already answered.
func (s *Server) loadOwnedJob(ctx context.Context, c *gin.Context) (*store.Job, bool) {
	job, err := s.store.GetJob(ctx, c.Param("id"))
	if err != nil {
		writeError(c, jobLookupError(c.Param("id"), err))
		return nil, false
	}
	if p := principal(c); !p.owns(job.Project) {
		writeError(c, forbiddenProject(p, job.Project))
		return nil, false
	}
	return job, true
}

// getJob handles GET /v1/jobs/:id: the job with its current wait (reason,
// detail, since), the last cycle's explanation and the last scheduling action.
func (s *Server) getJob(c *gin.Context) {
	ctx, cancel := s.storeCtx(c)
	defer cancel()
	job, ok := s.loadOwnedJob(ctx, c)
	if !ok {
		return
	}
	wait, err := s.currentWait(ctx, job)
	if err != nil {
		writeError(c, err)
		return
	}
	out := jobFromStore(job, wait)
	last, err := s.store.LastDecision(ctx, job)
	if err != nil {
		writeError(c, err)
		return
	}
	out.LastDecision = lastDecisionFromStore(last)
	if job.StartedAt != nil { // a job that never ran has no run to read
		run, err := s.store.LastRun(ctx, job.ID)
		if err != nil {
			writeError(c, err)
			return
		}
		out.LastRun = runFromStore(run)
	}
	c.JSON(http.StatusOK, out)
}

// currentWait returns the open wait event of a pending job, or nil.
func (s *Server) currentWait(ctx context.Context, job *store.Job) (*store.WaitEvent, error) {
	if !job.State.Pending() {
		return nil, nil
	}
	events, err := s.store.JobWaitEvents(ctx, job.ID)
	if err != nil {
		return nil, err
	}
	if n := len(events); n > 0 && events[n-1].EndedAt == nil {
		return &events[n-1], nil
	}
	return nil, nil
}

// jobEvents handles GET /v1/jobs/:id/events: every wait event, oldest
// first, with the job's why record (submit, waiting since, explanation, last
// scheduling action).
func (s *Server) jobEvents(c *gin.Context) {
	ctx, cancel := s.storeCtx(c)
	defer cancel()
	job, ok := s.loadOwnedJob(ctx, c)
	if !ok {
		return
	}
	events, err := s.store.JobWaitEvents(ctx, job.ID)
	if err != nil {
		writeError(c, err)
		return
	}
	last, err := s.store.LastDecision(ctx, job)
	if err != nil {
		writeError(c, err)
		return
	}
	now := s.now()
	out := WaitEventList{JobID: job.ID, State: job.State, SubmittedAt: job.SubmitTime,
		LastDecision: lastDecisionFromStore(last), Events: make([]WaitEvent, 0, len(events))}
	if job.State.Pending() {
		since := job.WaitingSince
		out.WaitingSince = &since
	}
	if job.Explanation != nil {
		out.Explanation = explanationFromStore(job.Explanation, job.Request.Pool)
	}
	for _, e := range events {
		out.Events = append(out.Events, waitEventFromStore(e, now))
	}
	c.JSON(http.StatusOK, out)
}

// decodeAction reads the optional {"reason"} body of cancel, hold and
// release; a reason longer than vocab.MaxReasonLength bytes is a 422.
func decodeAction(c *gin.Context) (ActionRequest, bool) {
	var req ActionRequest
	if err := decodeStrict(c.Request.Body, &req, true); err != nil {
		writeError(c, err)
		return req, false
	}
	if err := checkReason(req.Reason); err != nil {
		writeError(c, err)
		return req, false
	}
	return req, true
}

// cancelJob handles POST /v1/jobs/:id/cancel (owner or operator). The store
// records the cancellation and its audit entry first, then the job workflow is
// signalled; if the signal fails the answer is 202 with a note.
func (s *Server) cancelJob(c *gin.Context) {
	req, ok := decodeAction(c)
	if !ok {
		return
	}
	ctx, cancel := s.storeCtx(c)
	defer cancel()
	job, ok := s.loadOwnedJob(ctx, c)
	if !ok {
		return
	}
	actor, reason := principal(c).Name, actionReason(req, "cancelled")
	if err := s.store.CancelJob(ctx, job.ID, actor, reason); err != nil {
		writeError(c, err)
		return
	}
	status, note := http.StatusOK, ""
	wctx, wcancel := s.workflowCtx(c)
	defer wcancel()
	if err := s.workflows.CancelJob(wctx, job.ID, job.WorkflowAttributes(), actor, reason); err != nil {
		s.log.Warn("api: cancel stored, workflow not signalled", "job", job.ID, "err", err)
		status, note = http.StatusAccepted, noteCancelDeferred
	}
	s.answerJob(c, job.ID, status, note)
}

// holdJob handles POST /v1/jobs/:id/hold (owner or operator).
func (s *Server) holdJob(c *gin.Context) { s.setHold(c, true) }

// releaseJob handles POST /v1/jobs/:id/release (owner or operator).
func (s *Server) releaseJob(c *gin.Context) { s.setHold(c, false) }

// setHold holds or releases the :id job; the store audits it. The scheduler is
// asked for a cycle so that the reason changes promptly. A hold of a job
// already held (or a release of one not held) is idempotent, as Slurm's
// scontrol hold: 200 with the job and noteHoldUnchanged or
// noteReleaseUnchanged, audited with changed=false, and no cycle asked. A
// hold or release without a reason is allowed; its audit reason says none
// was given (docs/design.md §1 "Hold and release").
func (s *Server) setHold(c *gin.Context, held bool) {
	req, ok := decodeAction(c)
	if !ok {
		return
	}
	ctx, cancel := s.storeCtx(c)
	defer cancel()
	job, ok := s.loadOwnedJob(ctx, c)
	if !ok {
		return
	}
	verb, same := "released", noteReleaseUnchanged
	if held {
		verb, same = "held", noteHoldUnchanged
	}
	reason := strings.TrimSpace(req.Reason)
	if reason == "" {
		reason = verb + " through the API, no reason given"
	}
	changed, err := s.store.SetHold(ctx, job.ID, held, principal(c).Name, reason)
	if err != nil {
		writeError(c, err)
		return
	}
	if !changed {
		s.answerJob(c, job.ID, http.StatusOK, same)
		return
	}
	wctx, wcancel := s.workflowCtx(c)
	defer wcancel()
	s.notifyScheduler(wctx, job.ID)
	s.answerJob(c, job.ID, http.StatusOK, "")
}

// The notes of a hold or release that changed nothing (Job.Note).
const (
	noteHoldUnchanged    = "already held: nothing changed (the request is audited)"
	noteReleaseUnchanged = "not held: nothing changed (the request is audited)"
)

// actionReason is the audit reason: the caller's, or a default naming the API.
func actionReason(req ActionRequest, verb string) string {
	if r := strings.TrimSpace(req.Reason); r != "" {
		return r
	}
	return verb + " through the API"
}

// answerJob re-reads the job after a change and answers with it, under a
// store deadline of its own: the caller's may already be spent by the
// Temporal call in between (a signal can take seconds on a loaded server;
// `make load` saw cancels answered 503 "get job: context deadline exceeded"
// after the cancel itself was stored, docs/design.md §8 "Sustained load").
func (s *Server) answerJob(c *gin.Context, id string, status int, note string) {
	ctx, cancel := s.storeCtx(c)
	defer cancel()
	job, err := s.store.GetJob(ctx, id)
	if err != nil {
		writeError(c, jobLookupError(id, err))
		return
	}
	wait, err := s.currentWait(ctx, job)
	if err != nil {
		writeError(c, err)
		return
	}
	out := jobFromStore(job, wait)
	out.Note = note
	c.JSON(status, out)
}

// listJobs handles GET /v1/jobs?project=&queue=&state=&reason=&limit=&cursor=.
// A submitter's listing is always limited to its own project. A queue that is
// not configured is a 422 naming `queue` (as an unknown state is); a project
// with no jobs is an empty list.
func (s *Server) listJobs(c *gin.Context) {
	f, apiErr := jobFilter(c, principal(c))
	if apiErr != nil {
		writeError(c, apiErr)
		return
	}
	ctx, cancel := s.storeCtx(c)
	defer cancel()
	if f.Queue != "" {
		queues, err := s.store.ListQueues(ctx)
		if err != nil {
			writeError(c, err)
			return
		}
		if _, known := findQueue(queues, f.Queue); !known {
			writeError(c, unknownQueue(f.Queue, queues))
			return
		}
	}
	jobs, next, err := s.store.ListJobs(ctx, f)
	if err != nil {
		writeError(c, err)
		return
	}
	out := JobList{Jobs: make([]Job, 0, len(jobs)), NextCursor: next}
	for i := range jobs {
		out.Jobs = append(out.Jobs, jobFromStore(&jobs[i], nil))
	}
	c.JSON(http.StatusOK, out)
}

// jobFilter reads and checks the list query parameters.
func jobFilter(c *gin.Context, p Principal) (store.JobFilter, *Error) {
	f := store.JobFilter{
		Project: c.Query("project"), Queue: c.Query("queue"), State: vocab.JobState(c.Query("state")),
		Reason: vocab.WaitReason(c.Query("reason")), AfterID: c.Query("cursor"),
	}
	switch {
	case !p.Role.SeesAllProjects() && f.Project != "" && f.Project != p.Project:
		return f, forbiddenProject(p, f.Project)
	case !p.Role.SeesAllProjects():
		f.Project = p.Project
	}
	if f.AfterID != "" && !store.IsJobID(f.AfterID) {
		return f, newError(http.StatusBadRequest, CodeMalformed, "cursor", "not a cursor from next_cursor: %q", f.AfterID)
	}
	if f.State != "" && !f.State.Valid() {
		return f, newError(http.StatusUnprocessableEntity, CodeInvalid, "state", "unknown state %q (want one of %s)", f.State, strings.Join(names(vocab.JobStates), ", "))
	}
	if f.Reason != "" && !slices.Contains(vocab.WaitReasons, f.Reason) {
		return f, newError(http.StatusUnprocessableEntity, CodeInvalid, "reason", "unknown wait reason %q", f.Reason)
	}
	if l := c.Query("limit"); l != "" {
		n, err := strconv.Atoi(l)
		if err != nil {
			return f, newError(http.StatusBadRequest, CodeMalformed, "limit", "not an integer: %q", l)
		}
		if n < 1 || n > store.MaxListLimit {
			return f, newError(http.StatusUnprocessableEntity, CodeInvalid, "limit", "must be 1..%d, got %d", store.MaxListLimit, n)
		}
		f.Limit = n
	}
	return f, nil
}

// listQueues handles GET /v1/queues.
func (s *Server) listQueues(c *gin.Context) {
	ctx, cancel := s.storeCtx(c)
	defer cancel()
	qs, err := s.store.ListQueues(ctx)
	if err != nil {
		writeError(c, err)
		return
	}
	out := QueueList{Queues: make([]Queue, 0, len(qs))}
	for _, q := range qs {
		out.Queues = append(out.Queues, queueFromScheduling(q))
	}
	c.JSON(http.StatusOK, out)
}

// inventory handles GET /v1/inventory.
func (s *Server) inventory(c *gin.Context) {
	ctx, cancel := s.storeCtx(c)
	defer cancel()
	pools, err := s.store.GetInventory(ctx)
	if err != nil {
		writeError(c, err)
		return
	}
	c.JSON(http.StatusOK, inventoryFromScheduling(pools))
}
