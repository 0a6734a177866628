package governance

import (
	"context"
	"fmt"

	"github.com/gpugov/gpugov/internal/vocab"
)

// StageWriter stores what the configuration sets in the database, where the
// scheduling snapshot reads it (store.Store implements it): pool stages
// (pools.stage, which Plan's Act decision reads) and the low-risk queues
// (queues.low_risk, which the trial stage reads).
type StageWriter interface {
	SetPoolStages(ctx context.Context, stages map[string]vocab.AutomationStage, actor, reason string) ([]string, error)
	SetLowRiskQueues(ctx context.Context, queues []string, actor, reason string) ([]string, error)
}

// Apply writes c's pool stages and low-risk queues through w, auditing each
// real change with actor, and returns the pools and queues it changed. It
// returns the first store error.
func Apply(ctx context.Context, w StageWriter, c *Config, actor, reason string) (pools, queues []string, err error) {
	if pools, err = w.SetPoolStages(ctx, c.Stages(), actor, reason); err != nil {
		return nil, nil, fmt.Errorf("governance: apply pool stages: %w", err)
	}
	if queues, err = w.SetLowRiskQueues(ctx, c.LowRiskQueues, actor, reason); err != nil {
		return pools, nil, fmt.Errorf("governance: apply low-risk queues: %w", err)
	}
	return pools, queues, nil
}
