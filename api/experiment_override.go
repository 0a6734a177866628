package api

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/gpugov/gpugov/internal/temporalx"
	"github.com/gpugov/gpugov/store"
)

// experimentEnder is the part of the store that ends the experiments an
// override_reason change overrode: the holding experiments, and the step
// the ExperimentWorkflow's checks run (store.VerifyExperimentPolicy).
type experimentEnder interface {
	HoldingExperiments(ctx context.Context) ([]store.Experiment, error)
	VerifyExperimentPolicy(ctx context.Context, id string, at time.Time) (*store.Experiment, error)
}

// StoreFrom's value ends overridden experiments.
var _ experimentEnder = pgStore{}

// endOverriddenExperiments runs right after a change an admin forced
// through with override_reason (POST /v1/policies, PUT /v1/quotas, a quota
// request's approval) committed: every holding experiment whose expected
// policy is no longer in force ends now, as its workflow's next check
// would end it (store.VerifyExperimentPolicy: state aborted, a
// policy_changed event naming the version now active, nothing restored),
// and its workflow is sent an abort (ActionAbort, by the admin), which
// finds the experiment ended and so ends the workflow at once, even one
// waiting on a kept verdict with no timer. what names the change for the
// signal's reason ("policy 1a2b…", "quota a100/vision"). The change is committed whatever happens here: a
// failure is logged on the request (the workflow's next check ends the
// experiment all the same) and never changes the answer.
func (s *Server) endOverriddenExperiments(ctx context.Context, c *gin.Context, what string) {
	es, ok := s.store.(experimentEnder)
	if !ok {
		_ = c.Error(fmt.Errorf("api: %T cannot end the overridden experiments", s.store))
		return
	}
	holding, err := es.HoldingExperiments(ctx)
	if err != nil {
		_ = c.Error(fmt.Errorf("api: end overridden experiments: %w", err))
		return
	}
	for i := range holding {
		e, err := es.VerifyExperimentPolicy(ctx, holding[i].ID, s.now())
		if err != nil {
			_ = c.Error(fmt.Errorf("api: end overridden experiment %s: %w", holding[i].ID, err))
			continue
		}
		if e.HoldsPools() {
			continue // its policy is still in force (a quota change another variable's experiment tolerates)
		}
		wf, ok := s.workflows.(ExperimentWorkflows)
		if !ok {
			continue
		}
		wctx, cancel := s.workflowCtx(c)
		err = wf.SignalExperiment(wctx, e.ID, ActionAbort, principal(c).Name, "overridden: "+what)
		cancel()
		if err != nil && !errors.Is(err, temporalx.ErrExperimentClosed) {
			_ = c.Error(fmt.Errorf("api: signal overridden experiment %s (ended in the store; its workflow ends at its next step): %w", e.ID, err))
		}
	}
}
