-- +goose Up
-- job_queue.rec_resume_downgraded mirrors jobs.recovery ? 'resume_downgraded'
-- (a resume from the wrong step, not yet followed by a verified resume), so
-- that the scheduling snapshot reads it with the rest of the recovery
-- evidence instead of a query of its own per cycle.
ALTER TABLE job_queue ADD COLUMN rec_resume_downgraded boolean NOT NULL DEFAULT false;
UPDATE job_queue q SET rec_resume_downgraded = true FROM jobs j
WHERE j.id = q.job_id AND j.recovery ? 'resume_downgraded';

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
    INSERT INTO job_queue (job_id, state, protected, held, submit_time, waiting_since, accrued_aging_s,
        prereq_triples, rec_checkpointable, rec_interval_s, rec_verified_resumes, last_checkpoint,
        project, queue, tier, req_gpus, req_gpu_milli, req_gpu_memory_mib, req_gpu_models, req_pool,
        req_topology, req_cpu_milli, req_memory_mib, req_labels)
    VALUES (NEW.id, NEW.state, NEW.protected, NEW.held, NEW.submit_time, NEW.waiting_since, NEW.accrued_aging_s,
        gpugov_prerequisite_triples(NEW.prerequisites),
        coalesce((NEW.recovery->>'checkpointable')::boolean, false),
        coalesce((NEW.recovery->>'checkpoint_interval_s')::bigint, 0),
        coalesce((NEW.recovery->>'verified_resumes')::integer, 0),
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
        rec_verified_resumes = EXCLUDED.rec_verified_resumes, last_checkpoint = EXCLUDED.last_checkpoint,
        project = EXCLUDED.project, queue = EXCLUDED.queue, tier = EXCLUDED.tier, req_gpus = EXCLUDED.req_gpus,
        req_gpu_milli = EXCLUDED.req_gpu_milli, req_gpu_memory_mib = EXCLUDED.req_gpu_memory_mib,
        req_gpu_models = EXCLUDED.req_gpu_models, req_pool = EXCLUDED.req_pool, req_topology = EXCLUDED.req_topology,
        req_cpu_milli = EXCLUDED.req_cpu_milli, req_memory_mib = EXCLUDED.req_memory_mib,
        req_labels = EXCLUDED.req_labels;
    RETURN NULL;
END
$$;
-- +goose StatementEnd
ALTER TABLE job_queue DROP COLUMN rec_resume_downgraded;
