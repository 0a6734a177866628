package api

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/gpugov/gpugov/internal/policy"
	"github.com/gpugov/gpugov/internal/vocab"
	"github.com/gpugov/gpugov/store"
)

// EvidenceStore is the part of *store.Store the audit, completion and
// dispute routes use. The Store given to New must implement it for them to
// work (StoreFrom's value does); otherwise they answer 500.
type EvidenceStore interface {
	ListAudit(ctx context.Context, f store.AuditFilter) ([]store.AuditEntry, string, error)
	CompleteJob(ctx context.Context, jobID, actor, reason string, at time.Time) (*store.JobCompletion, bool, error)
	GetReclaim(ctx context.Context, id string) (*store.Reclaim, error)
	DisputeReleasedReclaim(ctx context.Context, id, by, reason string, window time.Duration, at time.Time) (*store.Reclaim, bool, error)
	RejectDispute(ctx context.Context, id, by, reason string, at time.Time) (*store.Reclaim, bool, error)
}

// DisputeRecorder receives the disputes recorded through the API and their
// rejections, for metrics (gpugov_false_reclaims_total and
// gpugov_false_reclaims_rejected_total). *telemetry.GovernanceMetrics
// implements it.
type DisputeRecorder interface {
	RecordDispute(ctx context.Context, pool, class string)
	RecordDisputeRejected(ctx context.Context, pool, class string)
}

// WithGovernancePolicy gives the routes that read the policy in force (the
// reclaim dispute window) its source; without it they use policy.Default().
func WithGovernancePolicy(current func() *policy.Policy) Option {
	return func(s *Server) { s.policy = current }
}

// WithDisputeRecorder makes the dispute routes report each dispute and
// rejection they record to r.
func WithDisputeRecorder(r DisputeRecorder) Option { return func(s *Server) { s.disputes = r } }

// currentPolicy is the policy in force, or the defaults.
func (s *Server) currentPolicy() *policy.Policy {
	if s.policy != nil {
		if p := s.policy(); p != nil {
			return p
		}
	}
	return policy.Default()
}

// AuditEntry is one governance action of the audit log: who (actor: a
// token's name, a project, or a service component such as scheduler,
// governance, reclaim, serve), what (action), on what (subject: a job,
// preemption, pool, quota, policy or request ID), why (reason) and the
// evidence (the action's own keys; docs/design.md §3 "The audit").
type AuditEntry struct {
	ID       int64          `json:"id"`
	At       time.Time      `json:"at"`
	Actor    string         `json:"actor"`
	Action   string         `json:"action"`
	Subject  string         `json:"subject"`
	Reason   string         `json:"reason"`
	Evidence map[string]any `json:"evidence"`
}

// AuditList is one page of GET /v1/audit, newest first. NextCursor is passed
// back as ?cursor= for the next (older) page; absent on the last page.
type AuditList struct {
	Entries    []AuditEntry `json:"entries"`
	NextCursor string       `json:"next_cursor,omitempty"`
}

// JobCompletion answers POST /v1/jobs/{id}/complete: the owner's
// declaration that the job's work is done and only cleanup holds its GPUs,
// on the job's current allocation.
type JobCompletion struct {
	JobID        string    `json:"job_id"`
	AllocationID string    `json:"allocation_id"`
	RunID        string    `json:"run_id,omitempty"`
	DeclaredBy   string    `json:"declared_by"`
	DeclaredAt   time.Time `json:"declared_at"`
	Reason       string    `json:"reason"`
	Note         string    `json:"note"`
}

// MaxAuditFilterLength bounds the subject, action and actor filters of
// GET /v1/audit (bytes).
const MaxAuditFilterLength = 256

// evidenceRoutes adds the audit, completion and dispute routes to the /v1 group.
func (s *Server) evidenceRoutes(v1 *gin.RouterGroup) {
	v1.GET("/audit", s.listAudit)
	v1.POST("/jobs/:id/complete", s.completeJob)
	v1.POST("/reclaims/:id/dispute", s.disputeReclaim)
	v1.POST("/reclaims/:id/reject-dispute", s.rejectDispute)
}

// evidenceStore returns the store as an EvidenceStore, or answers 500.
func (s *Server) evidenceStore(c *gin.Context) (EvidenceStore, bool) {
	return implements[EvidenceStore](c, s.store)
}

// listAudit handles GET /v1/audit?subject=&action=&actor=&since=&until=&limit=&cursor=
// (operator and admin): the audit log, newest first, one page.
func (s *Server) listAudit(c *gin.Context) {
	f, apiErr := auditFilter(c)
	if apiErr != nil {
		writeError(c, apiErr)
		return
	}
	es, ok := s.evidenceStore(c)
	if !ok {
		return
	}
	ctx, cancel := s.storeCtx(c)
	defer cancel()
	entries, next, err := es.ListAudit(ctx, f)
	if err != nil {
		writeError(c, err)
		return
	}
	out := AuditList{Entries: make([]AuditEntry, len(entries)), NextCursor: next}
	for i, e := range entries {
		ev := e.Evidence
		if ev == nil {
			ev = map[string]any{}
		}
		out.Entries[i] = AuditEntry{ID: e.ID, At: e.At, Actor: e.Actor, Action: e.Action, Subject: e.Subject, Reason: e.Reason, Evidence: ev}
	}
	c.JSON(http.StatusOK, out)
}

// auditFilter reads and checks GET /v1/audit's query parameters: 422
// naming the field for a filter too long, an action not in
// vocab.AuditActions, an until not after since, or a limit outside
// 1..store.MaxListLimit; 400 (code malformed, as on every route: timeParam)
// naming since or until for a time not in RFC 3339, and naming cursor for a
// cursor that no next_cursor gave.
func auditFilter(c *gin.Context) (store.AuditFilter, *Error) {
	f := store.AuditFilter{Subject: c.Query("subject"), Action: c.Query("action"), Actor: c.Query("actor")}
	for _, q := range []struct{ field, v string }{{"subject", f.Subject}, {"action", f.Action}, {"actor", f.Actor}} {
		if len(q.v) > MaxAuditFilterLength {
			return f, newError(http.StatusUnprocessableEntity, CodeInvalid, q.field, "%s is %d bytes, at most %d", q.field, len(q.v), MaxAuditFilterLength)
		}
	}
	for _, t := range []struct {
		field string
		dst   *time.Time
	}{{"since", &f.Since}, {"until", &f.Until}} {
		v := c.Query(t.field)
		if v == "" {
			continue
		}
		at, apiErr := timeParam(t.field, v)
		if apiErr != nil {
			return f, apiErr
		}
		*t.dst = at
	}
	if !f.Since.IsZero() && !f.Until.IsZero() && !f.Until.After(f.Since) {
		return f, newError(http.StatusUnprocessableEntity, CodeInvalid, "until", "until %s is not after since %s",
			f.Until.Format(time.RFC3339Nano), f.Since.Format(time.RFC3339Nano))
	}
	if f.Action != "" && !vocab.ValidAuditAction(f.Action) {
		return f, newError(http.StatusUnprocessableEntity, CodeInvalid, "action", "unknown action %q (want one of %s)",
			f.Action, strings.Join(vocab.AuditActions, ", "))
	}
	n, apiErr := countParam(c, "limit")
	if apiErr != nil {
		return f, apiErr
	}
	f.Limit = n
	if v := c.Query("cursor"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 1 {
			return f, newError(http.StatusBadRequest, CodeMalformed, "cursor", "not a cursor from next_cursor: %q", v)
		}
		f.BeforeID = n
	}
	return f, nil
}

// completeJob handles POST /v1/jobs/{id}/complete (the job's project, an
// operator or an admin): the business-complete declaration, audited with the
// token's name; the next reclaim scan classifies the allocation completed.
func (s *Server) completeJob(c *gin.Context) {
	req, ok := decodeAction(c)
	if !ok {
		return
	}
	es, ok := s.evidenceStore(c)
	if !ok {
		return
	}
	ctx, cancel := s.storeCtx(c)
	defer cancel()
	job, ok := s.loadOwnedJob(ctx, c)
	if !ok {
		return
	}
	done, first, err := es.CompleteJob(ctx, job.ID, principal(c).Name, actionReason(req, "completed"), s.now())
	if err != nil {
		writeError(c, err)
		return
	}
	note := fmt.Sprintf("recorded: the next reclaim scan classifies allocation %s completed and handles it in the mode the policy gives its pool and queue", done.AllocationID)
	if !first {
		note = fmt.Sprintf("already declared by %s at %s; nothing changed", done.DeclaredBy, done.DeclaredAt.Format(time.RFC3339))
	}
	c.JSON(http.StatusOK, JobCompletion{JobID: done.JobID, AllocationID: done.AllocationID, RunID: done.RunID,
		DeclaredBy: done.DeclaredBy, DeclaredAt: done.DeclaredAt, Reason: done.Reason, Note: note})
}

// requiredReason is the request's reason, or a 422 naming reason.
func requiredReason(c *gin.Context, req ActionRequest, what string) (string, bool) {
	r := strings.TrimSpace(req.Reason)
	if r == "" {
		writeError(c, invalid([]FieldError{{Field: "reason", Message: "reason is required: say why " + what}}))
		return "", false
	}
	return r, true
}

// disputeReclaim handles POST /v1/reclaims/{id}/dispute (the owning project):
// the owner disputes a released reclaim within the policy's
// reclaim.dispute_window_s, a false reclaim unless an operator rejects it.
// 409 before the release (keep it instead) or after the window.
func (s *Server) disputeReclaim(c *gin.Context) {
	// Another project's reclaim is 403 whatever the body.
	gs, ok := s.governanceStore(c)
	if !ok {
		return
	}
	ctx, cancel := s.storeCtx(c)
	defer cancel()
	r, err := gs.GetReclaim(ctx, c.Param("id"))
	if err != nil {
		writeError(c, err)
		return
	}
	p := principal(c)
	if p.Project != r.Project {
		writeError(c, newError(http.StatusForbidden, CodeForbidden, "",
			"only project %q may dispute the reclaim of its allocation; this token is of project %q", r.Project, p.Project))
		return
	}
	es, reason, ok := s.disputeAction(c, "the reclaim was wrong")
	if !ok {
		return
	}
	window := policy.Seconds(s.currentPolicy().Reclaim.DisputeWindowSeconds)
	r, recorded, err := es.DisputeReleasedReclaim(ctx, r.ID, p.Name, reason, window, s.now())
	s.answerDispute(ctx, c, r, recorded, err, DisputeRecorder.RecordDispute)
}

// rejectDispute handles POST /v1/reclaims/{id}/reject-dispute (operator or
// admin): the reclaim was right; its dispute no longer counts as a false
// reclaim.
func (s *Server) rejectDispute(c *gin.Context) {
	es, reason, ok := s.disputeAction(c, "the reclaim was right")
	if !ok {
		return
	}
	ctx, cancel := s.storeCtx(c)
	defer cancel()
	r, recorded, err := es.RejectDispute(ctx, c.Param("id"), principal(c).Name, reason, s.now())
	s.answerDispute(ctx, c, r, recorded, err, DisputeRecorder.RecordDisputeRejected)
}

// disputeAction reads a dispute route's body, whose reason is required (a
// 422 asking to say why what), and the evidence store; false when it has
// answered.
func (s *Server) disputeAction(c *gin.Context, what string) (EvidenceStore, string, bool) {
	req, ok := decodeAction(c)
	if !ok {
		return nil, "", false
	}
	reason, ok := requiredReason(c, req, what)
	if !ok {
		return nil, "", false
	}
	es, ok := s.evidenceStore(c)
	if !ok {
		return nil, "", false
	}
	return es, reason, true
}

// answerDispute answers a dispute route with the reclaim r the store
// returned (or its error), reporting a recorded change to the dispute
// recorder with record when one is set.
func (s *Server) answerDispute(ctx context.Context, c *gin.Context, r *store.Reclaim, recorded bool, err error,
	record func(DisputeRecorder, context.Context, string, string)) {
	if err != nil {
		writeError(c, err)
		return
	}
	if recorded && s.disputes != nil {
		record(s.disputes, ctx, r.Pool, string(r.Class))
	}
	c.JSON(http.StatusOK, reclaimFromStore(r))
}
