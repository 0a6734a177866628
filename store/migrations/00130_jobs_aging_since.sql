-- Aging credit counts only the time a job waits for GPUs (docs/design.md §1,
-- wait reasons; vocab.ReasonInfo.EarnsAging): accrued_aging_s now holds the
-- eligible seconds of closed stretches, and aging_since the start of the
-- current eligible stretch — NULL while the job's current reason earns none
-- (held, environment_not_ready, pool_unavailable, no_matching_capacity) or the
-- job is not pending; job_queue mirrors it for the scheduling snapshot.
-- ApplyCycle stops and starts the stretch on the job's wait status
-- (accounting.AgingClock), placement carries it into accrued_aging_s, submit
-- and requeue start it.
--
-- Pending jobs start their stretch where their wait began unless their
-- current reason is one of the four that earn nothing (the catalogue of this
-- release); those start it at their next reason that earns.

-- +goose Up
ALTER TABLE jobs ADD COLUMN aging_since timestamptz;
UPDATE jobs SET aging_since = waiting_since
WHERE state IN ('submitted', 'waiting')
	AND (reason IS NULL OR reason NOT IN ('held', 'environment_not_ready', 'pool_unavailable', 'no_matching_capacity'));
ALTER TABLE job_queue ADD COLUMN aging_since timestamptz;
UPDATE job_queue q SET aging_since = j.aging_since FROM jobs j WHERE j.id = q.job_id;

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


DROP TRIGGER jobs_queue_update ON jobs;
-- Only real changes of the mirrored columns fire it, so the per-cycle
-- rewrite of reasons and explanations costs job_queue nothing.
CREATE TRIGGER jobs_queue_update AFTER UPDATE ON jobs FOR EACH ROW
    WHEN ((OLD.state, OLD.protected, OLD.held, OLD.submit_time, OLD.waiting_since, OLD.accrued_aging_s, OLD.aging_since,
           OLD.prerequisites, OLD.recovery, OLD.project, OLD.queue, OLD.tier, OLD.request)
        IS DISTINCT FROM (NEW.state, NEW.protected, NEW.held, NEW.submit_time, NEW.waiting_since, NEW.accrued_aging_s, NEW.aging_since,
           NEW.prerequisites, NEW.recovery, NEW.project, NEW.queue, NEW.tier, NEW.request))
    EXECUTE FUNCTION jobs_sync_queue();

-- +goose Down
-- The stretch open at the downgrade is dropped; the older rule counts the
-- whole current wait from waiting_since again.
DROP TRIGGER jobs_queue_update ON jobs;
CREATE TRIGGER jobs_queue_update AFTER UPDATE ON jobs FOR EACH ROW
    WHEN ((OLD.state, OLD.protected, OLD.held, OLD.submit_time, OLD.waiting_since, OLD.accrued_aging_s,
           OLD.prerequisites, OLD.recovery, OLD.project, OLD.queue, OLD.tier, OLD.request)
        IS DISTINCT FROM (NEW.state, NEW.protected, NEW.held, NEW.submit_time, NEW.waiting_since, NEW.accrued_aging_s,
           NEW.prerequisites, NEW.recovery, NEW.project, NEW.queue, NEW.tier, NEW.request))
    EXECUTE FUNCTION jobs_sync_queue();

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION jobs_sync_queue() RETURNS trigger
    LANGUAGE plpgsql AS
$$
BEGIN
    IF NEW.state IN ('succeeded', 'failed', 'cancelled') THEN
        DELETE FROM job_queue WHERE job_id = NEW.id;
        RETURN NULL;
    END IF;
    INSERT INTO job_queue (job_id, state, protected, held, submit_time, waiting_since, accrued_aging_s,
        prereq_triples, rec_checkpointable, rec_interval_s, rec_verified_resumes, rec_resume_downgraded, last_checkpoint,
        project, queue, tier, req_gpus, req_gpu_milli, req_gpu_memory_mib, req_gpu_models, req_pool,
        req_topology, req_cpu_milli, req_memory_mib, req_labels)
    VALUES (NEW.id, NEW.state, NEW.protected, NEW.held, NEW.submit_time, NEW.waiting_since, NEW.accrued_aging_s,
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
        accrued_aging_s = EXCLUDED.accrued_aging_s, prereq_triples = EXCLUDED.prereq_triples,
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


ALTER TABLE job_queue DROP COLUMN aging_since;
ALTER TABLE jobs DROP COLUMN aging_since;
