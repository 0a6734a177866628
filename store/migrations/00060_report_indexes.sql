-- What the queue service report (store.LoadReportInput, docs/design.md §6) needs to
-- read one window [from, end) of history without scanning all of it:
--
-- * jobs.ended_at, the instant a job left the system (succeeded, failed or
--   cancelled). Every final transition of the store (FinishRun,
--   ReleasePlacement, CancelJob) writes updated_at = that instant in the same
--   UPDATE, so the trigger below copies it; later updated_at bumps (a late
--   checkpoint or resume record) no longer move the end. A job is in a window
--   when submit_time < to and (ended_at IS NULL OR ended_at >= from).
-- * btree indexes on the instants each range query starts from: jobs that
--   ended at or after the window start (or have not ended: NULLs are in the
--   same index), wait events that ended at or after it (open ones are in
--   wait_events_one_open_per_job), allocations released in the window.
--
-- Each index costs one more entry on the non-HOT updates that already change
-- an indexed column (a job's state or reason, an event's or allocation's
-- close), never on the per-cycle rewrite of unchanged rows.

-- +goose Up
ALTER TABLE jobs ADD COLUMN IF NOT EXISTS ended_at timestamptz;
UPDATE jobs SET ended_at = updated_at WHERE ended_at IS NULL AND state IN ('succeeded', 'failed', 'cancelled');

-- +goose StatementBegin
CREATE FUNCTION jobs_set_ended_at() RETURNS trigger
    LANGUAGE plpgsql AS
$$
BEGIN
    NEW.ended_at := NEW.updated_at;
    RETURN NEW;
END
$$;
-- +goose StatementEnd

-- Fires only for a row that becomes final without an end, so the per-cycle
-- updates of waiting jobs never call the function.
CREATE TRIGGER jobs_ended_at_insert BEFORE INSERT ON jobs FOR EACH ROW
    WHEN (NEW.ended_at IS NULL AND NEW.state IN ('succeeded', 'failed', 'cancelled'))
    EXECUTE FUNCTION jobs_set_ended_at();
CREATE TRIGGER jobs_ended_at_update BEFORE UPDATE ON jobs FOR EACH ROW
    WHEN (NEW.ended_at IS NULL AND NEW.state IN ('succeeded', 'failed', 'cancelled'))
    EXECUTE FUNCTION jobs_set_ended_at();

CREATE INDEX jobs_ended_at_idx ON jobs (ended_at);
CREATE INDEX wait_events_ended_at_idx ON wait_events (ended_at) WHERE ended_at IS NOT NULL;
CREATE INDEX allocations_released_at_idx ON allocations (released_at) WHERE released_at IS NOT NULL;

-- +goose Down
DROP INDEX allocations_released_at_idx;
DROP INDEX wait_events_ended_at_idx;
DROP INDEX jobs_ended_at_idx;
DROP TRIGGER jobs_ended_at_update ON jobs;
DROP TRIGGER jobs_ended_at_insert ON jobs;
DROP FUNCTION jobs_set_ended_at();
ALTER TABLE jobs DROP COLUMN ended_at;
