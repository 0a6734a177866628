-- Policy experiments (docs/design.md §4, "Experiments"; §3, the
-- ExperimentWorkflow). One row per experiment: the spec as submitted (the
-- candidate named by its hash), its life-cycle state and verdict, the
-- baseline and candidate versions, the variable groups the candidate
-- changes, the pools it measures and holds, the baseline measurement and
-- the outcome (experiment.Measurement, experiment.Outcome as JSON).
--
-- An experiment holds its pools (no other experiment may be created on one
-- of them) while it is scheduled, baseline or running, and while it is
-- finished with the verdict kept and neither promoted nor aborted (its
-- candidate is still in force). store.CreateExperiment checks that under a
-- transaction-scoped advisory lock; the rule spans rows, so it is not a
-- constraint.
--
-- experiment_events is its timeline (created, baseline_measured, switched,
-- check, rolled_back, verdict, reverted, promoted, aborted,
-- policy_changed), each with one readable sentence and its data; step_key,
-- when set, makes a retried step's event a no-op (one "check-3" per
-- experiment).

-- +goose Up
CREATE TABLE experiments (
    id             text COLLATE "C" PRIMARY KEY,
    name           text NOT NULL CHECK (name <> ''),
    spec           jsonb NOT NULL CHECK (jsonb_typeof(spec) = 'object'),
    state          text NOT NULL DEFAULT 'scheduled'
        CONSTRAINT experiments_state_check CHECK (state IN ('scheduled', 'baseline', 'running', 'finished', 'aborted')),
    verdict        text
        CONSTRAINT experiments_verdict_check CHECK (verdict IN ('kept', 'rolled_back', 'not_met', 'inconclusive')),
    baseline_hash  text COLLATE "C" NOT NULL REFERENCES policy_versions (hash),
    candidate_hash text COLLATE "C" NOT NULL REFERENCES policy_versions (hash),
    groups         text[] NOT NULL DEFAULT '{}'
        CONSTRAINT experiments_groups_check CHECK (groups <@ ARRAY['queue_service', 'quota', 'aging', 'fair_share',
            'ordering', 'preemption', 'reclaim', 'automation_stage', 'protection', 'notifications']::text[]),
    pools          text[] COLLATE "C" NOT NULL CHECK (cardinality(pools) > 0),
    created_by     text NOT NULL CHECK (created_by <> ''),
    created_at     timestamptz NOT NULL,
    start_at       timestamptz NOT NULL,
    switched_at    timestamptz,
    ended_at       timestamptz,
    baseline       jsonb,
    outcome        jsonb,
    promoted_at    timestamptz,
    CONSTRAINT experiments_candidate_differs CHECK (candidate_hash <> baseline_hash),
    -- a verdict only once finished (an abort after kept keeps it); ended exactly when final
    CONSTRAINT experiments_verdict_when_finished CHECK (
        (state <> 'finished' OR verdict IS NOT NULL) AND (verdict IS NULL OR state IN ('finished', 'aborted'))),
    CONSTRAINT experiments_ended_when_final CHECK ((ended_at IS NOT NULL) = (state IN ('finished', 'aborted'))),
    CONSTRAINT experiments_switched_when_running CHECK (state <> 'running' OR switched_at IS NOT NULL),
    CONSTRAINT experiments_promoted_kept CHECK (promoted_at IS NULL OR (state = 'finished' AND verdict = 'kept'))
);
-- ListExperiments, newest first.
CREATE INDEX experiments_created_idx ON experiments (created_at DESC, id DESC);
-- The experiments that hold their pools (CreateExperiment, ActiveExperimentFor).
CREATE INDEX experiments_holding_idx ON experiments USING gin (pools)
    WHERE state IN ('scheduled', 'baseline', 'running') OR (state = 'finished' AND verdict = 'kept' AND promoted_at IS NULL);

CREATE TABLE experiment_events (
    seq           bigserial PRIMARY KEY,
    experiment_id text COLLATE "C" NOT NULL REFERENCES experiments (id),
    at            timestamptz NOT NULL,
    kind          text NOT NULL
        CONSTRAINT experiment_events_kind_check CHECK (kind IN ('created', 'baseline_measured', 'switched', 'check',
            'rolled_back', 'verdict', 'reverted', 'promoted', 'aborted', 'policy_changed')),
    detail        text NOT NULL,
    data          jsonb,
    step_key      text,
    CONSTRAINT experiment_events_step_unique UNIQUE (experiment_id, step_key)
);
CREATE INDEX experiment_events_experiment_idx ON experiment_events (experiment_id, seq);

-- +goose Down
DROP TABLE experiment_events;
DROP TABLE experiments;
