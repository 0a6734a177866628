-- The scheduling snapshot keeps each active allocation's grant (its pool,
-- node, CPU, host memory, borrowing and GPU shares) in the Store's snapshot
-- cache by allocation ID, and reads only the rows it lacks (docs/design.md §8,
-- "The whole cycle at scale"). That is right for every writer only if those
-- columns never change after the grant: no code of gpugov updates them (an
-- allocation's later writes are run_id, released_at and the completion
-- columns), and this trigger refuses any update that would, so a bare SQL
-- update cannot leave another worker's cache wrong. It fires only for an
-- UPDATE naming one of the columns, so the run and release updates never
-- run it.

-- +goose Up
-- +goose StatementBegin
CREATE FUNCTION allocations_refuse_regrant() RETURNS trigger
    LANGUAGE plpgsql AS
$$
BEGIN
    RAISE EXCEPTION 'allocation %: id, pool, node, cpu_milli, memory_mib, borrowed, gpu_uuids and gpu_milli are fixed at grant', OLD.id
        USING ERRCODE = 'check_violation';
END
$$;
-- +goose StatementEnd

CREATE TRIGGER allocations_fixed_grant
    BEFORE UPDATE OF id, pool, node, cpu_milli, memory_mib, borrowed, gpu_uuids, gpu_milli ON allocations
    FOR EACH ROW
    WHEN ((OLD.id, OLD.pool, OLD.node, OLD.cpu_milli, OLD.memory_mib, OLD.borrowed, OLD.gpu_uuids, OLD.gpu_milli)
        IS DISTINCT FROM (NEW.id, NEW.pool, NEW.node, NEW.cpu_milli, NEW.memory_mib, NEW.borrowed, NEW.gpu_uuids, NEW.gpu_milli))
    EXECUTE FUNCTION allocations_refuse_regrant();

-- +goose Down
DROP TRIGGER allocations_fixed_grant ON allocations;
DROP FUNCTION allocations_refuse_regrant();
