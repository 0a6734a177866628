-- gpu_samples holds the utilisation samples node agents report
-- (POST /v1/nodes/{name}/samples): the evidence the reclaim scan reads to
-- classify an allocation as idle. One row per GPU and sampling instant, so a
-- retried report inserts nothing twice. gpu_uuid has no foreign key to gpus:
-- the evidence must survive a GPU leaving the inventory. Units: percent
-- (0..100), MiB.
--
-- Numbered 00050 to leave room for the store's own migrations before it.

-- +goose Up
CREATE TABLE gpu_samples (
    gpu_uuid        text COLLATE "C" NOT NULL,
    at              timestamptz      NOT NULL,
    gpu_percent     smallint         NOT NULL CHECK (gpu_percent BETWEEN 0 AND 100),
    memory_used_mib bigint           NOT NULL CHECK (memory_used_mib >= 0),
    PRIMARY KEY (gpu_uuid, at)
);
-- Samples arrive in time order, so a BRIN index on at is small and serves
-- PruneGPUSamples' range delete.
CREATE INDEX gpu_samples_at_brin ON gpu_samples USING brin (at);

-- +goose Down
DROP TABLE gpu_samples;
