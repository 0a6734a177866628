-- Placement constraints beyond GPUs (docs/design.md §1, resource request):
-- nodes carry labels (storage, network, ...: {"network": "infiniband"}),
-- reported by the static inventory and the node agent's --label flags, and a
-- job's request may carry a required node_selector whose every pair must equal
-- a node's label (Kubernetes nodeSelector). A label change is an inventory
-- change: it bumps inventory_version so that LoadSnapshot rereads the nodes.
-- job_queue mirrors the selector as key, value pairs (like req_labels) for the
-- scheduling snapshot.

-- +goose Up
ALTER TABLE nodes ADD COLUMN labels jsonb NOT NULL DEFAULT '{}'
    CONSTRAINT nodes_labels_object CHECK (jsonb_typeof(labels) = 'object');
DROP TRIGGER nodes_version_update ON nodes;
CREATE TRIGGER nodes_version_update AFTER UPDATE ON nodes FOR EACH ROW
    WHEN ((OLD.name, OLD.pool, OLD.cpu_milli, OLD.memory_mib, OLD.schedulable, OLD.labels)
        IS DISTINCT FROM (NEW.name, NEW.pool, NEW.cpu_milli, NEW.memory_mib, NEW.schedulable, NEW.labels))
    EXECUTE FUNCTION bump_inventory_version();

ALTER TABLE job_queue ADD COLUMN req_node_selector text[];
UPDATE job_queue q SET req_node_selector = gpugov_label_pairs(j.request->'node_selector')
FROM jobs j WHERE j.id = q.job_id AND j.request ? 'node_selector';

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION jobs_sync_queue() RETURNS trigger
    LANGUAGE plpgsql AS
$$
BEGIN
    IF NEW.state IN ('succeeded', 'failed', 'cancelled') THEN
        DELETE FROM job_queue WHERE job_id = NEW.id;
        RETURN NULL;
    END IF;
    INSERT INTO job_queue (job_id, state, protected, held, submit_time, waiting_since, accrued_aging_s, aging_since,
        prereq_triples, rec_checkpointable, rec_interval_s, rec_verified_resumes, rec_resume_downgraded, last_checkpoint,
        project, queue, tier, req_gpus, req_gpu_milli, req_gpu_memory_mib, req_gpu_models, req_pool,
        req_topology, req_cpu_milli, req_memory_mib, req_labels, req_node_selector)
    VALUES (NEW.id, NEW.state, NEW.protected, NEW.held, NEW.submit_time, NEW.waiting_since, NEW.accrued_aging_s, NEW.aging_since,
        gpugov_prerequisite_triples(NEW.prerequisites),
        coalesce((NEW.recovery->>'checkpointable')::boolean, false),
        coalesce((NEW.recovery->>'checkpoint_interval_s')::bigint, 0),
        coalesce((NEW.recovery->>'verified_resumes')::integer, 0),
        coalesce(NEW.recovery ? 'resume_downgraded', false),
        NEW.recovery->'last_checkpoint',
        NEW.project, NEW.queue, NEW.tier,
        coalesce((NEW.request->>'gpus')::integer, 0), coalesce((NEW.request->>'gpu_milli')::integer, 0),
        coalesce((NEW.request->>'gpu_memory_mib')::bigint, 0), gpugov_text_array(NEW.request->'gpu_models'),
        coalesce(NEW.request->>'pool', ''), coalesce(NEW.request->>'topology', ''),
        coalesce((NEW.request->>'cpu_milli')::bigint, 0), coalesce((NEW.request->>'memory_mib')::bigint, 0),
        gpugov_label_pairs(NEW.request->'labels'), gpugov_label_pairs(NEW.request->'node_selector'))
    ON CONFLICT (job_id) DO UPDATE SET state = EXCLUDED.state, protected = EXCLUDED.protected,
        held = EXCLUDED.held, submit_time = EXCLUDED.submit_time, waiting_since = EXCLUDED.waiting_since,
        accrued_aging_s = EXCLUDED.accrued_aging_s, aging_since = EXCLUDED.aging_since, prereq_triples = EXCLUDED.prereq_triples,
        rec_checkpointable = EXCLUDED.rec_checkpointable, rec_interval_s = EXCLUDED.rec_interval_s,
        rec_verified_resumes = EXCLUDED.rec_verified_resumes, rec_resume_downgraded = EXCLUDED.rec_resume_downgraded, last_checkpoint = EXCLUDED.last_checkpoint,
        project = EXCLUDED.project, queue = EXCLUDED.queue, tier = EXCLUDED.tier, req_gpus = EXCLUDED.req_gpus,
        req_gpu_milli = EXCLUDED.req_gpu_milli, req_gpu_memory_mib = EXCLUDED.req_gpu_memory_mib,
        req_gpu_models = EXCLUDED.req_gpu_models, req_pool = EXCLUDED.req_pool, req_topology = EXCLUDED.req_topology,
        req_cpu_milli = EXCLUDED.req_cpu_milli, req_memory_mib = EXCLUDED.req_memory_mib,
        req_labels = EXCLUDED.req_labels, req_node_selector = EXCLUDED.req_node_selector;
    RETURN NULL;
END
$$;
-- +goose StatementEnd

-- +goose Down
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION jobs_sync_queue() RETURNS trigger
    LANGUAGE plpgsql AS
$$
BEGIN
    IF NEW.state IN ('succeeded', 'failed', 'cancelled') THEN
        DELETE FROM job_queue WHERE job_id = NEW.id;
        RETURN NULL;
    END IF;
    INSERT INTO job_queue (job_id, state, protected, held, submit_time, waiting_since, accrued_aging_s, aging_since,
        prereq_triples, rec_checkpointable, rec_interval_s, rec_verified_resumes, rec_resume_downgraded, last_checkpoint,
        project, queue, tier, req_gpus, req_gpu_milli, req_gpu_memory_mib, req_gpu_models, req_pool,
        req_topology, req_cpu_milli, req_memory_mib, req_labels)
    VALUES (NEW.id, NEW.state, NEW.protected, NEW.held, NEW.submit_time, NEW.waiting_since, NEW.accrued_aging_s, NEW.aging_since,
        gpugov_prerequisite_triples(NEW.prerequisites),
        coalesce((NEW.recovery->>'checkpointable')::boolean, false),
        coalesce((NEW.recovery->>'checkpoint_interval_s')::bigint, 0),
        coalesce((NEW.recovery->>'verified_resumes')::integer, 0),
        coalesce(NEW.recovery ? 'resume_downgraded', false),
        NEW.recovery->'last_checkpoint',
        NEW.project, NEW.queue, NEW.tier,
        coalesce((NEW.request->>'gpus')::integer, 0), coalesce((NEW.request->>'gpu_milli')::integer, 0),
        coalesce((NEW.request->>'gpu_memory_mib')::bigint, 0), gpugov_text_array(NEW.request->'gpu_models'),
        coalesce(NEW.request->>'pool', ''), coalesce(NEW.request->>'topology', ''),
        coalesce((NEW.request->>'cpu_milli')::bigint, 0), coalesce((NEW.request->>'memory_mib')::bigint, 0),
        gpugov_label_pairs(NEW.request->'labels'))
    ON CONFLICT (job_id) DO UPDATE SET state = EXCLUDED.state, protected = EXCLUDED.protected,
        held = EXCLUDED.held, submit_time = EXCLUDED.submit_time, waiting_since = EXCLUDED.waiting_since,
        accrued_aging_s = EXCLUDED.accrued_aging_s, aging_since = EXCLUDED.aging_since, prereq_triples = EXCLUDED.prereq_triples,
        rec_checkpointable = EXCLUDED.rec_checkpointable, rec_interval_s = EXCLUDED.rec_interval_s,
        rec_verified_resumes = EXCLUDED.rec_verified_resumes, rec_resume_downgraded = EXCLUDED.rec_resume_downgraded, last_checkpoint = EXCLUDED.last_checkpoint,
        project = EXCLUDED.project, queue = EXCLUDED.queue, tier = EXCLUDED.tier, req_gpus = EXCLUDED.req_gpus,
        req_gpu_milli = EXCLUDED.req_gpu_milli, req_gpu_memory_mib = EXCLUDED.req_gpu_memory_mib,
        req_gpu_models = EXCLUDED.req_gpu_models, req_pool = EXCLUDED.req_pool, req_topology = EXCLUDED.req_topology,
        req_cpu_milli = EXCLUDED.req_cpu_milli, req_memory_mib = EXCLUDED.req_memory_mib,
        req_labels = EXCLUDED.req_labels;
    RETURN NULL;
END
$$;
-- +goose StatementEnd

ALTER TABLE job_queue DROP COLUMN req_node_selector;

DROP TRIGGER nodes_version_update ON nodes;
CREATE TRIGGER nodes_version_update AFTER UPDATE ON nodes FOR EACH ROW
    WHEN ((OLD.name, OLD.pool, OLD.cpu_milli, OLD.memory_mib, OLD.schedulable)
        IS DISTINCT FROM (NEW.name, NEW.pool, NEW.cpu_milli, NEW.memory_mib, NEW.schedulable))
    EXECUTE FUNCTION bump_inventory_version();
ALTER TABLE nodes DROP COLUMN labels;
