package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/gpugov/gpugov/internal/governance"
	"github.com/gpugov/gpugov/internal/policy"
	"github.com/gpugov/gpugov/internal/vocab"
	"github.com/gpugov/gpugov/store"
)

// Resume drills and pool readiness (docs/design.md §4 "Pool readiness",
// §5 "Resume drills"):
//
//	POST /v1/jobs/{id}/drill            operator, admin: a resume drill of a running checkpointable job
//	GET  /v1/pools/{pool}/readiness     every role but agent: the pool's readiness with its numbers and stage history
//
// A stage change through POST /v1/policies is gated on the readiness of
// each pool it widens (applyPolicy).

// ReadinessStore is the part of *store.Store the drill and readiness
// routes use. The Store given to New must implement it for those routes to
// work (StoreFrom's value does); otherwise they answer 500.
type ReadinessStore interface {
	OpenDrill(ctx context.Context, d store.NewDrill) (*store.StartedDrill, error)
	GetPreemption(ctx context.Context, id string) (*store.PreemptionRecord, error)
	ActivePolicyVersion(ctx context.Context) (*store.PolicyVersion, error)
	PoolReadiness(ctx context.Context, pool string, p *policy.Policy, now time.Time) (*governance.Readiness, error)
	PoolStageHistory(ctx context.Context, pool string, limit int) ([]store.PoolStageChange, error)
	PlanStageChanges(ctx context.Context, req store.StageChangeRequest) ([]store.StageChange, error)
	ActivatePolicyStaged(ctx context.Context, hash string, body json.RawMessage, actor, reason string, evidence map[string]any,
		req store.StageChangeRequest, plan []store.StageChange) (bool, error)
}

// DrillWorkflows starts a drill's PreemptionWorkflow (workflows.Client
// implements it). The Workflows given to New must implement it for POST
// /v1/jobs/{id}/drill to work; otherwise it answers 500.
type DrillWorkflows interface {
	StartDrill(ctx context.Context, preemptionID, jobID, allocationID, runID string) error
}

// DrillStarted answers POST /v1/jobs/{id}/drill: the drill's preemption
// record (kind drill, in progress) and, when its workflow could not be
// started now (202), a note saying the governance loop starts it.
type DrillStarted struct {
	Drill Preemption `json:"drill"`
	Note  string     `json:"note,omitempty"`
}

// noteDrillDeferred is DrillStarted.Note when the workflow start failed.
const noteDrillDeferred = "drill recorded; its workflow could not be started now and the governance loop starts it within a minute"

// PoolStageChange is one row of a pool's stage history: from and to
// stages, what became of the change (applied, overridden, refused,
// initial), when, by whom and why, from which source (api, start, reload,
// refresh, migration), the policy version that asked, and the readiness
// it was judged on in short (ready and the failed checks; absent when none
// was evaluated).
type PoolStageChange struct {
	ID         int64                    `json:"id"`
	From       vocab.AutomationStage    `json:"from"`
	To         vocab.AutomationStage    `json:"to"`
	Outcome    vocab.StageChangeOutcome `json:"outcome"`
	At         time.Time                `json:"at"`
	Actor      string                   `json:"actor"`
	Reason     string                   `json:"reason"`
	Source     string                   `json:"source"`
	PolicyHash string                   `json:"policy_hash"`
	Ready      *bool                    `json:"ready,omitempty"`
	Failed     []vocab.ReadinessCheck   `json:"failed_checks,omitempty"`
}

// PoolReadiness answers GET /v1/pools/{pool}/readiness: the pool's
// readiness now (governance.Readiness: ready, the failed checks, each of
// the eight checks with its numbers, limits and their policy fields, the
// protection windows and the checkpointable profiles' records) under the
// thresholds of the active policy version PolicyHash, and the pool's
// latest stage changes, newest first.
type PoolReadiness struct {
	governance.Readiness
	PolicyHash string            `json:"policy_hash"`
	History    []PoolStageChange `json:"history"`
}

// DefaultStageHistory is how many stage changes GET
// /v1/pools/{pool}/readiness lists unless ?history= says otherwise.
const DefaultStageHistory = 10

// readinessRoutes adds the drill and readiness routes to the /v1 group.
func (s *Server) readinessRoutes(v1 *gin.RouterGroup) {
	v1.POST("/jobs/:id/drill", s.drillJob)
	v1.GET("/pools/:pool/readiness", s.poolReadiness)
}

// readinessStore returns the store as a ReadinessStore, or answers 500.
func (s *Server) readinessStore(c *gin.Context) (ReadinessStore, bool) {
	return implements[ReadinessStore](c, s.store)
}

// activePolicy decodes the active policy version: the rules in force (the
// default policy when none is stored yet) and its hash ("" then).
func activePolicy(ctx context.Context, rs ReadinessStore) (*policy.Policy, string, error) {
	v, err := rs.ActivePolicyVersion(ctx)
	if errors.Is(err, store.ErrNotFound) {
		return policy.Default(), "", nil
	}
	if err != nil {
		return nil, "", err
	}
	p, err := policy.FromCanonical(v.Body)
	if err != nil {
		return nil, "", fmt.Errorf("api: active policy version %s: %w", v.Hash, err)
	}
	return p, v.Hash, nil
}

// drillJob handles POST /v1/jobs/:id/drill (operator, admin; body
// {"reason"} optional): it records a resume drill of the job
// (store.OpenDrill, audited with the token's name and the reason, "resume
// drill through the API" when none is given), with the protection window
// of the active policy the job's queue is inside, and starts its
// PreemptionWorkflow. 201 with the record; 202 with a note when the
// workflow start failed (the governance loop starts it later). 403 not an
// operator; 404 no such job; 409 a job that is not running, not
// checkpointable, protected, already in a preemption or drill, or inside a
// protection window (the message says which); 422 a reason over 1024 bytes.
func (s *Server) drillJob(c *gin.Context) {
	req, ok := decodeAction(c)
	if !ok {
		return
	}
	rs, ok := s.readinessStore(c)
	if !ok {
		return
	}
	wf, ok := implements[DrillWorkflows](c, s.workflows)
	if !ok {
		return
	}
	ctx, cancel := s.storeCtx(c)
	defer cancel()
	job, err := s.store.GetJob(ctx, c.Param("id"))
	if err != nil {
		writeError(c, jobLookupError(c.Param("id"), err))
		return
	}
	p, _, err := activePolicy(ctx, rs)
	if err != nil {
		writeError(c, err)
		return
	}
	now := s.now()
	d, err := rs.OpenDrill(ctx, store.NewDrill{JobID: job.ID, Actor: principal(c).Name, Reason: actionReason(req, "resume drill"),
		ProtectionWindow: p.InProtectionWindow(job.Queue, now), At: now})
	if err != nil {
		writeError(c, err)
		return
	}
	status, note := http.StatusCreated, ""
	wctx, wcancel := s.workflowCtx(c)
	defer wcancel()
	if err := wf.StartDrill(wctx, d.PreemptionID, d.JobID, d.AllocationID, d.RunID); err != nil {
		s.log.Warn("api: drill recorded, workflow not started", "drill", d.PreemptionID, "job", d.JobID, "err", err)
		status, note = http.StatusAccepted, noteDrillDeferred
	}
	rctx, rcancel := s.storeCtx(c) // the signal may have spent ctx's deadline (see answerJob)
	defer rcancel()
	rec, err := rs.GetPreemption(rctx, d.PreemptionID)
	if err != nil {
		writeError(c, err)
		return
	}
	c.JSON(status, DrillStarted{Drill: preemptionFromStore(rec), Note: note})
}

// poolReadiness handles GET /v1/pools/:pool/readiness[?history=N] (every
// role but agent): store.PoolReadiness at now under the active policy
// version and the latest N (default DefaultStageHistory, 1..1000) stage
// changes. 404 an unknown pool; 422 a bad history.
func (s *Server) poolReadiness(c *gin.Context) {
	limit, apiErr := countParam(c, "history")
	if apiErr != nil {
		writeError(c, apiErr)
		return
	}
	if limit == 0 {
		limit = DefaultStageHistory
	}
	rs, ok := s.readinessStore(c)
	if !ok {
		return
	}
	ctx, cancel := context.WithTimeout(c.Request.Context(), 4*s.storeTimeout) // the report input of two windows
	defer cancel()
	p, hash, err := activePolicy(ctx, rs)
	if err != nil {
		writeError(c, err)
		return
	}
	pool := c.Param("pool")
	r, err := rs.PoolReadiness(ctx, pool, p, s.now())
	if errors.Is(err, store.ErrNoPool) {
		writeError(c, newError(http.StatusNotFound, CodeNotFound, "pool", "pool %s not found", pool))
		return
	}
	if err != nil {
		writeError(c, err)
		return
	}
	hist, err := rs.PoolStageHistory(ctx, pool, limit)
	if err != nil {
		writeError(c, err)
		return
	}
	out := PoolReadiness{Readiness: *r, PolicyHash: hash, History: make([]PoolStageChange, 0, len(hist))}
	for _, h := range hist {
		out.History = append(out.History, stageChangeOut(h))
	}
	c.JSON(http.StatusOK, out)
}

// stageChangeOut converts a stored stage change.
func stageChangeOut(h store.PoolStageChange) PoolStageChange {
	out := PoolStageChange{ID: h.ID, From: h.From, To: h.To, Outcome: h.Outcome, At: h.At, Actor: h.Actor, Reason: h.Reason,
		Source: h.Source, PolicyHash: h.PolicyHash}
	if h.Readiness != nil {
		ready := h.Readiness.Ready
		out.Ready, out.Failed = &ready, h.Readiness.Failed
	}
	return out
}

// stageRefusal is the 422 of a policy whose stage widenings readiness
// refused: one detail per failed check of each refused pool, field
// "policy.pools.<pool>.stage", the message naming the pool, the widening,
// the check and its numbers.
func stageRefusal(plan []store.StageChange) *Error {
	var errs []FieldError
	var pools []string
	for _, ch := range plan {
		if ch.Outcome != vocab.StageChangeRefused || ch.Readiness == nil {
			continue
		}
		pools = append(pools, ch.Pool)
		for _, cr := range ch.Readiness.Checks {
			if cr.Passed {
				continue
			}
			errs = append(errs, FieldError{Field: "policy.pools." + ch.Pool + ".stage",
				Message: fmt.Sprintf("pool %s: %s → %s refused: readiness check %s failed: %s", ch.Pool, ch.From, ch.To, cr.Check, cr.Detail)})
		}
	}
	e := &Error{Status: http.StatusUnprocessableEntity, Body: ErrorBody{Code: CodeNotReady, Field: errs[0].Field,
		Message: fmt.Sprintf("%d readiness checks failed for the stage widening of pool %v (set override_readiness with a reason to apply it anyway): %s",
			len(errs), pools, errs[0].Message), Details: errs}}
	return e
}
