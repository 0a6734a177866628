-- Recently cancelled jobs, for the workflow reconciler (docs/design.md §3
-- step 1 "Submit"): a job cancelled before its JobWorkflow was started (its
-- submission answered 202, the cancel's own signal-with-start failed) still
-- gets the workflow that records its end; the reconciler lists the jobs
-- cancelled within workflows.ReconcileCancelledWithin, and this index keeps
-- that list from reading every job ever cancelled.

-- +goose Up
CREATE INDEX jobs_cancelled_updated_idx ON jobs (updated_at) WHERE state = 'cancelled';

-- +goose Down
DROP INDEX jobs_cancelled_updated_idx;
