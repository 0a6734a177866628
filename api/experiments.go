package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/gpugov/gpugov/internal/experiment"
	"github.com/gpugov/gpugov/internal/policy"
	"github.com/gpugov/gpugov/internal/scheduling"
	"github.com/gpugov/gpugov/internal/temporalx"
	"github.com/gpugov/gpugov/internal/vocab"
	"github.com/gpugov/gpugov/store"
)

// The policy experiment routes (docs/design.md §4 "Experiments"):
//
//	POST /v1/experiments               admin: create one (body: experiment.Spec)
//	GET  /v1/experiments               operator, admin: newest first
//	GET  /v1/experiments/{id}          operator, admin: with its timeline and outcome
//	POST /v1/experiments/{id}/promote  admin, {reason}: a kept candidate becomes the baseline
//	POST /v1/experiments/{id}/abort    admin, {reason}: stop; the baseline is restored
//
// The API validates, stores and starts the ExperimentWorkflow; it never
// switches a policy itself: the workflow does, in its activities, at the
// experiment's start, on a rollback, a verdict, a promotion or an abort.
// Every refusal stores nothing.

// ExperimentStore is the part of *store.Store the experiment routes use. The
// Store given to New must implement it for those routes to work (StoreFrom's
// value does); otherwise they answer 500.
type ExperimentStore interface {
	ActivePolicyVersion(ctx context.Context) (*store.PolicyVersion, error)
	GetPolicyVersion(ctx context.Context, hashOrPrefix string) (*store.PolicyVersion, error)
	SavePolicyVersion(ctx context.Context, hash string, body json.RawMessage) error
	CreateExperiment(ctx context.Context, e *store.Experiment) error
	GetExperiment(ctx context.Context, id string) (*store.Experiment, error)
	ListExperiments(ctx context.Context, limit int) ([]store.Experiment, error)
	ExperimentEvents(ctx context.Context, id string) ([]store.ExperimentEvent, error)
	ActiveExperimentFor(ctx context.Context, pools []string) (*store.Experiment, error)
	AbortExperiment(ctx context.Context, id, actor, reason string, at time.Time) (*store.Experiment, error)
}

// StoreFrom's value serves the experiment routes and the experiment check
// of POST /v1/policies.
var (
	_ ExperimentStore  = pgStore{}
	_ experimentHolder = pgStore{}
)

// ExperimentWorkflows is what the experiment routes ask of Temporal. The
// Workflows given to New must implement it for them to work
// (workflows.Client does); otherwise they answer 500.
type ExperimentWorkflows interface {
	// StartExperiment starts the experiment's ExperimentWorkflow (ID
	// "experiment/<id>"); starting it again must not start a second one.
	StartExperiment(ctx context.Context, id string) error
	// SignalExperiment sends action (ActionPromote or ActionAbort) with who
	// and why to the experiment's workflow. A workflow that has ended is
	// temporalx.ErrExperimentClosed (answered 409).
	SignalExperiment(ctx context.Context, id, action, actor, reason string) error
}

// DefaultCycleInterval is the scheduler's cycle interval the API assumes
// when WithCycleInterval is not given: serve's default
// (service.DefaultCycleInterval). An experiment's window and check interval
// must be at least one cycle.
const DefaultCycleInterval = 5 * time.Second

// WithCycleInterval tells the API the scheduler's cycle interval (serve's
// --cycle-interval), the shortest observation window and check interval an
// experiment may have. d <= 0 keeps DefaultCycleInterval.
func WithCycleInterval(d time.Duration) Option {
	return func(s *Server) {
		if d > 0 {
			s.cycleInterval = d
		}
	}
}

// Experiment is one policy experiment (store.Experiment): its spec (the
// candidate as the stored version's hash), where it is in its life, the
// versions compared and the variable groups in which they differ, when it
// was created, started, switched, ended and promoted, the baseline once
// measured and the outcome once decided.
type Experiment struct {
	ID            string                  `json:"id"`
	Name          string                  `json:"name"`
	Hypothesis    string                  `json:"hypothesis,omitempty"`
	State         vocab.ExperimentState   `json:"state"`
	Verdict       vocab.ExperimentVerdict `json:"verdict"` // "" until finished
	WorkflowID    string                  `json:"workflow_id"`
	BaselineHash  string                  `json:"baseline_hash"`
	CandidateHash string                  `json:"candidate_hash"`
	Groups        []vocab.PolicyGroup     `json:"groups"`
	Spec          experiment.Spec         `json:"spec"`
	CreatedBy     string                  `json:"created_by"`
	CreatedAt     time.Time               `json:"created_at"`
	StartAt       time.Time               `json:"start_at"`
	SwitchedAt    *time.Time              `json:"switched_at"`
	EndedAt       *time.Time              `json:"ended_at"`
	PromotedAt    *time.Time              `json:"promoted_at"`
	Baseline      *experiment.Measurement `json:"baseline"`
	Outcome       *experiment.Outcome     `json:"outcome"`
}

// ExperimentEvent is one entry of an experiment's timeline
// (store.ExperimentEvent): when, its kind (created, baseline_measured,
// switched, check, rolled_back, verdict, reverted, promoted, aborted,
// policy_changed), one sentence with the numbers, and its evidence (for a
// check, the []experiment.ConditionResult).
type ExperimentEvent struct {
	At     time.Time       `json:"at"`
	Kind   string          `json:"kind"`
	Detail string          `json:"detail"`
	Data   json.RawMessage `json:"data,omitempty"`
}

// ExperimentDetail answers GET /v1/experiments/{id}: the experiment and its
// timeline, oldest first.
type ExperimentDetail struct {
	Experiment
	Events []ExperimentEvent `json:"events"`
}

// ExperimentList answers GET /v1/experiments, newest first.
type ExperimentList struct {
	Experiments []Experiment `json:"experiments"`
}

// ExperimentDecision is the body of POST /v1/experiments/{id}/promote and
// /abort; Reason is required.
type ExperimentDecision struct {
	Reason string `json:"reason"`
}

// The workflow signal actions of promote and abort.
const (
	ActionPromote = temporalx.ExperimentPromote
	ActionAbort   = temporalx.ExperimentAbort
)

// experimentRoutes adds the experiment routes to the /v1 group.
func (s *Server) experimentRoutes(v1 *gin.RouterGroup) {
	v1.POST("/experiments", s.createExperiment)
	v1.GET("/experiments", s.listExperiments)
	v1.GET("/experiments/:id", s.getExperiment)
	v1.POST("/experiments/:id/promote", func(c *gin.Context) { s.decideExperiment(c, ActionPromote) })
	v1.POST("/experiments/:id/abort", func(c *gin.Context) { s.decideExperiment(c, ActionAbort) })
}

// experimentStore returns the store as an ExperimentStore, or answers 500.
func (s *Server) experimentStore(c *gin.Context) (ExperimentStore, bool) {
	return implements[ExperimentStore](c, s.store)
}

// experimentBackends returns the store as an ExperimentStore and the
// workflow starter as ExperimentWorkflows, for the routes that change an
// experiment, or answers 500.
func (s *Server) experimentBackends(c *gin.Context) (ExperimentStore, ExperimentWorkflows, bool) {
	es, ok := s.experimentStore(c)
	if !ok {
		return nil, nil, false
	}
	wf, ok := implements[ExperimentWorkflows](c, s.workflows)
	if !ok {
		return nil, nil, false
	}
	return es, wf, true
}

// specInvalid is the 400 of an experiment spec: every problem listed, the
// first one named in field and message.
func specInvalid(errs []experiment.FieldError) *Error {
	fes := make([]FieldError, len(errs))
	for i, e := range errs {
		fes[i] = FieldError{Field: e.Field, Message: e.Message}
	}
	e := invalid(fes)
	e.Status = http.StatusBadRequest
	if len(fes) > 1 {
		e.Body.Message = fmt.Sprintf("%s (and %d more problems: see details)", fes[0].Message, len(fes)-1)
	}
	return e
}

// createExperiment handles POST /v1/experiments (admin). 201 with the
// stored experiment once its workflow started; 400 a malformed body or an
// invalid spec (every problem named: Spec.Validate's, the candidate's
// policy file by line and field, an unknown candidate hash, a candidate
// equal to the baseline, more than one variable group without an
// override); 409 an experiment holding its pools (named; checked first:
// the policy in force is service-wide, so experiments run one at a time,
// whatever pools they name), or no active policy version; 503 when the workflow cannot be started (the
// experiment is then aborted, with an event saying why).
func (s *Server) createExperiment(c *gin.Context) {
	var spec experiment.Spec
	if err := decodeStrict(c.Request.Body, &spec, false); err != nil {
		writeError(c, err)
		return
	}
	es, wf, ok := s.experimentBackends(c)
	if !ok {
		return
	}
	ctx, cancel := s.storeCtx(c)
	defer cancel()

	// First: while any experiment holds its pools no other can start, on
	// any pool (the policy in force is service-wide), so a spec is not
	// judged against the first one's candidate in force.
	if holder, err := es.ActiveExperimentFor(ctx, nil); err != nil {
		writeError(c, err)
		return
	} else if holder != nil {
		writeError(c, experimentConflict(holder.ID, holder.Spec.Scope.Pools))
		return
	}
	plan, err := s.checkExperiment(ctx, es, &spec)
	if err != nil {
		writeError(c, err)
		return
	}

	if plan.body != nil {
		if err := es.SavePolicyVersion(ctx, plan.hash, plan.body); err != nil {
			writeError(c, err)
			return
		}
	}
	spec.Candidate = experiment.Candidate{Hash: plan.hash}
	e := &store.Experiment{Spec: spec, BaselineHash: plan.baseline, CandidateHash: plan.hash, Groups: plan.groups,
		CreatedBy: principal(c).Name}
	if err := es.CreateExperiment(ctx, e); err != nil {
		var conflict *store.ExperimentConflict
		var ve *store.ValidationError
		switch {
		case errors.As(err, &conflict):
			writeError(c, experimentConflict(conflict.ID, conflict.Pools))
		case errors.As(err, &ve):
			writeError(c, specInvalid([]experiment.FieldError{{Field: ve.Field, Message: ve.Message}}))
		default:
			writeError(c, err)
		}
		return
	}

	wctx, wcancel := s.workflowCtx(c)
	defer wcancel()
	if err := wf.StartExperiment(wctx, e.ID); err != nil {
		_ = c.Error(err)
		reason := "its workflow could not be started: " + err.Error()
		actx, acancel := context.WithTimeout(context.WithoutCancel(c.Request.Context()), s.storeTimeout)
		defer acancel()
		if _, aerr := es.AbortExperiment(actx, e.ID, principal(c).Name, reason, s.now()); aerr != nil {
			_ = c.Error(fmt.Errorf("api: abort experiment %s after a failed start: %w", e.ID, aerr))
		}
		writeError(c, newError(http.StatusServiceUnavailable, CodeStoreUnavailable, "",
			"experiment %s was stored but its workflow could not be started (Temporal); it is aborted and nothing was switched: retry the create", e.ID))
		return
	}
	stored, err := es.GetExperiment(ctx, e.ID)
	if err != nil {
		stored = e
	}
	c.JSON(http.StatusCreated, experimentFromStore(stored))
}

// experimentPlan is what checkExperiment found for a valid spec: the
// candidate's hash and, for a candidate given as a file's text, its
// canonical body to store; the baseline (the active version's hash); the
// variable groups in which they differ.
type experimentPlan struct {
	hash     string
	body     json.RawMessage
	baseline string
	groups   []vocab.PolicyGroup
}

// checkExperiment checks a spec as POST /v1/experiments does before
// storing anything, and returns every problem at once as one 400
// (*Error): Spec.Validate at the scheduler's cycle interval, a start in
// the past (pastStart), the
// candidate's loading (loadCandidate), the scope's pools against the
// inventory, the queues it names against the stored ones (unknownQueues),
// and, when the candidate loaded, that it is not the active
// version (the baseline) and the one-variable rule
// (experiment.CheckOneVariable). No active version is a 409; other errors
// are the store's.
func (s *Server) checkExperiment(ctx context.Context, es ExperimentStore, spec *experiment.Spec) (*experimentPlan, error) {
	errs := spec.Validate(s.cycleInterval)
	errs = append(errs, pastStart(spec, s.now(), s.cycleInterval)...)
	candidate, body, cerrs, err := loadCandidate(ctx, es, spec)
	if err != nil {
		return nil, err
	}
	errs = append(errs, cerrs...)
	perrs, err := s.unknownPools(ctx, spec.Scope.Pools)
	if err != nil {
		return nil, err
	}
	errs = append(errs, perrs...)
	qerrs, err := s.unknownQueues(ctx, spec)
	if err != nil {
		return nil, err
	}
	errs = append(errs, qerrs...)
	active, err := es.ActivePolicyVersion(ctx)
	if errors.Is(err, store.ErrNotFound) {
		return nil, newError(http.StatusConflict, CodeConflict, "", "no active policy version to take as the baseline: start serve with its policy first")
	}
	if err != nil {
		return nil, err
	}
	plan := &experimentPlan{body: body, baseline: active.Hash}
	switch {
	case candidate == nil && len(errs) == 0:
		errs = append(errs, experiment.FieldError{Field: "candidate", Message: "is required: hash (a stored policy version) or policy (a policy file's text)"})
	case candidate != nil:
		baseline, err := policy.FromCanonical(active.Body)
		if err != nil {
			return nil, fmt.Errorf("api: active policy version %s: %w", active.Hash, err)
		}
		plan.hash = candidate.Hash()
		var ferr *experiment.FieldError
		if plan.hash == active.Hash {
			ferr = &experiment.FieldError{Field: "candidate", Message: fmt.Sprintf(
				"is the active policy version %s, the baseline: an experiment needs a candidate that differs from it", shortHash(active.Hash))}
		} else {
			plan.groups, ferr = experiment.CheckOneVariable(spec, baseline, candidate)
		}
		if ferr != nil {
			errs = append(errs, *ferr)
		}
	}
	if len(errs) > 0 {
		return nil, specInvalid(errs)
	}
	return plan, nil
}

// loadCandidate loads the spec's candidate policy: candidate.policy parsed
// as a gpugov.policy/v1 file (its canonical body returned for storing; each
// problem a FieldError on candidate.policy naming the line and field), or
// candidate.hash looked up among the stored versions (a FieldError on
// candidate.hash when unknown). Neither or both set gives no policy and no
// error: Spec.Validate reports it. err is a store failure.
func loadCandidate(ctx context.Context, es ExperimentStore, spec *experiment.Spec) (*policy.Policy, json.RawMessage, []experiment.FieldError, error) {
	cand := spec.Candidate
	switch {
	case cand.Policy != "" && cand.Hash != "":
		return nil, nil, nil, nil
	case cand.Policy != "":
		p, err := policy.Parse("candidate.policy", []byte(cand.Policy))
		var perr *policy.Error
		if errors.As(err, &perr) {
			out := make([]experiment.FieldError, 0, len(perr.Problems))
			for _, pb := range perr.Problems {
				msg := fmt.Sprintf("line %d: %s", pb.Line, pb.Message)
				if pb.Field != "" {
					msg = fmt.Sprintf("line %d: %s: %s", pb.Line, pb.Field, pb.Message)
				}
				out = append(out, experiment.FieldError{Field: "candidate.policy", Message: "does not load: " + msg})
			}
			return nil, nil, out, nil
		}
		if err != nil {
			return nil, nil, []experiment.FieldError{{Field: "candidate.policy", Message: "does not load: " + err.Error()}}, nil
		}
		return p, p.Canonical(), nil, nil
	case cand.Hash != "":
		v, err := es.GetPolicyVersion(ctx, cand.Hash)
		if errors.Is(err, store.ErrNotFound) {
			return nil, nil, []experiment.FieldError{{Field: "candidate.hash", Message: fmt.Sprintf("%q is no stored policy version (a full hash, or a unique prefix of at least 8 hex digits)", cand.Hash)}}, nil
		}
		if err != nil {
			var ve *store.ValidationError
			if errors.As(err, &ve) {
				return nil, nil, []experiment.FieldError{{Field: "candidate.hash", Message: ve.Message}}, nil
			}
			return nil, nil, nil, err
		}
		p, err := policy.FromCanonical(v.Body)
		if err != nil {
			return nil, nil, []experiment.FieldError{{Field: "candidate.hash", Message: fmt.Sprintf("stored version %s does not decode: %v", shortHash(v.Hash), err)}}, nil
		}
		return p, nil, nil, nil
	}
	return nil, nil, nil, nil
}

// unknownPools returns a FieldError on scope.pools[i] for each pool of
// pools that is not in the inventory, checked before anything is stored
// (the store checks again when it creates the experiment).
func (s *Server) unknownPools(ctx context.Context, pools []string) ([]experiment.FieldError, error) {
	if len(pools) == 0 {
		return nil, nil
	}
	inv, err := s.store.GetInventory(ctx)
	if err != nil {
		return nil, err
	}
	var out []experiment.FieldError
	for i, p := range pools {
		if p != "" && !slices.ContainsFunc(inv, func(q scheduling.Pool) bool { return q.Name == p }) {
			out = append(out, experiment.FieldError{Field: fmt.Sprintf("scope.pools[%d]", i),
				Message: fmt.Sprintf("pool %q is not in the inventory", p)})
		}
	}
	return out, nil
}

// experimentConflict is the 409 naming the experiment that holds its
// pools, whichever pools the new one names.
func experimentConflict(id string, pools []string) *Error {
	return newError(http.StatusConflict, CodeConflict, "",
		"experiment %s holds pool %s; the policy in force is service-wide: one experiment at a time: wait for its verdict, promote or abort it (gpugov experiment abort %s)",
		id, strings.Join(pools, ", "), id)
}

// shortHash is the first 12 digits of a policy hash.
func shortHash(h string) string {
	if len(h) > 12 {
		return h[:12]
	}
	return h
}

// experimentHolder is the part of the store that says which experiment
// holds pools (store.ActiveExperimentFor).
type experimentHolder interface {
	ActiveExperimentFor(ctx context.Context, pools []string) (*store.Experiment, error)
}

// heldByExperiment is the check of a policy change made outside any
// experiment (POST /v1/policies): while an experiment holds a pool, the
// change would end it (its workflow sees the active version change and
// aborts with policy_changed), so it is a 409 naming the experiment unless
// overrideReason is given (the route is admin-only; the caller audits the
// override with the activation). It returns the holder (nil when none)
// and false when it answered.
func (s *Server) heldByExperiment(ctx context.Context, c *gin.Context, overrideReason string) (*store.Experiment, bool) {
	hs, ok := implements[experimentHolder](c, s.store)
	if !ok {
		return nil, false
	}
	holder, err := hs.ActiveExperimentFor(ctx, nil)
	if err != nil {
		writeError(c, err)
		return nil, false
	}
	if holder != nil && strings.TrimSpace(overrideReason) == "" {
		writeError(c, newError(http.StatusConflict, CodeConflict, "override_reason",
			"experiment %s (%s, %s) holds pool %s: a policy applied now would end it; wait for its verdict, abort it (gpugov experiment abort %s), or give override_reason (gpugov policy apply --override-reason)",
			holder.ID, holder.Spec.Name, holder.State, strings.Join(holder.Spec.Scope.Pools, ", "), holder.ID))
		return holder, false
	}
	return holder, true
}

// listExperiments handles GET /v1/experiments[?limit=] (every person's
// role, read-only: an experiment changes a pool's policy for every project
// on it, so each may see it).
func (s *Server) listExperiments(c *gin.Context) {
	limit, ok := listLimit(c)
	if !ok {
		return
	}
	es, ok := s.experimentStore(c)
	if !ok {
		return
	}
	ctx, cancel := s.storeCtx(c)
	defer cancel()
	list, err := es.ListExperiments(ctx, limit)
	if err != nil {
		writeError(c, err)
		return
	}
	out := ExperimentList{Experiments: make([]Experiment, 0, len(list))}
	for i := range list {
		out.Experiments = append(out.Experiments, experimentFromStore(&list[i]))
	}
	c.JSON(http.StatusOK, out)
}

// loadExperiment reads the experiment of the route's id, or answers 404
// naming it (ok false).
func loadExperiment(ctx context.Context, c *gin.Context, es ExperimentStore) (*store.Experiment, bool) {
	id := c.Param("id")
	e, err := es.GetExperiment(ctx, id)
	if errors.Is(err, store.ErrNotFound) {
		writeError(c, newError(http.StatusNotFound, CodeNotFound, "id", "no experiment %q", id))
		return nil, false
	}
	if err != nil {
		writeError(c, err)
		return nil, false
	}
	return e, true
}

// getExperiment handles GET /v1/experiments/:id (every person's role,
// read-only): the experiment with its timeline.
func (s *Server) getExperiment(c *gin.Context) {
	es, ok := s.experimentStore(c)
	if !ok {
		return
	}
	ctx, cancel := s.storeCtx(c)
	defer cancel()
	e, ok := loadExperiment(ctx, c, es)
	if !ok {
		return
	}
	events, err := es.ExperimentEvents(ctx, e.ID)
	if err != nil {
		writeError(c, err)
		return
	}
	out := ExperimentDetail{Experiment: experimentFromStore(e), Events: make([]ExperimentEvent, 0, len(events))}
	for _, ev := range events {
		out.Events = append(out.Events, ExperimentEvent{At: ev.At, Kind: ev.Kind, Detail: ev.Detail, Data: ev.Data})
	}
	c.JSON(http.StatusOK, out)
}

// decisionRefused says why an experiment in its current state does not take
// action, or "" when it does. Promote: only a finished experiment with
// verdict kept that is not promoted yet. Abort: an active one (scheduled,
// baseline, running) or a kept one not yet promoted (its candidate is still
// in force).
func decisionRefused(e *store.Experiment, action string) string {
	kept := e.State == vocab.ExperimentFinished && e.Verdict == vocab.VerdictKept && e.PromotedAt == nil
	switch {
	case e.PromotedAt != nil:
		return fmt.Sprintf("experiment %s is already promoted: its candidate is the baseline", e.ID)
	case action == ActionPromote && !kept:
		if e.State == vocab.ExperimentFinished {
			return fmt.Sprintf("experiment %s finished with verdict %s: only a kept candidate can be promoted", e.ID, e.Verdict)
		}
		return fmt.Sprintf("experiment %s is %s: only a finished experiment with verdict kept can be promoted", e.ID, e.State)
	case action == ActionAbort && !e.State.Active() && !kept:
		if e.State == vocab.ExperimentAborted {
			return fmt.Sprintf("experiment %s is already aborted", e.ID)
		}
		return fmt.Sprintf("experiment %s finished with verdict %s and the baseline is back in force: nothing to abort", e.ID, e.Verdict)
	}
	return ""
}

// decideExperiment handles POST /v1/experiments/:id/promote and /abort
// (admin, {reason}): it checks the state allows it and signals the
// experiment's workflow, which does the store work. 202 with the
// experiment as it was; 400 no reason; 404 unknown; 409 a state that does
// not allow it, or a workflow that has ended; 503 the workflow could not
// be signalled.
func (s *Server) decideExperiment(c *gin.Context, action string) {
	var body ExperimentDecision
	if err := decodeStrict(c.Request.Body, &body, false); err != nil {
		writeError(c, err)
		return
	}
	if strings.TrimSpace(body.Reason) == "" {
		writeError(c, newError(http.StatusBadRequest, CodeMalformed, "reason", "required: why, for the experiment's record and the audit log"))
		return
	}
	es, wf, ok := s.experimentBackends(c)
	if !ok {
		return
	}
	ctx, cancel := s.storeCtx(c)
	defer cancel()
	e, ok := loadExperiment(ctx, c, es)
	if !ok {
		return
	}
	if why := decisionRefused(e, action); why != "" {
		writeError(c, newError(http.StatusConflict, CodeConflict, "", "%s", why))
		return
	}
	wctx, wcancel := s.workflowCtx(c)
	defer wcancel()
	if err := wf.SignalExperiment(wctx, e.ID, action, principal(c).Name, body.Reason); err != nil {
		if errors.Is(err, temporalx.ErrExperimentClosed) {
			writeError(c, newError(http.StatusConflict, CodeConflict, "", "experiment %s (%s): %v; nothing awaits a %s", e.ID, e.State, err, action))
			return
		}
		_ = c.Error(err)
		writeError(c, newError(http.StatusServiceUnavailable, CodeStoreUnavailable, "", "experiment %s's workflow could not be signalled (Temporal); nothing changed, retry", e.ID))
		return
	}
	c.JSON(http.StatusAccepted, experimentFromStore(e))
}

// experimentFromStore converts a stored experiment.
func experimentFromStore(e *store.Experiment) Experiment {
	groups := e.Groups
	if groups == nil {
		groups = []vocab.PolicyGroup{}
	}
	return Experiment{
		ID: e.ID, Name: e.Spec.Name, Hypothesis: e.Spec.Hypothesis, State: e.State, Verdict: e.Verdict,
		WorkflowID: e.WorkflowID(), BaselineHash: e.BaselineHash, CandidateHash: e.CandidateHash, Groups: groups,
		Spec: e.Spec, CreatedBy: e.CreatedBy, CreatedAt: e.CreatedAt, StartAt: e.StartAt, SwitchedAt: e.SwitchedAt,
		EndedAt: e.EndedAt, PromotedAt: e.PromotedAt, Baseline: e.Baseline, Outcome: e.Outcome,
	}
}
