-- Submitter notifications (docs/design.md §3, notifications): a transactional
-- outbox. Each row is written in the transaction of the transition it tells
-- of (a wait reason that asks the submitter to act, a placement, a
-- preemption or reclaim notice, a resume after preemption), so a committed
-- transition always has its notification and a rolled-back one never does.
-- The NotificationDispatch workflow delivers a project's pending rows in seq
-- order (writers of one project take an advisory lock first, so seq order is
-- commit order within a project) to the project's webhook, records every
-- attempt, and after the last failed attempt marks the row dead with its
-- last error: the dead-letter record. A project without a webhook gets its
-- rows marked unrouted. Final rows are pruned after the policy's retention.

-- +goose Up
CREATE TABLE notifications (
    seq             bigserial PRIMARY KEY,
    id              text COLLATE "C" NOT NULL UNIQUE,
    project         text COLLATE "C" NOT NULL,
    job_id          text COLLATE "C" NOT NULL REFERENCES jobs (id),
    kind            text NOT NULL CHECK (kind IN ('job.wait_reason', 'job.placed', 'job.preemption_notice',
        'job.reclaim_notice', 'job.resumed')),
    data            jsonb NOT NULL DEFAULT '{}' CHECK (jsonb_typeof(data) = 'object'),
    created_at      timestamptz NOT NULL,
    state           text NOT NULL DEFAULT 'pending' CHECK (state IN ('pending', 'delivered', 'dead', 'unrouted')),
    attempts        integer NOT NULL DEFAULT 0 CHECK (attempts >= 0),
    last_status     integer,
    last_error      text,
    last_attempt_at timestamptz,
    finished_at     timestamptz,
    CONSTRAINT notifications_final_has_time CHECK ((state = 'pending') = (finished_at IS NULL))
);
-- The dispatcher's scan and each project's delivery order.
CREATE INDEX notifications_pending_idx ON notifications (project, seq) WHERE state = 'pending';
-- GET /v1/notifications by project, newest first.
CREATE INDEX notifications_project_idx ON notifications (project, seq DESC);
-- A job's notifications (the receiver's per-job order, the tests).
CREATE INDEX notifications_job_idx ON notifications (job_id, seq);
-- Retention.
CREATE INDEX notifications_finished_idx ON notifications (finished_at) WHERE finished_at IS NOT NULL;

-- +goose Down
DROP TABLE notifications;
