package api

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/gpugov/gpugov/internal/scheduling"
	"github.com/gpugov/gpugov/internal/vocab"
	"github.com/gpugov/gpugov/store"
)

// The quota action flow (docs/design.md §3 "Act on a wait", §4, §5):
//
//	GET  /v1/quotas                           every quota with used, borrowed, lent out and to whom
//	PUT  /v1/quotas/{pool}/{project}          admin: set a quota (a derived policy version)
//	POST /v1/quota-requests                   the project (or an operator, an admin) asks for more
//	GET  /v1/quota-requests                   requests, filtered by state, project, pool
//	POST /v1/quota-requests/{id}/approve      admin, with a comment: the quota changes
//	POST /v1/quota-requests/{id}/deny         admin, with a comment: nothing changes
//
// Every change is audited by the store with the token's name, before and
// after; a change of quota wakes the scheduler. A rejected request changes
// nothing. While a policy experiment about quotas holds a pool, a quota
// change (a PUT, an approval) is a 409 naming it unless the admin gives
// override_reason (quotaHeldByExperiment).

// QuotaStore is the part of *store.Store the quota routes use. The Store
// given to New must implement it for those routes to work (StoreFrom's value
// does); otherwise they answer 500.
type QuotaStore interface {
	LoadQuotaAccounting(ctx context.Context) (*scheduling.Snapshot, error)
	ActivePolicyHash(ctx context.Context) (string, error)
	SetQuota(ctx context.Context, c store.QuotaChange) (*store.QuotaChangeResult, error)
	CreateQuotaRequest(ctx context.Context, nr store.NewQuotaRequest) (*store.QuotaRequest, error)
	GetQuotaRequest(ctx context.Context, id string) (*store.QuotaRequest, error)
	ListQuotaRequests(ctx context.Context, f store.QuotaRequestFilter) ([]store.QuotaRequest, error)
	DecideQuotaRequestWith(ctx context.Context, id string, approve bool, actor, comment string, evidence map[string]any) (*store.QuotaRequest, *store.QuotaChangeResult, error)
	HoldingExperiments(ctx context.Context) ([]store.Experiment, error)
}

// StoreFrom's value serves the quota routes.
var _ QuotaStore = pgStore{}

// QuotaBorrower is one project of a pool's cohort using more than its
// nominal quota, in milli-GPU.
type QuotaBorrower struct {
	Project       string `json:"project"`
	BorrowedMilli int64  `json:"borrowed_milli"`
}

// QuotaUsage is one project's quota in one pool with the scheduler's
// accounting of it (scheduling.QuotaUsage), in milli-GPU: Used by its
// running jobs there, Borrowed beyond nominal, LentOut its share of what the
// cohort's borrowers use out of its unused nominal quota (docs/design.md
// §5), and LentTo those borrowers (empty when it lends nothing).
type QuotaUsage struct {
	Pool                string          `json:"pool"`
	Project             string          `json:"project"`
	NominalMilli        int64           `json:"nominal_milli"`
	BorrowingLimitMilli int64           `json:"borrowing_limit_milli"`
	UsedMilli           int64           `json:"used_milli"`
	BorrowedMilli       int64           `json:"borrowed_milli"`
	LentOutMilli        int64           `json:"lent_out_milli"`
	LentTo              []QuotaBorrower `json:"lent_to"`
}

// QuotaList answers GET /v1/quotas: the quotas by pool then project, and the
// hash of the active policy version they belong to.
type QuotaList struct {
	Policy string       `json:"policy"`
	Quotas []QuotaUsage `json:"quotas"`
}

// QuotaUpdate is the body of PUT /v1/quotas/{pool}/{project}: the whole
// quota (nominal and borrowing limit, milli-GPU) and why. All three are
// required. OverrideReason lets the change through while a policy
// experiment about quotas holds a pool (the change ends that experiment at
// once, policy_changed; recorded in the set_quota audit evidence); without
// it such a change is a 409 naming the experiment.
type QuotaUpdate struct {
	NominalMilli        *int64 `json:"nominal_milli"`
	BorrowingLimitMilli *int64 `json:"borrowing_limit_milli"`
	Reason              string `json:"reason"`
	OverrideReason      string `json:"override_reason,omitempty"`
}

// Quota is one project's quota in a pool, in milli-GPU.
type Quota struct {
	NominalMilli        int64 `json:"nominal_milli"`
	BorrowingLimitMilli int64 `json:"borrowing_limit_milli"`
}

// QuotaChange answers PUT /v1/quotas/{pool}/{project} and is part of an
// approval's answer: the quota before (null: the project had none in the
// pool, so it was unlimited there) and after, and the policy versions
// active before and after (equal when nothing changed).
type QuotaChange struct {
	Pool           string `json:"pool"`
	Project        string `json:"project"`
	Changed        bool   `json:"changed"`
	Before         *Quota `json:"before"`
	After          Quota  `json:"after"`
	PreviousPolicy string `json:"previous_policy"`
	Policy         string `json:"policy"`
}

// NewQuotaRequest is the body of POST /v1/quota-requests: the nominal quota
// wanted (required), optionally the borrowing limit wanted (absent: keep
// the current one), and why (required).
type NewQuotaRequest struct {
	Pool                string `json:"pool"`
	Project             string `json:"project"`
	NominalMilli        *int64 `json:"nominal_milli"`
	BorrowingLimitMilli *int64 `json:"borrowing_limit_milli,omitempty"`
	Reason              string `json:"reason"`
}

// QuotaRequest is one quota request (store.QuotaRequest); Change is set in
// the answer to an approval.
type QuotaRequest struct {
	ID                  string       `json:"id"`
	Pool                string       `json:"pool"`
	Project             string       `json:"project"`
	NominalMilli        int64        `json:"nominal_milli"`
	BorrowingLimitMilli *int64       `json:"borrowing_limit_milli"`
	Reason              string       `json:"reason"`
	RequestedBy         string       `json:"requested_by"`
	RequestedAt         time.Time    `json:"requested_at"`
	State               string       `json:"state"` // pending, approved, denied
	DecidedBy           string       `json:"decided_by,omitempty"`
	DecidedAt           *time.Time   `json:"decided_at,omitempty"`
	Comment             string       `json:"comment,omitempty"`
	Policy              string       `json:"policy,omitempty"`
	Change              *QuotaChange `json:"change,omitempty"`
}

// QuotaRequestList answers GET /v1/quota-requests, newest first.
type QuotaRequestList struct {
	Requests []QuotaRequest `json:"requests"`
}

// QuotaDecision is the body of POST /v1/quota-requests/{id}/approve and
// /deny; Comment is required. OverrideReason, for an approval, is
// QuotaUpdate's (recorded in the approval's and its set_quota's audit
// evidence); a denial changes no quota and ignores it.
type QuotaDecision struct {
	Comment        string `json:"comment"`
	OverrideReason string `json:"override_reason,omitempty"`
}

// quotaRoutes adds the quota routes to the /v1 group.
func (s *Server) quotaRoutes(v1 *gin.RouterGroup) {
	v1.GET("/quotas", s.listQuotas)
	v1.PUT("/quotas/:pool/:project", s.setQuota)
	v1.POST("/quota-requests", s.createQuotaRequest)
	v1.GET("/quota-requests", s.listQuotaRequests)
	v1.POST("/quota-requests/:id/approve", func(c *gin.Context) { s.decideQuotaRequest(c, true) })
	v1.POST("/quota-requests/:id/deny", func(c *gin.Context) { s.decideQuotaRequest(c, false) })
}

// quotaStore returns the store as a QuotaStore with the request's store
// context (storeCtx; the caller defers cancel), or answers 500 (ok false,
// cancel a no-op).
func (s *Server) quotaStore(c *gin.Context) (qs QuotaStore, ctx context.Context, cancel context.CancelFunc, ok bool) {
	if qs, ok = implements[QuotaStore](c, s.store); !ok {
		return nil, nil, func() {}, false
	}
	ctx, cancel = s.storeCtx(c)
	return qs, ctx, cancel, true
}

// listQuotas handles GET /v1/quotas[?pool=]: every quota (of the pool) with
// the accounting the next scheduling cycle decides on (scheduling.QuotaLedger
// over store.LoadQuotaAccounting, the snapshot's quotas, allocations and
// running jobs read without the scheduler's snapshot cache, so a reader
// never delays a cycle). Every person's role may read it: a
// project sees whom its quota is lent to, and who lends to it.
func (s *Server) listQuotas(c *gin.Context) {
	qs, ctx, cancel, ok := s.quotaStore(c)
	defer cancel()
	if !ok {
		return
	}
	hash, err := qs.ActivePolicyHash(ctx)
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		writeError(c, err)
		return
	}
	snap, err := qs.LoadQuotaAccounting(ctx)
	if err != nil {
		writeError(c, err)
		return
	}
	pool := c.Query("pool")
	out := QuotaList{Policy: hash, Quotas: []QuotaUsage{}}
	for _, u := range scheduling.QuotaLedger(snap) {
		if pool != "" && u.Pool != pool {
			continue
		}
		q := QuotaUsage{Pool: u.Pool, Project: u.Project, NominalMilli: u.NominalMilli, BorrowingLimitMilli: u.BorrowingLimitMilli,
			UsedMilli: u.UsedMilli, BorrowedMilli: u.BorrowedMilli, LentOutMilli: u.LentOutMilli, LentTo: []QuotaBorrower{}}
		for _, b := range u.LentTo {
			q.LentTo = append(q.LentTo, QuotaBorrower{Project: b.Project, BorrowedMilli: b.BorrowedMilli})
		}
		out.Quotas = append(out.Quotas, q)
	}
	c.JSON(http.StatusOK, out)
}

// setQuota handles PUT /v1/quotas/:pool/:project (admin). 200 with the
// change; 400 a malformed body or a missing field; 422 a value the store
// refuses (naming the field); 409 no active policy version, or a policy
// experiment about quotas holds a pool and no override_reason is given
// (quotaHeldByExperiment, which names it; nothing is stored then).
func (s *Server) setQuota(c *gin.Context) {
	var body QuotaUpdate
	if err := decodeStrict(c.Request.Body, &body, false); err != nil {
		writeError(c, err)
		return
	}
	switch {
	case body.NominalMilli == nil:
		writeError(c, newError(http.StatusBadRequest, CodeMalformed, "nominal_milli", "required: the nominal quota in milli-GPU"))
		return
	case body.BorrowingLimitMilli == nil:
		writeError(c, newError(http.StatusBadRequest, CodeMalformed, "borrowing_limit_milli", "required: the borrowing limit in milli-GPU (0: no borrowing)"))
		return
	case body.Reason == "":
		writeError(c, newError(http.StatusBadRequest, CodeMalformed, "reason", "required: why, for the audit log"))
		return
	}
	qs, ctx, cancel, ok := s.quotaStore(c)
	defer cancel()
	if !ok {
		return
	}
	pool, project := c.Param("pool"), c.Param("project")
	evidence, ok := s.quotaHeldByExperiment(ctx, c, qs, pool, body.OverrideReason)
	if !ok {
		return
	}
	res, err := qs.SetQuota(ctx, store.QuotaChange{Pool: pool, Project: project, NominalMilli: *body.NominalMilli,
		BorrowingLimitMilli: *body.BorrowingLimitMilli, Actor: principal(c).Name, Reason: body.Reason, Evidence: evidence})
	if err != nil {
		writeError(c, err)
		return
	}
	if evidence != nil && res != nil && res.Changed {
		s.endOverriddenExperiments(ctx, c, "quota "+pool+"/"+project+" set by "+principal(c).Name+": "+body.OverrideReason)
	}
	s.wakeAfterQuota(c, pool, project, res)
	c.JSON(http.StatusOK, quotaChangeOf(pool, project, res))
}

// quotaHeldByExperiment is the experiment check of a quota change in pool
// made outside any experiment (PUT /v1/quotas, an approval). An experiment
// about other variables tolerates it (its candidate stays in force, and
// undoing the experiment keeps the change: docs/design.md §3 step 8), so
// it refuses nothing. One about quotas (vocab.PolicyQuota among its
// groups) does not: in its scope the change would confound it (a second
// change to its own variable), and anywhere it would end it (its
// candidate no longer in force, it aborts with policy_changed). So while
// such an experiment holds a pool the change is a 409 naming it (field
// override_reason; the one whose scope includes pool first) unless
// overrideReason is given. It returns the evidence the store adds to the
// audit (override_experiment, override_reason; nil when nothing was
// overridden) and false when it answered.
func (s *Server) quotaHeldByExperiment(ctx context.Context, c *gin.Context, qs QuotaStore, pool, overrideReason string) (map[string]any, bool) {
	holding, err := qs.HoldingExperiments(ctx)
	if err != nil {
		writeError(c, err)
		return nil, false
	}
	var holder *store.Experiment
	for i := range holding {
		x := &holding[i]
		if !slices.Contains(x.Groups, vocab.PolicyQuota) {
			continue
		}
		if slices.Contains(x.Pools(), pool) {
			holder = x
			break
		}
		if holder == nil {
			holder = x
		}
	}
	if holder == nil {
		return nil, true
	}
	if strings.TrimSpace(overrideReason) == "" {
		pools := strings.Join(holder.Pools(), ", ")
		effect := "a quota change in pool " + pool + " would end it (its candidate would no longer be in force)"
		if slices.Contains(holder.Pools(), pool) {
			effect = "a quota change in pool " + pool + " would confound it (a second change to its own variable) and end it"
		}
		writeError(c, newError(http.StatusConflict, CodeConflict, "override_reason",
			"experiment %s (%s, %s) varies quotas and holds pool %s: %s; wait for its verdict, abort it (gpugov experiment abort %s), or give override_reason (gpugov quota set|approve --override-reason)",
			holder.ID, holder.Spec.Name, holder.State, pools, effect, holder.ID))
		return nil, false
	}
	return map[string]any{"override_experiment": holder.ID, "override_reason": overrideReason}, true
}

// wakeAfterQuota asks the scheduler for a cycle when a quota changed.
func (s *Server) wakeAfterQuota(c *gin.Context, pool, project string, res *store.QuotaChangeResult) {
	if res == nil || !res.Changed {
		return
	}
	wctx, cancel := s.workflowCtx(c)
	defer cancel()
	s.notifyScheduler(wctx, "quota "+pool+"/"+project)
}

// quotaChangeOf converts the store's result.
func quotaChangeOf(pool, project string, r *store.QuotaChangeResult) *QuotaChange {
	if r == nil {
		return nil
	}
	out := &QuotaChange{Pool: pool, Project: project, Changed: r.Changed, PreviousPolicy: r.PreviousPolicy, Policy: r.Policy,
		After: Quota{NominalMilli: r.After.NominalMilli, BorrowingLimitMilli: r.After.BorrowingLimitMilli}}
	if r.Before != nil {
		out.Before = &Quota{NominalMilli: r.Before.NominalMilli, BorrowingLimitMilli: r.Before.BorrowingLimitMilli}
	}
	return out
}

// quotaRequestOf converts a stored request.
func quotaRequestOf(r *store.QuotaRequest) QuotaRequest {
	out := QuotaRequest{ID: r.ID, Pool: r.Pool, Project: r.Project, NominalMilli: r.NominalMilli,
		BorrowingLimitMilli: r.BorrowingLimitMilli, Reason: r.Reason, RequestedBy: r.RequestedBy, RequestedAt: r.RequestedAt,
		State: string(r.State), DecidedAt: r.DecidedAt}
	if r.DecidedBy != nil {
		out.DecidedBy = *r.DecidedBy
	}
	if r.DecisionComment != nil {
		out.Comment = *r.DecisionComment
	}
	if r.PolicyHash != nil {
		out.Policy = *r.PolicyHash
	}
	return out
}

// createQuotaRequest handles POST /v1/quota-requests: a submitter of the
// project, an operator or an admin asks for a quota. 201 with the pending
// request; 400 a malformed body or a missing field; 403 another project;
// 422 a value the store refuses (naming the field).
func (s *Server) createQuotaRequest(c *gin.Context) {
	var body NewQuotaRequest
	if err := decodeStrict(c.Request.Body, &body, false); err != nil {
		writeError(c, err)
		return
	}
	switch {
	case body.Pool == "":
		writeError(c, newError(http.StatusBadRequest, CodeMalformed, "pool", "required: the pool of the quota"))
		return
	case body.Project == "":
		writeError(c, newError(http.StatusBadRequest, CodeMalformed, "project", "required: the project asking"))
		return
	case body.NominalMilli == nil:
		writeError(c, newError(http.StatusBadRequest, CodeMalformed, "nominal_milli", "required: the nominal quota wanted, in milli-GPU"))
		return
	case body.Reason == "":
		writeError(c, newError(http.StatusBadRequest, CodeMalformed, "reason", "required: why the project needs it"))
		return
	}
	p := principal(c)
	if !p.owns(body.Project) {
		writeError(c, newError(http.StatusForbidden, CodeForbidden, "project",
			"a %s token of project %q may not ask for project %q's quota", p.Role, p.Project, body.Project))
		return
	}
	qs, ctx, cancel, ok := s.quotaStore(c)
	defer cancel()
	if !ok {
		return
	}
	r, err := qs.CreateQuotaRequest(ctx, store.NewQuotaRequest{Pool: body.Pool, Project: body.Project,
		NominalMilli: *body.NominalMilli, BorrowingLimitMilli: body.BorrowingLimitMilli, Reason: body.Reason, Actor: p.Name})
	if err != nil {
		writeError(c, err)
		return
	}
	c.JSON(http.StatusCreated, quotaRequestOf(r))
}

// listQuotaRequests handles GET /v1/quota-requests[?state=&project=&pool=&limit=].
// A submitter sees its own project's requests only (another project named
// is a 403); operators and admins see all.
func (s *Server) listQuotaRequests(c *gin.Context) {
	states := make([]string, len(vocab.QuotaRequestStates))
	for i, st := range vocab.QuotaRequestStates {
		states[i] = string(st)
	}
	vals, limit, ok := listQuery(c, enumQuery{"state", states})
	if !ok {
		return
	}
	p := principal(c)
	project := c.Query("project")
	if !p.Role.SeesAllProjects() {
		if project != "" && project != p.Project {
			writeError(c, newError(http.StatusForbidden, CodeForbidden, "project",
				"a %s token of project %q may not list project %q's quota requests", p.Role, p.Project, project))
			return
		}
		project = p.Project
	}
	qs, ctx, cancel, ok := s.quotaStore(c)
	defer cancel()
	if !ok {
		return
	}
	rs, err := qs.ListQuotaRequests(ctx, store.QuotaRequestFilter{State: vocab.QuotaRequestState(vals["state"]),
		Project: project, Pool: c.Query("pool"), Limit: limit})
	if err != nil {
		writeError(c, err)
		return
	}
	out := QuotaRequestList{Requests: make([]QuotaRequest, 0, len(rs))}
	for i := range rs {
		out.Requests = append(out.Requests, quotaRequestOf(&rs[i]))
	}
	c.JSON(http.StatusOK, out)
}

// decideQuotaRequest handles POST /v1/quota-requests/:id/approve and /deny
// (admin). 200 with the decided request (an approval with its quota
// change); 400 a malformed body or no comment; 404 no such request; 409 a
// request already decided, no active policy version, or (an approval) a
// policy experiment about quotas holds a pool and no override_reason is
// given (quotaHeldByExperiment; nothing is stored then).
func (s *Server) decideQuotaRequest(c *gin.Context, approve bool) {
	var body QuotaDecision
	if err := decodeStrict(c.Request.Body, &body, false); err != nil {
		writeError(c, err)
		return
	}
	if body.Comment == "" {
		writeError(c, newError(http.StatusBadRequest, CodeMalformed, "comment", "required: the decision's comment, for the requester and the audit log"))
		return
	}
	qs, ctx, cancel, ok := s.quotaStore(c)
	defer cancel()
	if !ok {
		return
	}
	id := c.Param("id")
	var evidence map[string]any
	if approve {
		pending, err := qs.GetQuotaRequest(ctx, id)
		switch {
		case errors.Is(err, store.ErrNotFound):
			writeError(c, newError(http.StatusNotFound, CodeNotFound, "id", "no quota request %q", id))
			return
		case err != nil:
			writeError(c, err)
			return
		}
		if pending.State == vocab.QuotaRequestPending {
			if evidence, ok = s.quotaHeldByExperiment(ctx, c, qs, pending.Pool, body.OverrideReason); !ok {
				return
			}
		}
	}
	r, change, err := qs.DecideQuotaRequestWith(ctx, id, approve, principal(c).Name, body.Comment, evidence)
	switch {
	case errors.Is(err, store.ErrNotFound):
		writeError(c, newError(http.StatusNotFound, CodeNotFound, "id", "no quota request %q", id))
		return
	case err != nil:
		writeError(c, err)
		return
	}
	if evidence != nil && change != nil && change.Changed {
		s.endOverriddenExperiments(ctx, c, "quota request "+r.ID+" approved by "+principal(c).Name+": "+body.OverrideReason)
	}
	s.wakeAfterQuota(c, r.Pool, r.Project, change)
	out := quotaRequestOf(r)
	out.Change = quotaChangeOf(r.Pool, r.Project, change)
	c.JSON(http.StatusOK, out)
}
