-- Preemption and reclaim records (issue #4).
--
-- preemptions already exists (00001: one row per victim allocation a cycle
-- proposed with Act, opened by ApplyCycle and closed by releaseAllocation).
-- This migration widens it into the full record of a PreemptionWorkflow:
-- the trigger job's queue, the victim's run, the last valid checkpoint at
-- the notice, the time of each step (notify, save, release, reschedule,
-- resume, back at the step reached), whether the resume started at the saved
-- step, the recompute time, the failures, and the effective run loss by parts.
-- It also holds the "would preempt" records of pools in the observe stage
-- (state 'observed', closed at once so that they never count as in progress).
--
-- reclaims is one row per allocation a ReclaimWorkflow handled: the class
-- and the evidence it was based on, the mode config and stage gave it, the
-- notice, the owner's dispute (a false reclaim) or the operator's decision,
-- and the GPUs released.
--
-- Units: seconds, GPU-seconds, GPUs (milli-GPU / 1000).

-- +goose Up
ALTER TABLE preemptions DROP CONSTRAINT preemptions_state_check;
ALTER TABLE preemptions ADD CONSTRAINT preemptions_state_check
    CHECK (state IN ('in_progress', 'released', 'aborted', 'observed'));
ALTER TABLE preemptions
    ADD COLUMN pool                text             NOT NULL DEFAULT '',
    ADD COLUMN for_queue           text             NOT NULL DEFAULT '',
    ADD COLUMN victim_queue        text             NOT NULL DEFAULT '',
    ADD COLUMN workflow_id         text,
    ADD COLUMN outcome             text CHECK (outcome IN ('completed', 'resume_failed', 'resume_not_observed',
        'aborted_no_checkpoint', 'aborted_ineligible', 'victim_ended', 'would_preempt')),
    ADD COLUMN run_id              text COLLATE "C",
    ADD COLUMN gpus                double precision,
    ADD COLUMN run_started_at      timestamptz,
    ADD COLUMN accrued_aging_s     double precision,
    ADD COLUMN checkpoint_at_notice jsonb,
    ADD COLUMN saved_checkpoint    jsonb,
    ADD COLUMN checkpoint_in_grace boolean,
    ADD COLUMN step_at_notice      bigint,
    ADD COLUMN notified_at         timestamptz,
    ADD COLUMN saved_at            timestamptz,
    ADD COLUMN released_at         timestamptz,
    ADD COLUMN rescheduled_at      timestamptz,
    ADD COLUMN resumed_at          timestamptz,
    ADD COLUMN passed_at           timestamptz,
    ADD COLUMN resumed_run_id      text COLLATE "C",
    ADD COLUMN resumed_from_step   bigint,
    ADD COLUMN resumed_correctly   boolean,
    ADD COLUMN lost_s              double precision,
    ADD COLUMN save_restore_s      double precision,
    ADD COLUMN recompute_s         double precision,
    ADD COLUMN failures            jsonb            NOT NULL DEFAULT '[]',
    ADD COLUMN finished_at         timestamptz;
-- One "would preempt" record per (trigger job, victim allocation): an
-- observe-stage pool proposes the same preemption every cycle.
CREATE UNIQUE INDEX preemptions_one_observed ON preemptions (for_job_id, allocation_id) WHERE state = 'observed';
CREATE INDEX preemptions_started_idx ON preemptions (started_at DESC, id);
CREATE INDEX preemptions_victim_idx ON preemptions (victim_job_id, started_at);

CREATE TABLE reclaims (
    id               text COLLATE "C" PRIMARY KEY,
    allocation_id    text COLLATE "C" NOT NULL UNIQUE REFERENCES allocations (id),
    job_id           text COLLATE "C" NOT NULL REFERENCES jobs (id),
    project          text COLLATE "C" NOT NULL,
    queue            text COLLATE "C" NOT NULL,
    pool             text COLLATE "C" NOT NULL,
    node             text COLLATE "C" NOT NULL DEFAULT '',
    class            text             NOT NULL CHECK (class IN ('failed', 'idle', 'completed')),
    mode             text             NOT NULL CHECK (mode IN ('report', 'notify', 'auto', 'confirm')),
    configured_mode  text             NOT NULL DEFAULT '',
    stage            text             NOT NULL DEFAULT '',
    basis            text             NOT NULL DEFAULT '',
    evidence         jsonb            NOT NULL DEFAULT '{}',
    gpus             double precision NOT NULL DEFAULT 0,
    state            text             NOT NULL DEFAULT 'open' CHECK (state IN ('open', 'reported', 'notified',
        'awaiting_confirmation', 'released', 'kept', 'expired', 'resolved')),
    workflow_id      text             NOT NULL DEFAULT '',
    detected_at      timestamptz      NOT NULL,
    notice_at        timestamptz,
    notice_deadline  timestamptz,
    decided_by       text             NOT NULL DEFAULT '',
    decided_at       timestamptz,
    released_at      timestamptz,
    gpus_released    double precision NOT NULL DEFAULT 0,
    disputed         boolean          NOT NULL DEFAULT false,
    dispute_by       text             NOT NULL DEFAULT '',
    dispute_reason   text             NOT NULL DEFAULT '',
    detail           text             NOT NULL DEFAULT '',
    updated_at       timestamptz      NOT NULL
);
CREATE INDEX reclaims_detected_idx ON reclaims (detected_at DESC, id);
CREATE INDEX reclaims_class_mode_idx ON reclaims (class, mode);

-- +goose Down
DROP TABLE reclaims;
DROP INDEX preemptions_victim_idx;
DROP INDEX preemptions_started_idx;
DROP INDEX preemptions_one_observed;
DELETE FROM preemptions WHERE state = 'observed';
ALTER TABLE preemptions
    DROP COLUMN pool, DROP COLUMN for_queue, DROP COLUMN victim_queue, DROP COLUMN workflow_id, DROP COLUMN outcome,
    DROP COLUMN run_id, DROP COLUMN gpus, DROP COLUMN run_started_at, DROP COLUMN accrued_aging_s,
    DROP COLUMN checkpoint_at_notice, DROP COLUMN saved_checkpoint, DROP COLUMN checkpoint_in_grace,
    DROP COLUMN step_at_notice, DROP COLUMN notified_at, DROP COLUMN saved_at, DROP COLUMN released_at,
    DROP COLUMN rescheduled_at, DROP COLUMN resumed_at, DROP COLUMN passed_at, DROP COLUMN resumed_run_id,
    DROP COLUMN resumed_from_step, DROP COLUMN resumed_correctly, DROP COLUMN lost_s, DROP COLUMN save_restore_s,
    DROP COLUMN recompute_s, DROP COLUMN failures, DROP COLUMN finished_at;
ALTER TABLE preemptions DROP CONSTRAINT preemptions_state_check;
ALTER TABLE preemptions ADD CONSTRAINT preemptions_state_check CHECK (state IN ('in_progress', 'released', 'aborted'));
