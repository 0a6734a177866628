-- +goose Up
-- jobs.started_at: when the job's first run started (Slurm's sacct Start), set
-- by MarkRunning on the first run only; NULL while it never ran. Together with
-- jobs.ended_at (00060) the API answers when a job started and ended.
ALTER TABLE jobs ADD COLUMN IF NOT EXISTS started_at timestamptz;
UPDATE jobs j SET started_at = r.first
FROM (SELECT job_id, min(started_at) AS first FROM runs GROUP BY job_id) r
WHERE r.job_id = j.id AND j.started_at IS NULL;

-- +goose Down
ALTER TABLE jobs DROP COLUMN IF EXISTS started_at;
