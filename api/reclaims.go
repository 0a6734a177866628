package api

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/gpugov/gpugov/internal/temporalx"
	"github.com/gpugov/gpugov/internal/vocab"
	"github.com/gpugov/gpugov/store"
)

// GovernanceWorkflows is what the reclaim decision routes ask of Temporal.
// The Workflows given to New must implement it for them to work
// (workflows.Client does); otherwise they answer 500.
type GovernanceWorkflows interface {
	// DecideReclaim sends signal (temporalx.SignalReclaimKeep or
	// SignalReclaimConfirm) with who and why to the allocation's
	// ReclaimWorkflow. A workflow that is closed is
	// temporalx.ErrReclaimClosed (answered 409).
	DecideReclaim(ctx context.Context, allocationID, signal, actor, reason string) error
}

// Reclaim is one reclaim record: the allocation, its class and the
// evidence it was based on, the mode it was handled in (and what config said
// before stage and protection), the notice, the decision, the GPUs released,
// whether the owner disputed it (kept it before the release, or disputed the
// release within the policy's window) and whether an operator rejected the
// dispute; FalseReclaim is a dispute not rejected.
type Reclaim struct {
	ID                  string         `json:"id"`
	AllocationID        string         `json:"allocation_id"`
	JobID               string         `json:"job_id"`
	Project             string         `json:"project"`
	Queue               string         `json:"queue"`
	Pool                string         `json:"pool"`
	Node                string         `json:"node,omitempty"`
	Class               string         `json:"class"`
	Mode                string         `json:"mode"`
	ConfiguredMode      string         `json:"configured_mode"`
	Stage               string         `json:"stage"`
	Basis               string         `json:"basis"`
	Evidence            map[string]any `json:"evidence"`
	GPUs                float64        `json:"gpus"`
	State               string         `json:"state"`
	WorkflowID          string         `json:"workflow_id,omitempty"`
	DetectedAt          time.Time      `json:"detected_at"`
	NoticeAt            *time.Time     `json:"notice_at,omitempty"`
	NoticeDeadline      *time.Time     `json:"notice_deadline,omitempty"`
	DecidedBy           string         `json:"decided_by,omitempty"`
	DecidedAt           *time.Time     `json:"decided_at,omitempty"`
	ReleasedAt          *time.Time     `json:"released_at,omitempty"`
	GPUsReleased        float64        `json:"gpus_released"`
	Disputed            bool           `json:"disputed"`
	DisputeBy           string         `json:"dispute_by,omitempty"`
	DisputeReason       string         `json:"dispute_reason,omitempty"`
	DisputedAt          *time.Time     `json:"disputed_at,omitempty"`
	DisputeAfterRelease bool           `json:"dispute_after_release"`
	DisputeRejectedBy   string         `json:"dispute_rejected_by,omitempty"`
	DisputeRejectedAt   *time.Time     `json:"dispute_rejected_at,omitempty"`
	DisputeRejection    string         `json:"dispute_rejection,omitempty"`
	FalseReclaim        bool           `json:"false_reclaim"`
	Detail              string         `json:"detail,omitempty"`
}

// ReclaimSummary totals a reclaim report.
type ReclaimSummary struct {
	ByClass       map[string]int `json:"by_class"`
	ByMode        map[string]int `json:"by_mode"`
	ByState       map[string]int `json:"by_state"`
	GPUsReleased  float64        `json:"gpus_released"`
	Disputed      int            `json:"disputed"`       // disputes, rejected or not
	FalseReclaims int            `json:"false_reclaims"` // disputes not rejected
}

// ReclaimReport answers GET /v1/reclaims: the reclaims, newest first, and their totals.
type ReclaimReport struct {
	Reclaims []Reclaim      `json:"reclaims"`
	Summary  ReclaimSummary `json:"summary"`
}

// Accepted values of the reclaim report's filters.
var (
	reclaimClasses = enumQuery{"class", names(vocab.ReclaimClasses)}
	reclaimModes   = enumQuery{"mode", names(vocab.ReclaimModes)}
	reclaimStates  = enumQuery{"state", names(vocab.ReclaimStates)}
)

// listReclaims handles GET /v1/reclaims?class=&mode=&pool=&state=&limit=.
func (s *Server) listReclaims(c *gin.Context) {
	q, limit, ok := listQuery(c, reclaimClasses, reclaimModes, reclaimStates)
	if !ok {
		return
	}
	f := store.ReclaimFilter{Class: vocab.ReclaimClass(q["class"]), Mode: vocab.ReclaimMode(q["mode"]), Pool: c.Query("pool"),
		State: vocab.ReclaimState(q["state"]), Limit: limit}
	if p := principal(c); !p.Role.SeesAllProjects() {
		f.Project = p.Project // a submitter reads its own project's reclaims only
	}
	serveGovernance(s, c, func(ctx context.Context, gs GovernanceStore) (ReclaimReport, error) {
		rs, err := gs.ListReclaims(ctx, f)
		return reclaimReport(rs), err
	})
}

// reclaimReport converts stored reclaims into the report with its totals.
func reclaimReport(rs []store.Reclaim) ReclaimReport {
	out := ReclaimReport{Reclaims: make([]Reclaim, len(rs)), Summary: ReclaimSummary{
		ByClass: map[string]int{}, ByMode: map[string]int{}, ByState: map[string]int{}}}
	for i := range rs {
		r := reclaimFromStore(&rs[i])
		out.Reclaims[i] = r
		out.Summary.ByClass[r.Class]++
		out.Summary.ByMode[r.Mode]++
		out.Summary.ByState[r.State]++
		out.Summary.GPUsReleased += r.GPUsReleased
		if r.Disputed {
			out.Summary.Disputed++
		}
		if r.FalseReclaim {
			out.Summary.FalseReclaims++
		}
	}
	return out
}

// confirmReclaim handles POST /v1/reclaims/{id}/confirm: an operator or
// admin approves the release (confirm mode, or a notify-mode release before
// its window ends).
func (s *Server) confirmReclaim(c *gin.Context) {
	s.decideReclaim(c, temporalx.SignalReclaimConfirm, "confirmed")
}

// keepReclaim handles POST /v1/reclaims/{id}/keep: the owning project
// objects, which records a dispute (a false reclaim) and releases nothing.
func (s *Server) keepReclaim(c *gin.Context) {
	s.decideReclaim(c, temporalx.SignalReclaimKeep, "kept")
}

// decideReclaim checks the reclaim awaits a decision (and, for keep, that
// the caller's project owns it), signals its workflow and answers 202 with
// the reclaim: the workflow records the decision.
func (s *Server) decideReclaim(c *gin.Context, signal, verb string) {
	req, ok := decodeAction(c)
	if !ok {
		return
	}
	gs, ok := s.governanceStore(c)
	if !ok {
		return
	}
	wf, ok := implements[GovernanceWorkflows](c, s.workflows)
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
	if signal == temporalx.SignalReclaimKeep && p.Project != r.Project {
		writeError(c, newError(http.StatusForbidden, CodeForbidden, "",
			"only project %q may keep its allocation; this token is of project %q", r.Project, p.Project))
		return
	}
	if !awaitsDecision(r) {
		writeError(c, newError(http.StatusConflict, CodeConflict, "", "reclaim %s is %s (mode %s): no %s decision is awaited", r.ID, r.State, r.Mode, verb))
		return
	}
	wctx, wcancel := s.workflowCtx(c)
	defer wcancel()
	if err := wf.DecideReclaim(wctx, r.AllocationID, signal, p.Name, actionReason(req, verb)); err != nil {
		if errors.Is(err, temporalx.ErrReclaimClosed) {
			writeError(c, newError(http.StatusConflict, CodeConflict, "", "reclaim %s: %v", r.ID, err))
			return
		}
		writeError(c, newError(http.StatusServiceUnavailable, CodeStoreUnavailable, "", "the reclaim workflow could not be signalled; retry"))
		_ = c.Error(err)
		return
	}
	c.JSON(http.StatusAccepted, reclaimFromStore(r))
}

// awaitsDecision reports whether a reclaim still takes the decision: a
// notify- or confirm-mode reclaim that was not decided or released yet.
func awaitsDecision(r *store.Reclaim) bool {
	return r.State == vocab.ReclaimNotified || r.State == vocab.ReclaimAwaitConfirm ||
		(r.State == vocab.ReclaimOpen && (r.Mode == vocab.ModeNotify || r.Mode == vocab.ModeConfirm))
}

func reclaimFromStore(r *store.Reclaim) Reclaim {
	ev := r.Evidence
	if ev == nil {
		ev = map[string]any{}
	}
	return Reclaim{
		ID: r.ID, AllocationID: r.AllocationID, JobID: r.JobID, Project: r.Project, Queue: r.Queue, Pool: r.Pool, Node: r.Node,
		Class: string(r.Class), Mode: string(r.Mode), ConfiguredMode: string(r.ConfiguredMode), Stage: string(r.Stage), Basis: r.Basis,
		Evidence: ev, GPUs: r.GPUs, State: string(r.State), WorkflowID: r.WorkflowID, DetectedAt: r.DetectedAt, NoticeAt: r.NoticeAt,
		NoticeDeadline: r.NoticeDeadline, DecidedBy: r.DecidedBy, DecidedAt: r.DecidedAt, ReleasedAt: r.ReleasedAt,
		GPUsReleased: r.GPUsReleased, Disputed: r.Disputed, DisputeBy: r.DisputeBy, DisputeReason: r.DisputeReason,
		DisputedAt: r.DisputedAt, DisputeAfterRelease: r.DisputeAfterRelease, DisputeRejectedBy: r.DisputeRejectedBy,
		DisputeRejectedAt: r.DisputeRejectedAt, DisputeRejection: r.DisputeRejection, FalseReclaim: r.FalseReclaim(), Detail: r.Detail,
	}
}
