package store

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/gpugov/gpugov/internal/vocab"
)

// WaitingCount is the number of pending jobs of one queue with one stored
// wait reason.
type WaitingCount struct {
	Queue  string
	Reason vocab.WaitReason // vocab.ReasonNotYetEvaluated for a job no cycle has explained yet
	Jobs   int64
}

// WaitingCounts counts the pending (submitted or waiting) jobs of every pool
// by queue and the wait reason the last cycle of their shard stored, sorted
// by queue then reason. It is what the gpugov_waiting_jobs gauge reports
// (docs/design.md §10 "Several replicas"): read from the database, it is
// the same on every replica whichever replica ran which shard's cycle, where
// a count kept from the cycles a process ran held only the last shard it
// ran, and went stale on the replicas that ran none. One GROUP BY over the
// pending jobs (index jobs_state_idx). It returns the query's error.
func (s *Store) WaitingCounts(ctx context.Context) ([]WaitingCount, error) {
	rows, err := s.pool.Query(ctx, `
		SELECT queue, coalesce(nullif(reason, ''), $1), count(*)
		FROM jobs WHERE state IN ('submitted', 'waiting')
		GROUP BY 1, 2 ORDER BY 1, 2`, string(vocab.ReasonNotYetEvaluated))
	if err != nil {
		return nil, fmt.Errorf("store: waiting counts: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (WaitingCount, error) {
		var c WaitingCount
		var reason string
		err := r.Scan(&c.Queue, &reason, &c.Jobs)
		c.Reason = vocab.WaitReason(reason)
		return c, err
	})
	if err != nil {
		return nil, fmt.Errorf("store: waiting counts: %w", err)
	}
	return out, nil
}
