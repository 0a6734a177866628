package store

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/gpugov/gpugov/internal/vocab"
)

// TraceJob is one recorded job as a trace export (`gpugov simulate
// --from-store`) reads it: its request, tier and state, and its life's
// instants.
type TraceJob struct {
	ID         string         `db:"id"`
	Tier       vocab.Tier     `db:"-"`
	TierName   string         `db:"tier"`
	State      vocab.JobState `db:"state"`
	GPUs       int            `db:"gpus"`      // GPUs requested
	GPUMilli   int            `db:"gpu_milli"` // milli-GPU per GPU; 0 means whole GPUs
	GPUModels  []string       `db:"gpu_models"`
	CPUMilli   int64          `db:"cpu_milli"`
	MemoryMiB  int64          `db:"memory_mib"`
	Pool       string         `db:"pool"` // the pool the request names; "" for any
	SubmitTime time.Time      `db:"submit_time"`
	StartedAt  *time.Time     `db:"started_at"` // the first run's start; nil when it never ran
	EndedAt    *time.Time     `db:"ended_at"`   // when it left the system; nil while pending or running
	// RunSeconds is the time its runs held GPUs, summed (a run still going
	// counts to now); Runs how many it had.
	RunSeconds float64 `db:"run_s"`
	Runs       int     `db:"runs"`
}

// TraceJobs returns the jobs submitted in [since, until), oldest first (by
// submit time, then ID), as recorded at now, limited to pool's jobs when
// pool is not "": those whose request names it or that held an allocation
// there. Errors: until not after since, since after now (ErrInvalid naming
// since or until), an unknown stored tier, or database errors, wrapped with
// "trace jobs".
func (s *Store) TraceJobs(ctx context.Context, since, until, now time.Time, pool string) ([]TraceJob, error) {
	switch {
	case since.IsZero():
		return nil, fmt.Errorf("store: trace jobs: %w", invalidf("since", "since is required"))
	case !until.After(since):
		return nil, fmt.Errorf("store: trace jobs: %w", invalidf("until", "until (%s) must be after since (%s)",
			until.UTC().Format(time.RFC3339), since.UTC().Format(time.RFC3339)))
	case now.Before(since):
		return nil, fmt.Errorf("store: trace jobs: %w", invalidf("since", "since (%s) is after now (%s)",
			since.UTC().Format(time.RFC3339), now.UTC().Format(time.RFC3339)))
	}
	var jobs []TraceJob
	err := pgx.BeginTxFunc(ctx, s.pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly},
		func(tx pgx.Tx) error {
			var err error
			jobs, err = queryAll[TraceJob](ctx, tx, `
				SELECT j.id, j.tier, j.state, j.submit_time, j.started_at, j.ended_at,
					coalesce((j.request->>'gpus')::int4, 0) AS gpus, coalesce((j.request->>'gpu_milli')::int4, 0) AS gpu_milli,
					coalesce(j.request->'gpu_models', '[]'::jsonb) AS gpu_models,
					coalesce((j.request->>'cpu_milli')::int8, 0) AS cpu_milli,
					coalesce((j.request->>'memory_mib')::int8, 0) AS memory_mib, coalesce(j.request->>'pool', '') AS pool,
					coalesce((SELECT sum(greatest(0, extract(epoch FROM coalesce(r.ended_at, $3) - r.started_at)))
						FROM runs r WHERE r.job_id = j.id), 0)::float8 AS run_s,
					(SELECT count(*) FROM runs r WHERE r.job_id = j.id)::int4 AS runs
				FROM jobs j
				WHERE report_job_span(j.submit_time, j.ended_at) && tstzrange($1, $2, '[)')
					AND j.submit_time >= $1 AND j.submit_time < $2
					AND ($4 = '' OR j.request->>'pool' = $4
						OR EXISTS (SELECT 1 FROM allocations a WHERE a.job_id = j.id AND a.pool = $4))
				ORDER BY j.submit_time, j.id`, since, until, now, pool)
			return err
		})
	if err != nil {
		return nil, fmt.Errorf("store: trace jobs: %w", err)
	}
	for i := range jobs {
		j := &jobs[i]
		if j.Tier, err = vocab.ParseTier(j.TierName); err != nil {
			return nil, fmt.Errorf("store: trace jobs: job %s: %w", j.ID, err)
		}
		if j.GPUModels == nil {
			j.GPUModels = []string{}
		}
		j.SubmitTime, j.StartedAt, j.EndedAt = j.SubmitTime.UTC(), utcPtr(j.StartedAt), utcPtr(j.EndedAt)
	}
	return jobs, nil
}
