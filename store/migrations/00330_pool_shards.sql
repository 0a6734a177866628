-- The scheduler shard each pool belongs to (docs/design.md §3 step 2 and §4
-- "Scheduler shards"): SchedulerWorkflow "scheduler/<shard>" loads and
-- applies only its shard's pools. 'default' (temporalx.DefaultShard) until a
-- policy's `shards:` names another. Not part of inventory_version: a shard
-- change does not change what a pool holds (pools_version_update lists its
-- columns), and each cycle reads its shard's pools under its own snapshot.

-- +goose Up
ALTER TABLE pools ADD COLUMN scheduler_shard text COLLATE "C" NOT NULL DEFAULT 'default';
CREATE INDEX pools_scheduler_shard_idx ON pools (scheduler_shard, name);

-- +goose Down
DROP INDEX pools_scheduler_shard_idx;
ALTER TABLE pools DROP COLUMN scheduler_shard;
