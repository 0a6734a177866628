-- Quota actions (docs/design.md §3 "Act on a wait", §4 policy, §5 quota
-- accounting). A quota change through the API is a policy change: it stores a
-- policy version derived from the active one (only that quota differs) and
-- activates it. derived_from is the version it was derived from; base_hash is
-- the version loaded from the policy file (or the built-in default) that the
-- chain of derivations started from, so that serve, restarted on the same
-- file, keeps the derived version instead of reverting it. Both are NULL for
-- a version loaded from the file.
--
-- quota_requests: a project asks for more quota with a reason; an admin
-- approves (the quota changes, as above) or denies, with a comment. Amounts in
-- milli-GPU, bounded as policy.MaxQuotaMilli.

-- +goose Up
ALTER TABLE policy_versions
    ADD COLUMN derived_from text COLLATE "C" REFERENCES policy_versions (hash),
    ADD COLUMN base_hash    text COLLATE "C" REFERENCES policy_versions (hash);

CREATE TABLE quota_requests (
    id                    text COLLATE "C" PRIMARY KEY,
    pool                  text COLLATE "C" NOT NULL CHECK (pool <> ''),
    project               text COLLATE "C" NOT NULL CHECK (project <> ''),
    nominal_milli         bigint NOT NULL CHECK (nominal_milli BETWEEN 0 AND 1000000000),
    -- NULL: keep the borrowing limit the quota has when it is approved.
    borrowing_limit_milli bigint CHECK (borrowing_limit_milli BETWEEN 0 AND 1000000000),
    reason                text NOT NULL CHECK (reason <> ''),
    requested_by          text NOT NULL CHECK (requested_by <> ''),
    requested_at          timestamptz NOT NULL DEFAULT now(),
    state                 text NOT NULL DEFAULT 'pending'
        CONSTRAINT quota_requests_state_check CHECK (state IN ('pending', 'approved', 'denied')),
    decided_by            text,
    decided_at            timestamptz,
    decision_comment      text,
    -- the policy version active after the approval (the derived one, or the
    -- active one when the quota already had the asked values)
    policy_hash           text COLLATE "C" REFERENCES policy_versions (hash),
    CONSTRAINT quota_requests_decision CHECK (
        (state = 'pending') = (decided_at IS NULL)
        AND (decided_at IS NULL) = (decided_by IS NULL)
        AND (decided_at IS NULL) = (decision_comment IS NULL)
        AND (policy_hash IS NOT NULL) = (state = 'approved'))
);
CREATE INDEX quota_requests_by_state ON quota_requests (state, requested_at, id);

-- +goose Down
DROP TABLE quota_requests;
ALTER TABLE policy_versions DROP COLUMN base_hash, DROP COLUMN derived_from;
