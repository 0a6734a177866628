-- Queue service shares (docs/design.md §4, "Queue service shares"): a
-- queue's min_share is the fraction of each pool's usable GPUs guaranteed to
-- it while it has demand (Kueue's nominal quota, KAI's deserved quota); its
-- max_share caps it there. 0 means none (no guarantee, no cap), as in
-- scheduling.Queue. The policy loader also refuses minimums that add up to
-- more than 1; a sum over rows is not a CHECK, and Plan orders correctly
-- whatever the sum.

-- +goose Up
ALTER TABLE queues
    ADD COLUMN min_share double precision NOT NULL DEFAULT 0
        CONSTRAINT queues_min_share_range CHECK (min_share >= 0 AND min_share <= 1),
    ADD COLUMN max_share double precision NOT NULL DEFAULT 0
        CONSTRAINT queues_max_share_range CHECK (max_share >= 0 AND max_share <= 1),
    ADD CONSTRAINT queues_min_within_max CHECK (max_share = 0 OR min_share <= max_share);

-- +goose Down
ALTER TABLE queues DROP CONSTRAINT queues_min_within_max, DROP COLUMN max_share, DROP COLUMN min_share;
