-- Notifications for the admins (docs/design.md §3, notifications): an
-- experiment's automatic rollback (experiment.rolled_back) is written to the
-- outbox in the rollback's transaction, for the recipient 'gpugov/admins'
-- (policy.AdminsRecipient, which no project may be named) and no job, and
-- delivered to the policy's notifications.admins webhook as a project's
-- rows are delivered to the project's.

-- +goose Up
ALTER TABLE notifications
    ALTER COLUMN job_id DROP NOT NULL,
    DROP CONSTRAINT notifications_kind_check,
    ADD CONSTRAINT notifications_kind_check CHECK (kind IN ('job.wait_reason', 'job.placed', 'job.preemption_notice',
        'job.reclaim_notice', 'job.resumed', 'experiment.rolled_back')),
    ADD CONSTRAINT notifications_job_unless_admins CHECK ((job_id IS NULL) = (project = 'gpugov/admins'));

-- +goose Down
DELETE FROM notifications WHERE job_id IS NULL;
ALTER TABLE notifications
    DROP CONSTRAINT notifications_job_unless_admins,
    DROP CONSTRAINT notifications_kind_check,
    ADD CONSTRAINT notifications_kind_check CHECK (kind IN ('job.wait_reason', 'job.placed', 'job.preemption_notice',
        'job.reclaim_notice', 'job.resumed')),
    ALTER COLUMN job_id SET NOT NULL;
