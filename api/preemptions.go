package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/gpugov/gpugov/internal/scheduling"
	"github.com/gpugov/gpugov/internal/vocab"
	"github.com/gpugov/gpugov/store"
)

// GovernanceStore is the part of *store.Store the preemption and reclaim
// routes use. The Store given to New must implement it for those routes to
// work (StoreFrom's value does); otherwise they answer 500.
type GovernanceStore interface {
	ListPreemptions(ctx context.Context, f store.PreemptionFilter) ([]store.PreemptionRecord, error)
	GetPreemption(ctx context.Context, id string) (*store.PreemptionRecord, error)
	ListReclaims(ctx context.Context, f store.ReclaimFilter) ([]store.Reclaim, error)
	GetReclaim(ctx context.Context, id string) (*store.Reclaim, error)
}

// NoLossReason says why a preemption has no effective run loss and never
// will: the victim's run ended by itself before the release (victim_ended),
// the preemption was aborted before it (aborted_no_checkpoint,
// aborted_ineligible: the victim kept running), or it was only proposed
// (would_preempt). It is "" when a loss was measured or may still be, so the
// CLI, the replay report and the console print "none: <reason>" rather than
// a loss "not measured yet" or "—".
func (p Preemption) NoLossReason() string {
	if p.EffectiveLossGPUSeconds != nil {
		return ""
	}
	switch vocab.PreemptionOutcome(p.Outcome) {
	case vocab.PreemptionVictimEnded:
		return "the victim's run ended by itself before the release"
	case vocab.PreemptionAbortedNoCkpt, vocab.PreemptionAbortedIneligible:
		if p.ReleasedAt == nil {
			return "aborted before the release; the victim kept running"
		}
	case vocab.PreemptionWouldPreempt:
		return "proposed only (observe stage): nothing was preempted"
	}
	return ""
}

// Preemption is one preemption record (GET /v1/preemptions/{id}): its kind
// (a preemption, or a resume drill with its actor); the trigger job, its
// queue and the plan's reason (a drill's reason is who asked and why); the victim and its run; the
// last valid checkpoint at the notice and the one saved; the time of each
// step; whether the next run resumed at the saved step; the failures; and the
// effective run loss by parts (seconds; GPU-seconds = GPUs × the sum).
type Preemption struct {
	ID string `json:"id"`
	// Kind is preemption (for ForJobID) or drill (a resume drill: no
	// trigger job, no cycle; DrillActor started it, Reason says why).
	Kind                    string      `json:"kind"`
	DrillActor              string      `json:"drill_actor,omitempty"`
	State                   string      `json:"state"`   // in_progress, released, aborted, observed
	Outcome                 string      `json:"outcome"` // completed, resume_failed, resume_not_observed, aborted_no_checkpoint, aborted_ineligible, victim_ended, would_preempt; "" while running
	Detail                  string      `json:"detail,omitempty"`
	WorkflowID              string      `json:"workflow_id,omitempty"`
	CycleID                 string      `json:"cycle_id"`
	Pool                    string      `json:"pool"`
	ForJobID                string      `json:"for_job_id"`
	ForQueue                string      `json:"for_queue"`
	Reason                  string      `json:"reason"`
	VictimJobID             string      `json:"victim_job_id"`
	VictimQueue             string      `json:"victim_queue"`
	AllocationID            string      `json:"allocation_id"`
	RunID                   string      `json:"run_id,omitempty"`
	GPUs                    float64     `json:"gpus"`
	RunStartedAt            *time.Time  `json:"run_started_at,omitempty"`
	CheckpointAtNotice      *Checkpoint `json:"checkpoint_at_notice,omitempty"`
	SavedCheckpoint         *Checkpoint `json:"saved_checkpoint,omitempty"`
	CheckpointInGrace       *bool       `json:"checkpoint_in_grace,omitempty"`
	StepAtNotice            *int64      `json:"step_at_notice,omitempty"`
	StartedAt               time.Time   `json:"started_at"`
	NotifiedAt              *time.Time  `json:"notified_at,omitempty"`
	SavedAt                 *time.Time  `json:"saved_at,omitempty"`
	ReleasedAt              *time.Time  `json:"released_at,omitempty"`
	RescheduledAt           *time.Time  `json:"rescheduled_at,omitempty"`
	ResumedAt               *time.Time  `json:"resumed_at,omitempty"`
	PassedAt                *time.Time  `json:"passed_at,omitempty"`
	FinishedAt              *time.Time  `json:"finished_at,omitempty"`
	ResumedRunID            string      `json:"resumed_run_id,omitempty"`
	ResumedFromStep         *int64      `json:"resumed_from_step,omitempty"`
	ResumedCorrectly        *bool       `json:"resumed_correctly,omitempty"`
	EstimatedLossGPUSeconds float64     `json:"estimated_loss_gpu_s"`
	LostSeconds             *float64    `json:"lost_s,omitempty"`
	SaveRestoreSeconds      *float64    `json:"save_restore_s,omitempty"`
	RecomputeSeconds        *float64    `json:"recompute_s,omitempty"`
	EffectiveLossGPUSeconds *float64    `json:"effective_loss_gpu_s,omitempty"`
	Failures                []string    `json:"failures"`
	// ResumeVerified: the next run started at the saved step and was seen
	// progressing past it (a verified resume of the victim's profile).
	ResumeVerified *bool `json:"resume_verified,omitempty"`
	// Candidates are the running jobs the plan weighed on the chosen target.
	Candidates []PreemptionCandidate `json:"candidates"`
	// FinalState, FinalAt, FailuresSinceResume, OutputAffected and
	// OutputNote are the victim's outcome after the resume, once its job
	// ended (docs/design.md §5 "The preemption record").
	FinalState          string     `json:"final_state,omitempty"` // succeeded, failed, cancelled
	FinalAt             *time.Time `json:"final_at,omitempty"`
	FailuresSinceResume *int       `json:"failures_since_resume,omitempty"`
	OutputAffected      *bool      `json:"output_affected,omitempty"`
	OutputNote          string     `json:"output_note,omitempty"`
}

// PreemptionCandidate is a running job the plan weighed on a preemption's
// target: its queue (low-risk or not), the GPUs it holds there, its
// estimated loss in GPU-seconds, whether it was chosen, and why it could not
// be a victim ("" when it could).
type PreemptionCandidate struct {
	JobID                   string  `json:"job_id"`
	Queue                   string  `json:"queue"`
	LowRisk                 bool    `json:"low_risk"`
	GPUs                    int     `json:"gpus"`
	EstimatedLossGPUSeconds float64 `json:"estimated_loss_gpu_s"`
	Chosen                  bool    `json:"chosen"`
	Gate                    string  `json:"gate,omitempty"`
}

// PreemptionList answers GET /v1/preemptions, newest first.
type PreemptionList struct {
	Preemptions []Preemption `json:"preemptions"`
}

// governanceRoutes adds the preemption and reclaim routes to the /v1 group.
func (s *Server) governanceRoutes(v1 *gin.RouterGroup) {
	v1.GET("/preemptions", s.listPreemptions)
	v1.GET("/preemptions/:id", s.getPreemption)
	v1.GET("/reclaims", s.listReclaims)
	v1.POST("/reclaims/:id/confirm", s.confirmReclaim)
	v1.POST("/reclaims/:id/keep", s.keepReclaim)
}

// governanceStore returns the store as a GovernanceStore, or answers 500.
func (s *Server) governanceStore(c *gin.Context) (GovernanceStore, bool) {
	return implements[GovernanceStore](c, s.store)
}

// listLimit parses the limit query parameter (0 when absent), or writes a 422.
func listLimit(c *gin.Context) (int, bool) {
	n, apiErr := countParam(c, "limit")
	if apiErr != nil {
		writeError(c, apiErr)
		return 0, false
	}
	return n, true
}

// countParam parses the optional query parameter field as a count in
// 1..store.MaxListLimit: 0 when absent, a 422 naming field when it is not
// such a number.
func countParam(c *gin.Context, field string) (int, *Error) {
	v := c.Query(field)
	if v == "" {
		return 0, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > store.MaxListLimit {
		return 0, newError(http.StatusUnprocessableEntity, CodeInvalid, field, "%q is not a number in 1..%d", v, store.MaxListLimit)
	}
	return n, nil
}

// oneOf checks an optional query value against its accepted values, or writes a 422.
func oneOf(c *gin.Context, field string, accepted ...string) (string, bool) {
	v := c.Query(field)
	if v == "" {
		return "", true
	}
	for _, a := range accepted {
		if v == a {
			return v, true
		}
	}
	writeError(c, invalid([]FieldError{{Field: field, Message: fmt.Sprintf("%q is not one of: %s", clip(v, maxEchoedID), strings.Join(accepted, ", "))}}))
	return "", false
}

// enumQuery is an optional query parameter that takes one of a fixed set of values.
type enumQuery struct {
	field    string
	accepted []string
}

// listQuery checks a governance list's enumerated query parameters and its
// limit. It returns the enumerated values by field ("" when absent) and the
// limit (0 when absent), or writes a 422 naming the first bad parameter.
func listQuery(c *gin.Context, enums ...enumQuery) (map[string]string, int, bool) {
	vals := make(map[string]string, len(enums))
	for _, e := range enums {
		v, ok := oneOf(c, e.field, e.accepted...)
		if !ok {
			return nil, 0, false
		}
		vals[e.field] = v
	}
	limit, ok := listLimit(c)
	return vals, limit, ok
}

// serveGovernance answers a governance read: it calls read with the
// governance store under the request's store deadline and answers 200 with
// its result, or writes its error (404 for an unknown ID, 503 when the
// store is unreachable).
func serveGovernance[T any](s *Server, c *gin.Context, read func(ctx context.Context, gs GovernanceStore) (T, error)) {
	gs, ok := s.governanceStore(c)
	if !ok {
		return
	}
	ctx, cancel := s.storeCtx(c)
	defer cancel()
	out, err := read(ctx, gs)
	if err != nil {
		writeError(c, err)
		return
	}
	c.JSON(http.StatusOK, out)
}

// Accepted values of the preemption list's filters.
var (
	preemptionStates   = enumQuery{"state", names(vocab.PreemptionStates)}
	preemptionOutcomes = enumQuery{"outcome", names(vocab.PreemptionOutcomes)}
	preemptionKinds    = enumQuery{"kind", names(vocab.PreemptionKinds)}
)

// names returns the string values of a vocab list, in its order.
func names[T ~string](vs []T) []string {
	out := make([]string, len(vs))
	for i, v := range vs {
		out[i] = string(v)
	}
	return out
}

// listPreemptions handles GET /v1/preemptions?state=&outcome=&kind=&pool=&job=&limit=.
// Operators and admins read every preemption; a submitter those whose
// trigger or victim job is of its project (a preemption concerns two).
func (s *Server) listPreemptions(c *gin.Context) {
	q, limit, ok := listQuery(c, preemptionStates, preemptionOutcomes, preemptionKinds)
	if !ok {
		return
	}
	f := store.PreemptionFilter{State: vocab.PreemptionState(q["state"]), Outcome: vocab.PreemptionOutcome(q["outcome"]),
		Kind: vocab.PreemptionKind(q["kind"]), Pool: c.Query("pool"), JobID: c.Query("job"), Limit: limit}
	if p := principal(c); !p.Role.SeesAllProjects() {
		f.Project = p.Project
	}
	serveGovernance(s, c, func(ctx context.Context, gs GovernanceStore) (PreemptionList, error) {
		ps, err := gs.ListPreemptions(ctx, f)
		out := PreemptionList{Preemptions: make([]Preemption, len(ps))}
		for i := range ps {
			out.Preemptions[i] = preemptionFromStore(&ps[i])
		}
		return out, err
	})
}

// getPreemption handles GET /v1/preemptions/{id}: a submitter's only when
// its trigger or victim job is of its project (else 403).
func (s *Server) getPreemption(c *gin.Context) {
	serveGovernance(s, c, func(ctx context.Context, gs GovernanceStore) (*Preemption, error) {
		p, err := gs.GetPreemption(ctx, c.Param("id"))
		if err != nil {
			return nil, err
		}
		if err := s.preemptionVisible(ctx, principal(c), p); err != nil {
			return nil, err
		}
		out := preemptionFromStore(p)
		return &out, nil
	})
}

// preemptionVisible returns nil when caller may read preemption p: staff
// always, a submitter when the trigger or the victim job is of its project;
// else the 403.
func (s *Server) preemptionVisible(ctx context.Context, caller Principal, p *store.PreemptionRecord) error {
	if caller.Role.SeesAllProjects() {
		return nil
	}
	for _, id := range []string{p.ForJobID, p.VictimJobID} {
		if id == "" {
			continue
		}
		j, err := s.store.GetJob(ctx, id)
		if errors.Is(err, store.ErrNotFound) {
			continue
		}
		if err != nil {
			return err
		}
		if j.Project == caller.Project {
			return nil
		}
	}
	return newError(http.StatusForbidden, CodeForbidden, "",
		"preemption %s concerns no job of project %q (a %s token sees its own project's only)", p.ID, caller.Project, caller.Role)
}

func preemptionFromStore(p *store.PreemptionRecord) Preemption {
	failures := p.Failures
	if failures == nil {
		failures = []string{}
	}
	out := Preemption{
		ID: p.ID, Kind: string(p.Kind), DrillActor: p.DrillActor, State: string(p.State), Outcome: string(p.Outcome), Detail: p.Detail, WorkflowID: p.WorkflowID, CycleID: p.CycleID,
		Pool: p.Pool, ForJobID: p.ForJobID, ForQueue: p.ForQueue, Reason: p.Reason, VictimJobID: p.VictimJobID,
		VictimQueue: p.VictimQueue, AllocationID: p.AllocationID, RunID: p.RunID, GPUs: p.GPUs, RunStartedAt: p.RunStartedAt,
		CheckpointAtNotice: checkpointOut(p.CheckpointAtNotice), SavedCheckpoint: checkpointOut(p.SavedCheckpoint),
		CheckpointInGrace: p.CheckpointInGrace, StepAtNotice: p.StepAtNotice, StartedAt: p.StartedAt, NotifiedAt: p.NotifiedAt,
		SavedAt: p.SavedAt, ReleasedAt: p.ReleasedAt, RescheduledAt: p.RescheduledAt, ResumedAt: p.ResumedAt,
		PassedAt: p.PassedAt, FinishedAt: p.FinishedAt, ResumedRunID: p.ResumedRunID, ResumedFromStep: p.ResumedFromStep,
		ResumedCorrectly: p.ResumedCorrectly, EstimatedLossGPUSeconds: p.EstimatedLossGPUSeconds, LostSeconds: p.LostSeconds,
		SaveRestoreSeconds: p.SaveRestoreSeconds, RecomputeSeconds: p.RecomputeSeconds,
		EffectiveLossGPUSeconds: p.EffectiveLossGPUSeconds, Failures: failures,
		ResumeVerified: p.ResumeVerified, Candidates: make([]PreemptionCandidate, len(p.Candidates)),
		FinalState: string(p.FinalState), FinalAt: p.FinalAt, FailuresSinceResume: p.FailuresSinceResume,
		OutputAffected: p.OutputAffected, OutputNote: p.OutputNote,
	}
	for i, c := range p.Candidates {
		out.Candidates[i] = PreemptionCandidate(c)
	}
	return out
}

// checkpointOut converts a stored checkpoint; nil stays nil.
func checkpointOut(cp *scheduling.Checkpoint) *Checkpoint {
	if cp == nil {
		return nil
	}
	return &Checkpoint{At: cp.At, Step: cp.Step, Location: cp.Location}
}
