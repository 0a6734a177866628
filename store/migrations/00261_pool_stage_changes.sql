-- Pool stage history (issue #13, docs/design.md §4 "Pool readiness").
--
-- One row per attempt to change a pool's automation stage through the
-- policy — a version applied through the API, a policy file loaded at
-- start or reloaded, a version the service's refresh put in force — with
-- what became of it: applied (a narrowing, or a widening whose readiness
-- passed), overridden (a widening an admin forced with a reason although
-- readiness failed), refused (a widening whose readiness failed: the stored
-- stage was kept) or initial (the first stage serve gave a pool without
-- history at its start, or the stage a pool had when this table began).
-- readiness is the readiness report the decision read (GET
-- /v1/pools/{pool}/readiness's document), NULL when none was evaluated (a
-- narrowing, the rows this migration writes). source: api, start, reload,
-- refresh or migration. policy_hash: the version that asked for the change.
--
-- The pool's governed stage is the to_stage of its latest row that is not
-- refused (its stored stage when it has none): a policy asking for a wider
-- stage than that is a widening, whatever pools.stage says in between (an
-- inventory import writes pools.stage too).

-- +goose Up
CREATE TABLE pool_stage_changes (
    id          bigserial PRIMARY KEY,
    pool        text COLLATE "C" NOT NULL REFERENCES pools (name),
    from_stage  text        NOT NULL CHECK (from_stage IN ('observe', 'trial', 'automate')),
    to_stage    text        NOT NULL CHECK (to_stage IN ('observe', 'trial', 'automate')),
    outcome     text        NOT NULL CHECK (outcome IN ('applied', 'overridden', 'refused', 'initial')),
    at          timestamptz NOT NULL,
    actor       text        NOT NULL,
    reason      text        NOT NULL DEFAULT '',
    source      text        NOT NULL DEFAULT '',
    policy_hash text        NOT NULL DEFAULT '',
    readiness   jsonb
);
CREATE INDEX pool_stage_changes_pool_idx ON pool_stage_changes (pool, id);

INSERT INTO pool_stage_changes (pool, from_stage, to_stage, outcome, at, actor, reason, source)
SELECT name, stage, stage, 'initial', now(), 'migration', 'the stage the pool had when stage history began', 'migration'
FROM pools;

-- +goose Down
DROP TABLE pool_stage_changes;
