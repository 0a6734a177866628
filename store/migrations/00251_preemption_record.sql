-- The complete preemption record (issue #13 item 4, docs/design.md §5 "The
-- preemption record"):
--
--   resume_verified       the next run started at the saved step AND was seen
--                         progressing past it (VerifyResume); only then is the
--                         resume counted as verified evidence.
--   candidates            the running jobs the plan weighed on the chosen
--                         target, each with its estimated loss, whether it was
--                         chosen, and why it was not eligible (jsonb list).
--   final_state           the victim job's final state (succeeded, failed,
--                         cancelled), filled when the job ends after the
--                         preemption's release and its verify-resume step;
--   final_at              when it ended;
--   failures_since_resume failed runs of the victim started after the resume,
--                         plus failed or wrong-step resumes observed for it
--                         since (resume_evidence);
--   output_affected       whether the final output was affected: true when the
--                         resume failed (wrong step, or no progress past the
--                         saved step) or the job ended failed with failures
--                         since the resume; false otherwise; output_note says
--                         which.
--
-- gpugov_fill_preemption_final(job) fills the four final columns of the
-- job's released, finished preemptions once the job has a final state; the
-- jobs trigger below calls it when a job ends, and FinishPreemption when the
-- job ended before the verify-resume step finished.

-- +goose Up
ALTER TABLE preemptions
    ADD COLUMN resume_verified       boolean,
    ADD COLUMN candidates            jsonb   NOT NULL DEFAULT '[]' CHECK (jsonb_typeof(candidates) = 'array'),
    ADD COLUMN final_state           text CHECK (final_state IN ('succeeded', 'failed', 'cancelled')),
    ADD COLUMN final_at              timestamptz,
    ADD COLUMN failures_since_resume integer CHECK (failures_since_resume >= 0),
    ADD COLUMN output_affected       boolean,
    ADD COLUMN output_note           text    NOT NULL DEFAULT '';

-- +goose StatementBegin
CREATE FUNCTION gpugov_fill_preemption_final(job text) RETURNS void
    LANGUAGE plpgsql AS
$$
BEGIN
    WITH j AS (SELECT id, state, coalesce(ended_at, updated_at) AS updated_at FROM jobs WHERE id = job AND state IN ('succeeded', 'failed', 'cancelled')),
    p AS (
        SELECT p.id, j.state, j.updated_at AS at, p.outcome, p.resumed_correctly, p.resume_verified,
            (SELECT count(*) FROM runs r WHERE r.job_id = j.id AND r.outcome = 'failed'
                AND r.started_at >= coalesce(p.resumed_at, p.released_at))
            + (SELECT count(*) FROM resume_evidence e WHERE e.job_id = j.id AND e.outcome <> 'verified'
                AND e.key <> p.id AND e.at > coalesce(p.resumed_at, p.released_at)) AS failures
        FROM preemptions p, j
        WHERE p.victim_job_id = j.id AND p.released_at IS NOT NULL AND p.finished_at IS NOT NULL
            AND p.final_state IS NULL)
    UPDATE preemptions t SET final_state = p.state, final_at = greatest(p.at, t.finished_at),
        failures_since_resume = p.failures,
        output_affected = CASE
            WHEN p.resumed_correctly IS FALSE THEN true
            WHEN p.resumed_correctly AND p.resume_verified IS FALSE THEN true
            WHEN p.state = 'failed' AND p.failures > 0 THEN true
            ELSE false END,
        output_note = CASE
            WHEN p.resumed_correctly IS FALSE THEN 'affected: the next run resumed from the wrong step'
            WHEN p.resumed_correctly AND p.resume_verified IS FALSE THEN 'affected: the next run did not progress past the saved step'
            WHEN p.state = 'failed' AND p.failures > 0 THEN 'affected: the job failed after the resume (' || p.failures || ' failure(s) since)'
            WHEN p.resume_verified THEN 'not affected: verified resume, job ' || p.state
            ELSE 'not affected as far as seen: the resume was not observed; job ' || p.state END
    FROM p WHERE t.id = p.id;
END
$$;

CREATE FUNCTION jobs_fill_preemption_final() RETURNS trigger
    LANGUAGE plpgsql AS
$$
BEGIN
    PERFORM gpugov_fill_preemption_final(NEW.id);
    RETURN NULL;
END
$$;
-- +goose StatementEnd

CREATE TRIGGER jobs_preemption_final AFTER UPDATE OF state ON jobs
    FOR EACH ROW WHEN (NEW.state IN ('succeeded', 'failed', 'cancelled') AND OLD.state IS DISTINCT FROM NEW.state)
    EXECUTE FUNCTION jobs_fill_preemption_final();

-- +goose Down
DROP TRIGGER jobs_preemption_final ON jobs;
DROP FUNCTION jobs_fill_preemption_final();
DROP FUNCTION gpugov_fill_preemption_final(text);
ALTER TABLE preemptions
    DROP COLUMN resume_verified, DROP COLUMN candidates, DROP COLUMN final_state, DROP COLUMN final_at,
    DROP COLUMN failures_since_resume, DROP COLUMN output_affected, DROP COLUMN output_note;
