-- What lets a queue service report (store.QueueReport, docs/design.md §6) over a
-- long window answer in about a second instead of reading every record:
--
-- * report_summaries holds queuereport.Summary values (binary) of past hours
--   and days: per group the counts, wait samples, GPU-seconds and seconds
--   per wait reason of the segment, and its long and open waits one by one
--   with their starvation counts. A report merges the summaries of the full
--   hours and days of its window and computes only its two ends from the
--   records. Summaries are computed by the report code itself (Go), so the
--   definitions stay in one place (internal/queuereport).
-- * report_summary_stale receives a row when a record is written with a time
--   that a stored summary already covers (a late write: a record dated more
--   than 10 minutes before the database clock, or an inventory change, which
--   changes the models of past releases). The next report drops the
--   summaries from that time on and computes them again. The triggers below
--   write it; normal writes are dated now and only compare two timestamps.
--   A late writer takes the shared advisory lock 7143004220512400006, which
--   the summary writer holds exclusively while it consumes the marks and
--   stores new summaries, so that no late write can slip between the records
--   a summary was computed from and the summary's insert.
-- * report_job_span and the GiST index jobs_span_idx find the jobs alive in
--   any past hour ("submitted before its end, not ended before its start")
--   without scanning every job that ended later, which the b-tree on
--   ended_at does for an hour in the middle of the history.
-- * The wait reason not_yet_evaluated: the interval from a job's submit (or
--   requeue) to the first scheduling cycle that evaluates it, written by
--   ApplyCycle when that cycle places the job or gives it a reason. It is
--   never a job's current reason; it makes the time per reason cover every
--   waiting second.

-- +goose Up
ALTER TABLE wait_events DROP CONSTRAINT wait_events_reason_check;
ALTER TABLE wait_events ADD CONSTRAINT wait_events_reason_check CHECK (reason IN ('environment_not_ready',
    'quota_exhausted', 'no_matching_capacity', 'fragmented', 'capacity_busy', 'reserved_for_higher_priority',
    'preemption_in_progress', 'held', 'pool_unavailable', 'not_yet_evaluated'));

-- The instants a job was in the system: [submit_time, ended_at], unbounded
-- while it has not ended (an end before the submit, from disagreeing clocks,
-- is taken as the submit).
CREATE FUNCTION report_job_span(submit_time timestamptz, ended_at timestamptz) RETURNS tstzrange
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    RETURN tstzrange(submit_time, CASE WHEN ended_at IS NULL THEN NULL ELSE greatest(submit_time, ended_at) END, '[]');

CREATE INDEX jobs_span_idx ON jobs USING gist (report_job_span(submit_time, ended_at));

CREATE TABLE report_summaries (
    kind        text        NOT NULL CHECK (kind IN ('hour', 'day')),
    seg_from    timestamptz NOT NULL,
    seg_to      timestamptz NOT NULL CHECK (seg_to > seg_from),
    min_wait_ns bigint      NOT NULL CHECK (min_wait_ns >= 0),
    computed_at timestamptz NOT NULL,
    data        bytea       NOT NULL,
    PRIMARY KEY (kind, seg_from)
);
CREATE INDEX report_summaries_seg_to_idx ON report_summaries (seg_to);

CREATE TABLE report_summary_stale (
    id    bigserial PRIMARY KEY,
    since timestamptz NOT NULL
);

-- report_touch(t) records that data dated t changed: a no-op for t within
-- the last 10 minutes (summaries end at least 15 minutes before the clock),
-- otherwise a mark when a summary covers t.
-- +goose StatementBegin
CREATE FUNCTION report_touch(t timestamptz) RETURNS void
    LANGUAGE plpgsql AS
$$
BEGIN
    IF t IS NULL OR t > clock_timestamp() - interval '10 minutes' THEN
        RETURN;
    END IF;
    PERFORM pg_advisory_xact_lock_shared(7143004220512400006);
    IF EXISTS (SELECT 1 FROM report_summaries WHERE seg_to >= t) THEN
        INSERT INTO report_summary_stale (since) VALUES (t);
    END IF;
END
$$;
-- +goose StatementEnd

-- changed_since returns the earliest of the old and new values of a time
-- that changed, NULL when it did not.
-- +goose StatementBegin
CREATE FUNCTION report_changed_since(old_t timestamptz, new_t timestamptz) RETURNS timestamptz
    LANGUAGE sql IMMUTABLE
    RETURN CASE WHEN old_t IS DISTINCT FROM new_t THEN least(old_t, new_t) END;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE FUNCTION report_touch_jobs() RETURNS trigger
    LANGUAGE plpgsql AS
$$
BEGIN
    IF TG_OP = 'INSERT' THEN
        PERFORM report_touch(least(NEW.submit_time, NEW.ended_at));
    ELSIF OLD.queue IS DISTINCT FROM NEW.queue OR OLD.tier IS DISTINCT FROM NEW.tier
        OR OLD.project IS DISTINCT FROM NEW.project OR OLD.request IS DISTINCT FROM NEW.request THEN
        PERFORM report_touch(least(OLD.submit_time, NEW.submit_time)); -- the job's groups, all its life
    ELSE
        PERFORM report_touch(least(report_changed_since(OLD.submit_time, NEW.submit_time),
            report_changed_since(OLD.ended_at, NEW.ended_at),
            CASE WHEN (OLD.state = 'cancelled') IS DISTINCT FROM (NEW.state = 'cancelled')
                THEN least(OLD.ended_at, NEW.ended_at) END));
    END IF;
    RETURN NULL;
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE FUNCTION report_touch_intervals() RETURNS trigger
    LANGUAGE plpgsql AS
$$
BEGIN
    -- runs and wait_events: an interval [started_at, ended_at) of a job
    IF TG_OP = 'INSERT' THEN
        PERFORM report_touch(least(NEW.started_at, NEW.ended_at));
    ELSIF TG_OP = 'DELETE' OR OLD.job_id IS DISTINCT FROM NEW.job_id THEN
        PERFORM report_touch(OLD.started_at);
    ELSE
        PERFORM report_touch(least(report_changed_since(OLD.started_at, NEW.started_at),
            report_changed_since(OLD.ended_at, NEW.ended_at)));
    END IF;
    RETURN NULL;
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE FUNCTION report_touch_wait_reason() RETURNS trigger
    LANGUAGE plpgsql AS
$$
BEGIN
    PERFORM report_touch(least(OLD.started_at, NEW.started_at));
    RETURN NULL;
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE FUNCTION report_touch_allocations() RETURNS trigger
    LANGUAGE plpgsql AS
$$
BEGIN
    IF TG_OP = 'INSERT' THEN
        PERFORM report_touch(NEW.released_at);
    ELSIF TG_OP = 'DELETE' OR OLD.pool IS DISTINCT FROM NEW.pool OR OLD.node IS DISTINCT FROM NEW.node
        OR OLD.job_id IS DISTINCT FROM NEW.job_id THEN
        PERFORM report_touch(least(OLD.released_at, NEW.released_at));
    ELSE
        PERFORM report_touch(report_changed_since(OLD.released_at, NEW.released_at));
    END IF;
    RETURN NULL;
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE FUNCTION report_touch_everything() RETURNS trigger
    LANGUAGE plpgsql AS
$$
BEGIN
    -- GPU models: every past release on the node may match other jobs now.
    PERFORM report_touch('-infinity');
    RETURN NULL;
END
$$;
-- +goose StatementEnd

-- Updates fire only when a column a report reads changed, so the per-cycle
-- rewrite of reasons and explanations calls no function.
CREATE TRIGGER jobs_report_insert AFTER INSERT ON jobs FOR EACH ROW EXECUTE FUNCTION report_touch_jobs();
CREATE TRIGGER jobs_report_update AFTER UPDATE ON jobs FOR EACH ROW
    WHEN (OLD.submit_time IS DISTINCT FROM NEW.submit_time OR OLD.ended_at IS DISTINCT FROM NEW.ended_at
        OR (OLD.state = 'cancelled') IS DISTINCT FROM (NEW.state = 'cancelled')
        OR OLD.queue IS DISTINCT FROM NEW.queue OR OLD.tier IS DISTINCT FROM NEW.tier
        OR OLD.project IS DISTINCT FROM NEW.project OR OLD.request IS DISTINCT FROM NEW.request)
    EXECUTE FUNCTION report_touch_jobs();
CREATE TRIGGER runs_report_insert AFTER INSERT ON runs FOR EACH ROW EXECUTE FUNCTION report_touch_intervals();
CREATE TRIGGER runs_report_change AFTER UPDATE OR DELETE ON runs FOR EACH ROW
    EXECUTE FUNCTION report_touch_intervals();
CREATE TRIGGER wait_events_report_insert AFTER INSERT ON wait_events FOR EACH ROW
    EXECUTE FUNCTION report_touch_intervals();
CREATE TRIGGER wait_events_report_change AFTER UPDATE OR DELETE ON wait_events FOR EACH ROW
    EXECUTE FUNCTION report_touch_intervals();
CREATE TRIGGER wait_events_report_reason AFTER UPDATE ON wait_events FOR EACH ROW
    WHEN (OLD.reason IS DISTINCT FROM NEW.reason) EXECUTE FUNCTION report_touch_wait_reason();
CREATE TRIGGER allocations_report_insert AFTER INSERT ON allocations FOR EACH ROW
    WHEN (NEW.released_at IS NOT NULL) EXECUTE FUNCTION report_touch_allocations();
CREATE TRIGGER allocations_report_change AFTER UPDATE OR DELETE ON allocations FOR EACH ROW
    EXECUTE FUNCTION report_touch_allocations();
CREATE TRIGGER gpus_report_insert AFTER INSERT OR DELETE ON gpus FOR EACH ROW
    EXECUTE FUNCTION report_touch_everything();
CREATE TRIGGER gpus_report_update AFTER UPDATE ON gpus FOR EACH ROW
    WHEN (OLD.model IS DISTINCT FROM NEW.model OR OLD.node IS DISTINCT FROM NEW.node)
    EXECUTE FUNCTION report_touch_everything();

-- +goose Down
DROP TRIGGER gpus_report_update ON gpus;
DROP TRIGGER gpus_report_insert ON gpus;
DROP TRIGGER allocations_report_change ON allocations;
DROP TRIGGER allocations_report_insert ON allocations;
DROP TRIGGER wait_events_report_reason ON wait_events;
DROP TRIGGER wait_events_report_change ON wait_events;
DROP TRIGGER wait_events_report_insert ON wait_events;
DROP TRIGGER runs_report_change ON runs;
DROP TRIGGER runs_report_insert ON runs;
DROP TRIGGER jobs_report_update ON jobs;
DROP TRIGGER jobs_report_insert ON jobs;
DROP FUNCTION report_touch_everything();
DROP FUNCTION report_touch_allocations();
DROP FUNCTION report_touch_wait_reason();
DROP FUNCTION report_touch_intervals();
DROP FUNCTION report_touch_jobs();
DROP FUNCTION report_changed_since(timestamptz, timestamptz);
DROP FUNCTION report_touch(timestamptz);
DROP TABLE report_summary_stale;
DROP TABLE report_summaries;
DROP INDEX jobs_span_idx;
DROP FUNCTION report_job_span(timestamptz, timestamptz);
DELETE FROM wait_events WHERE reason = 'not_yet_evaluated';
ALTER TABLE wait_events DROP CONSTRAINT wait_events_reason_check;
ALTER TABLE wait_events ADD CONSTRAINT wait_events_reason_check CHECK (reason IN ('environment_not_ready',
    'quota_exhausted', 'no_matching_capacity', 'fragmented', 'capacity_busy', 'reserved_for_higher_priority',
    'preemption_in_progress', 'held', 'pool_unavailable'));
