-- The scheduling snapshot reads every pending job's stored wait state (its
-- reason, and the digest and instant of its stored explanation: migration
-- 00290) to skip the jobs whose explanation is current (docs/design.md §8,
-- "The whole cycle at scale"). Read from the wide jobs table, that was the
-- costliest statement of a cycle at 100,000 pending jobs: a bitmap heap scan
-- over ~60,000 pages of jobs rows, about half a second of server time. job_queue
-- now mirrors the three columns, so the snapshot reads them with the rest of
-- each pending job's row. A trigger of their own keeps them, fired only when
-- one of them (or the job's state) changes, whoever writes: the other
-- mirrored columns' trigger (jobs_queue_update) is not fired by a cycle's
-- rewrite of an explanation, and stays so. Triggers fire in name order, so
-- jobs_queue_insert and jobs_queue_update have made or removed the
-- job_queue row before jobs_queue_wait_* run.

-- +goose Up
ALTER TABLE job_queue
    ADD COLUMN reason text,
    ADD COLUMN explanation_digest bytea,
    ADD COLUMN explained_at timestamptz;
UPDATE job_queue q SET reason = j.reason, explanation_digest = j.explanation_digest, explained_at = j.explained_at
FROM jobs j WHERE j.id = q.job_id
    AND (j.reason IS NOT NULL OR j.explanation_digest IS NOT NULL OR j.explained_at IS NOT NULL);

-- +goose StatementBegin
CREATE FUNCTION jobs_sync_queue_wait() RETURNS trigger
    LANGUAGE plpgsql AS
$$
BEGIN
    UPDATE job_queue SET reason = NEW.reason, explanation_digest = NEW.explanation_digest,
        explained_at = NEW.explained_at
    WHERE job_id = NEW.id;
    RETURN NULL;
END
$$;
-- +goose StatementEnd

CREATE TRIGGER jobs_queue_wait_insert AFTER INSERT ON jobs FOR EACH ROW
    WHEN (NEW.reason IS NOT NULL OR NEW.explanation_digest IS NOT NULL OR NEW.explained_at IS NOT NULL)
    EXECUTE FUNCTION jobs_sync_queue_wait();
CREATE TRIGGER jobs_queue_wait_update AFTER UPDATE ON jobs FOR EACH ROW
    WHEN ((OLD.state, OLD.reason, OLD.explanation_digest, OLD.explained_at)
        IS DISTINCT FROM (NEW.state, NEW.reason, NEW.explanation_digest, NEW.explained_at))
    EXECUTE FUNCTION jobs_sync_queue_wait();

-- +goose Down
DROP TRIGGER jobs_queue_wait_update ON jobs;
DROP TRIGGER jobs_queue_wait_insert ON jobs;
DROP FUNCTION jobs_sync_queue_wait();
ALTER TABLE job_queue DROP COLUMN reason, DROP COLUMN explanation_digest, DROP COLUMN explained_at;
