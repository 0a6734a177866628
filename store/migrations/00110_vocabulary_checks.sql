-- Every column that holds a term of internal/vocab has a CHECK listing its
-- values, so that store/vocab_drift_test.go can compare the database with
-- the vocabulary (docs/design.md §1). Until now these columns took any text:
--
-- * jobs.reason: a job's current wait reason, one a scheduling cycle gives
--   (never the history-only not_yet_evaluated); NULL while the job is not
--   waiting or has not been evaluated.
-- * job_queue.state and job_queue.tier: the trigger-maintained copy of the
--   pending and active jobs; final jobs are deleted from it.
-- * reclaims.configured_mode and reclaims.stage: the mode the rules gave
--   before stage and protection, and the pool's automation stage; '' is the
--   column default.

-- +goose Up
ALTER TABLE jobs ADD CONSTRAINT jobs_reason_check CHECK (reason IN ('environment_not_ready', 'quota_exhausted',
    'no_matching_capacity', 'fragmented', 'capacity_busy', 'reserved_for_higher_priority', 'preemption_in_progress',
    'held', 'pool_unavailable'));
ALTER TABLE job_queue ADD CONSTRAINT job_queue_state_check CHECK (state IN ('submitted', 'waiting', 'placed', 'running'));
ALTER TABLE job_queue ADD CONSTRAINT job_queue_tier_check CHECK (tier IN ('production', 'key-project', 'standard', 'experiment'));
ALTER TABLE reclaims ADD CONSTRAINT reclaims_configured_mode_check
    CHECK (configured_mode IN ('', 'report', 'notify', 'auto', 'confirm'));
ALTER TABLE reclaims ADD CONSTRAINT reclaims_stage_check CHECK (stage IN ('', 'observe', 'trial', 'automate'));

-- +goose Down
ALTER TABLE reclaims DROP CONSTRAINT reclaims_stage_check;
ALTER TABLE reclaims DROP CONSTRAINT reclaims_configured_mode_check;
ALTER TABLE job_queue DROP CONSTRAINT job_queue_tier_check;
ALTER TABLE job_queue DROP CONSTRAINT job_queue_state_check;
ALTER TABLE jobs DROP CONSTRAINT jobs_reason_check;
