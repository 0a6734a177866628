-- API bearer tokens made by `gpugov token create` (issue #17 item 6;
-- docs/design.md §2 "API tokens"), shared by every serve replica. Only the
-- SHA-256 digest of a token is stored: tokens are 256 random bits, so the
-- digest is a preimage search of 2^256 and a slow KDF would add nothing.
-- A revoked token keeps its row (revoked_at), for `gpugov token list` and
-- the audit trail; lookups take live rows only.

-- +goose Up
CREATE TABLE api_tokens (
    id         text PRIMARY KEY,
    digest     bytea       NOT NULL UNIQUE CHECK (octet_length(digest) = 32),
    name       text        NOT NULL CHECK (name <> ''),
    project    text        NOT NULL CHECK (project <> ''),
    role       text        NOT NULL CHECK (role IN ('submitter', 'operator', 'admin', 'agent')),
    node       text        NOT NULL DEFAULT '',
    created_at timestamptz NOT NULL,
    revoked_at timestamptz,
    CHECK ((role = 'agent') = (node <> ''))
);

-- +goose Down
DROP TABLE api_tokens;
