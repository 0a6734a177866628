-- Reclaim evidence that matches the work, disputes after a release, and a
-- readable audit (issue #13 items 5 and 7; docs/design.md §3 step 5 and
-- invariant 6).
--
-- runs.progress_step / progress_at: the step the run's executor last
-- heartbeated (progress lines of the job protocol, the simulated executor's
-- steps) as the reclaim scan read it, and the scan instant at which it was
-- first seen to advance: output, so a run reporting progress is not idle.
--
-- allocations.completed_*: the owner's business-complete declaration
-- (POST /v1/jobs/{id}/complete: work done, cleanup pending), which the next
-- reclaim scan classifies `completed`.
--
-- reclaims.disputed_at and dispute_*: when the owner disputed a reclaim
-- (kept it before the release, or disputed the release within the policy's
-- reclaim.dispute_window_s), and an operator's rejection of the dispute. A
-- dispute counts as a false reclaim unless rejected (store.FalseReclaims).
--
-- audit_log indexes serve GET /v1/audit's filters (action, actor, time),
-- newest first.

-- +goose Up
ALTER TABLE runs
    ADD COLUMN progress_step bigint,
    ADD COLUMN progress_at   timestamptz;

ALTER TABLE allocations
    ADD COLUMN completed_at     timestamptz,
    ADD COLUMN completed_by     text NOT NULL DEFAULT '',
    ADD COLUMN completed_reason text NOT NULL DEFAULT '';

ALTER TABLE reclaims
    ADD COLUMN disputed_at           timestamptz,
    ADD COLUMN dispute_after_release boolean NOT NULL DEFAULT false,
    ADD COLUMN dispute_rejected_by   text    NOT NULL DEFAULT '',
    ADD COLUMN dispute_rejected_at   timestamptz,
    ADD COLUMN dispute_rejection     text    NOT NULL DEFAULT '';
-- Disputes recorded before this migration were keeps: their decision time
-- is when they were disputed.
UPDATE reclaims SET disputed_at = coalesce(decided_at, updated_at) WHERE disputed;
ALTER TABLE reclaims ADD CONSTRAINT reclaims_disputed_at_check CHECK (disputed = (disputed_at IS NOT NULL));
ALTER TABLE reclaims ADD CONSTRAINT reclaims_rejection_check CHECK (dispute_rejected_at IS NULL OR disputed);
CREATE INDEX reclaims_disputed_idx ON reclaims (disputed_at) WHERE disputed;

CREATE INDEX audit_log_action_idx ON audit_log (action, id);
CREATE INDEX audit_log_actor_idx ON audit_log (actor, id);
CREATE INDEX audit_log_at_idx ON audit_log (at, id);

-- +goose Down
DROP INDEX audit_log_at_idx;
DROP INDEX audit_log_actor_idx;
DROP INDEX audit_log_action_idx;
DROP INDEX reclaims_disputed_idx;
ALTER TABLE reclaims DROP CONSTRAINT reclaims_rejection_check;
ALTER TABLE reclaims DROP CONSTRAINT reclaims_disputed_at_check;
ALTER TABLE reclaims
    DROP COLUMN disputed_at, DROP COLUMN dispute_after_release, DROP COLUMN dispute_rejected_by,
    DROP COLUMN dispute_rejected_at, DROP COLUMN dispute_rejection;
ALTER TABLE allocations DROP COLUMN completed_at, DROP COLUMN completed_by, DROP COLUMN completed_reason;
ALTER TABLE runs DROP COLUMN progress_step, DROP COLUMN progress_at;
