-- PruneGPUSamples deletes gpu_samples older than the retention in batches,
-- oldest first (SELECT ... WHERE at < cutoff ORDER BY at LIMIT n). A btree
-- index on at serves that as an ordered range scan that stops after n rows.
-- The BRIN index of 00050 cannot: it returns whole block ranges unordered,
-- and once pruning runs, new samples reuse the pages freed at the head of
-- the table, so each block range soon spans old and new times and the BRIN
-- index stops excluding anything. The btree replaces it; each sample insert
-- pays one more index entry.
--
-- Built CONCURRENTLY (outside a transaction) so that a large table keeps
-- taking samples while the index builds.

-- +goose NO TRANSACTION
-- +goose Up
CREATE INDEX CONCURRENTLY IF NOT EXISTS gpu_samples_at_idx ON gpu_samples (at);
DROP INDEX CONCURRENTLY IF EXISTS gpu_samples_at_brin;

-- +goose Down
CREATE INDEX CONCURRENTLY IF NOT EXISTS gpu_samples_at_brin ON gpu_samples USING brin (at);
DROP INDEX CONCURRENTLY IF EXISTS gpu_samples_at_idx;
