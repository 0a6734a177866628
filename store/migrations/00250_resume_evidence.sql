-- Recovery profiles and their evidence (issue #13, docs/design.md §1
-- "recovery profile", §5 "The evidence rule").
--
-- Every job belongs to one recovery profile, stored as jobs.recovery.profile:
-- "<project>/<name>", the name being the job's declared recovery.profile, or
-- else the base name of its command's first word, or "simulated" for a job
-- without a command (store.ProfileOf; this migration gives the jobs stored
-- before it the same default).
--
-- resume_evidence holds one row per observed resume of a job — after a
-- preemption, after an executor crash or agent restart (a retried run
-- attempt), after a drill — with what it showed: verified (the next run
-- started at the saved step and progressed past it), failed or wrong_step.
-- The row is keyed by its source (the preemption, the crashed run), so a
-- retried writer stores it once. The preemption gate reads a profile's rows
-- over the policy's evidence window: N verified resumes and a failure rate
-- at most x (preemption.min_verified_resumes, max_resume_failure_rate,
-- evidence_window_s).

-- +goose Up
CREATE TABLE resume_evidence (
    key         text COLLATE "C" PRIMARY KEY,
    job_id      text COLLATE "C" NOT NULL REFERENCES jobs (id),
    profile     text COLLATE "C" NOT NULL CHECK (profile <> ''),
    kind        text NOT NULL CHECK (kind IN ('preemption', 'crash', 'drill')),
    outcome     text NOT NULL CHECK (outcome IN ('verified', 'failed', 'wrong_step')),
    at          timestamptz NOT NULL,
    detail      text NOT NULL DEFAULT '',
    recorded_at timestamptz NOT NULL DEFAULT now()
);
-- A profile's record over a window (store.ProfileEvidence).
CREATE INDEX resume_evidence_profile_idx ON resume_evidence (profile, at);
-- The scheduling snapshot's per-cycle count of every profile within the
-- window: an index-only range scan on at.
CREATE INDEX resume_evidence_at_idx ON resume_evidence (at) INCLUDE (profile, outcome);
-- A job's own resumes (the preemption record's failures since a resume).
CREATE INDEX resume_evidence_job_idx ON resume_evidence (job_id, at);

UPDATE jobs SET recovery = recovery || jsonb_build_object('profile', project || '/' ||
    CASE WHEN jsonb_typeof(spec->'command') = 'array' AND jsonb_array_length(spec->'command') > 0
        THEN coalesce(nullif(left(regexp_replace(regexp_replace(rtrim(spec->'command'->>0, '/'), '^.*/', ''),
            '[^A-Za-z0-9._-]', '_', 'g'), 128), ''), 'command')
        ELSE 'simulated' END)
WHERE NOT recovery ? 'profile';

-- +goose Down
UPDATE jobs SET recovery = recovery - 'profile' WHERE recovery ? 'profile';
DROP TABLE resume_evidence;
