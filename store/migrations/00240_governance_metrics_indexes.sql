-- What store.GovernanceMetrics (docs/design.md §4, "Governance metrics")
-- reads of one window without scanning the whole history: it finds the
-- window's jobs through jobs_span_idx (00080), then, by job, their
-- allocations (granted in the window without a run: start failures; any in
-- the experiment's pools: the cancel rate's pool membership) and, by
-- allocation, whether a preemption released one. Until now allocations had
-- only the partial index of live allocations per job, and preemptions only
-- that of open ones per allocation.
--
-- Both columns are written once, at insert, so each index costs one entry
-- per allocation or preemption. Built CONCURRENTLY (outside a transaction)
-- so that a large table keeps taking cycles while the index builds.

-- +goose NO TRANSACTION
-- +goose Up
CREATE INDEX CONCURRENTLY IF NOT EXISTS allocations_job_granted_idx ON allocations (job_id, granted_at);
CREATE INDEX CONCURRENTLY IF NOT EXISTS preemptions_allocation_idx ON preemptions (allocation_id);

-- +goose Down
DROP INDEX CONCURRENTLY IF EXISTS preemptions_allocation_idx;
DROP INDEX CONCURRENTLY IF EXISTS allocations_job_granted_idx;
