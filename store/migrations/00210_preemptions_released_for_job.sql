-- Borrowing that gives back (docs/design.md §5): the snapshot reads, for
-- each pending job, the latest release of a victim of a preemption carried
-- out for it during its current wait, so that a lender keeps its claim on
-- its lent quota until it is placed. This index serves that lookup by job.

-- +goose Up
CREATE INDEX preemptions_released_for_job_idx ON preemptions (for_job_id, ended_at) WHERE state = 'released';

-- +goose Down
DROP INDEX preemptions_released_for_job_idx;
