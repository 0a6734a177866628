-- Web console sessions (issue #15; docs/design.md §2 "Web console"). A
-- session is made by signing in with an API bearer token on /ui/sign-in; the
-- browser holds the session ID in an HttpOnly cookie, the server keeps only
-- the SHA-256 of that ID (256 random bits, so, as for api_tokens, a slow KDF
-- would add nothing) and the digest of the token the session acts as. Every
-- page asks the API in-process as that token digest, so a revoked token ends
-- its sessions at once. Rows past expires_at are never used and are deleted
-- at sign-in.

-- +goose Up
CREATE TABLE console_sessions (
    id_digest    bytea       PRIMARY KEY CHECK (octet_length(id_digest) = 32),
    token_digest bytea       NOT NULL CHECK (octet_length(token_digest) = 32),
    created_at   timestamptz NOT NULL,
    expires_at   timestamptz NOT NULL,
    CHECK (expires_at > created_at)
);
CREATE INDEX console_sessions_expires_at ON console_sessions (expires_at);

-- +goose Down
DROP TABLE console_sessions;
