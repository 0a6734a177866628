-- PruneDecisions deletes decisions older than the retention in batches,
-- oldest first (SELECT ... WHERE at < cutoff ORDER BY at LIMIT n), as
-- PruneGPUSamples does for gpu_samples (00120): a btree index on at serves
-- that as an ordered range scan that stops after n rows. LastDecision reads
-- a job's latest decisions through decisions_job_idx (job_id, at) of 00001.
--
-- Built CONCURRENTLY (outside a transaction) so that a large table keeps
-- taking decisions while the index builds.

-- +goose NO TRANSACTION
-- +goose Up
CREATE INDEX CONCURRENTLY IF NOT EXISTS decisions_at_idx ON decisions (at);

-- +goose Down
DROP INDEX CONCURRENTLY IF EXISTS decisions_at_idx;
