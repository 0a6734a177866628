package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/gpugov/gpugov/internal/vocab"
)

// RunSummary is how one run of a job went, as GET /v1/jobs/{id} shows the
// job's latest (Slurm's sacct line of the job's last step).
type RunSummary struct {
	ID        string     `db:"id"`
	Number    int        `db:"run_number"` // 1 for the first run, +1 per requeue or preemption
	StartedAt time.Time  `db:"started_at"`
	EndedAt   *time.Time `db:"ended_at"` // nil while it runs
	// Outcome is succeeded, failed, cancelled or preempted; "" while it runs.
	Outcome vocab.RunOutcome `db:"outcome"`
	// Detail says why it ended that way, e.g. the executor's error or a node failure.
	Detail string `db:"detail"`
}

// LastRun returns the job's latest run, or nil when it never ran. Errors
// are database errors.
func (s *Store) LastRun(ctx context.Context, jobID string) (*RunSummary, error) {
	r, err := queryOne[RunSummary](ctx, s.pool, `
		SELECT id, run_number, started_at, ended_at, coalesce(outcome, '') AS outcome, detail
		FROM runs WHERE job_id = $1 ORDER BY run_number DESC LIMIT 1`, jobID)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("last run of job %s: %w", jobID, err)
	}
	return &r, nil
}
