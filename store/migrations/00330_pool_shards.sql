-- The scheduler shard each pool belongs to (docs/design.md §3 step 2 and §4
-- "Scheduler shards"): SchedulerWorkflow "scheduler/<shard>" loads and
-- applies only its shard's pools. 'default' (temporalx.DefaultShard) until a
-- policy's `shards:` names another. A move bumps inventory_version
-- (pools_version_update): each shard's snapshot then holds other pools, and
-- its scheduling.Planner must not reuse the capacity index it built before.

-- +goose Up
ALTER TABLE pools ADD COLUMN scheduler_shard text COLLATE "C" NOT NULL DEFAULT 'default';
CREATE INDEX pools_scheduler_shard_idx ON pools (scheduler_shard, name);
DROP TRIGGER pools_version_update ON pools;
CREATE TRIGGER pools_version_update AFTER UPDATE ON pools FOR EACH ROW
    WHEN ((OLD.name, OLD.available, OLD.stage, OLD.scheduler_shard) IS DISTINCT FROM
          (NEW.name, NEW.available, NEW.stage, NEW.scheduler_shard))
    EXECUTE FUNCTION bump_inventory_version();

-- +goose Down
DROP TRIGGER pools_version_update ON pools;
CREATE TRIGGER pools_version_update AFTER UPDATE ON pools FOR EACH ROW
    WHEN ((OLD.name, OLD.available, OLD.stage) IS DISTINCT FROM (NEW.name, NEW.available, NEW.stage))
    EXECUTE FUNCTION bump_inventory_version();
DROP INDEX pools_scheduler_shard_idx;
ALTER TABLE pools DROP COLUMN scheduler_shard;
