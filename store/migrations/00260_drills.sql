-- Resume drills (issue #13, docs/design.md §5 "Resume drills").
--
-- A drill runs the whole preemption workflow (notify → checkpoint → release
-- → reschedule → verify-resume) on a running checkpointable job with no
-- beneficiary, to earn (or refute) its recovery profile's evidence. It is a
-- preemptions row of kind 'drill': for_job_id and cycle_id are NULL (no job
-- is served, no scheduling cycle opened it) and reason says who asked for
-- it and why. Every other preemption is of kind 'preemption' and keeps both.
--
-- drill_actor is who started the drill (the operator's token name, or
-- 'governance' for an automatic drill of a trial pool). The daily bound on
-- automatic drills per recovery profile reads the drills started since a
-- time: preemptions_drills_idx.

-- +goose Up
ALTER TABLE preemptions
    ADD COLUMN kind        text NOT NULL DEFAULT 'preemption' CHECK (kind IN ('preemption', 'drill')),
    ADD COLUMN drill_actor text NOT NULL DEFAULT '',
    ALTER COLUMN for_job_id DROP NOT NULL,
    ALTER COLUMN cycle_id DROP NOT NULL,
    ADD CONSTRAINT preemptions_kind_beneficiary CHECK (
        (kind = 'preemption' AND for_job_id IS NOT NULL AND cycle_id IS NOT NULL)
        OR (kind = 'drill' AND for_job_id IS NULL AND cycle_id IS NULL));
CREATE INDEX preemptions_drills_idx ON preemptions (started_at, victim_job_id) WHERE kind = 'drill';

-- +goose Down
DROP INDEX preemptions_drills_idx;
DELETE FROM preemptions WHERE kind = 'drill';
ALTER TABLE preemptions
    DROP CONSTRAINT preemptions_kind_beneficiary,
    ALTER COLUMN cycle_id SET NOT NULL,
    ALTER COLUMN for_job_id SET NOT NULL,
    DROP COLUMN drill_actor,
    DROP COLUMN kind;
