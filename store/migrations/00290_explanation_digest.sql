-- A waiting job's explanation is rewritten only when what it says changes,
-- or when it is older than store.ExplanationRefresh (docs/design.md §3
-- "What a cycle writes"): explanation_digest is the SHA-256 of the stable
-- part of the stored explanation (reason, detail, re-evaluation condition,
-- blocking job, suggestions, releases, next-evaluation kind, overtake
-- target) and explained_at the instant of the cycle that wrote it. Every
-- other writer of jobs.explanation clears the digest, so the next cycle
-- rewrites it. Before, every cycle rewrote every waiting job's row (1.7 s
-- for 10,000 waiting jobs in BenchmarkApplyCycleWaiting).

-- +goose Up
ALTER TABLE jobs
    ADD COLUMN explanation_digest bytea CHECK (octet_length(explanation_digest) = 32),
    ADD COLUMN explained_at timestamptz;

-- +goose Down
ALTER TABLE jobs DROP COLUMN explanation_digest, DROP COLUMN explained_at;
