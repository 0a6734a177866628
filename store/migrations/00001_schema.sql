-- gpugov schema: inventory, queues and quotas, jobs with their runs and
-- allocations, wait events, scheduling cycles and decisions, preemptions,
-- audit log and decayed project usage. Units: milli-GPU (1000 = one GPU), MiB,
-- milli-cores, seconds.

-- +goose Up
CREATE TABLE pools (
    name       text COLLATE "C" PRIMARY KEY,
    available  boolean     NOT NULL DEFAULT true,
    stage      text        NOT NULL DEFAULT 'observe' CHECK (stage IN ('observe', 'trial', 'automate')),
    updated_at timestamptz NOT NULL DEFAULT now()
);

-- Identifiers and names use the "C" collation: they are compared byte-wise,
-- their indexes serve ORDER BY, and sorting them costs a memcmp.

-- Node names are host names, unique across the inventory.
CREATE TABLE nodes (
    name        text COLLATE "C" PRIMARY KEY,
    pool        text COLLATE "C"        NOT NULL REFERENCES pools (name),
    cpu_milli   bigint      NOT NULL DEFAULT 0 CHECK (cpu_milli >= 0),
    memory_mib  bigint      NOT NULL DEFAULT 0 CHECK (memory_mib >= 0),
    schedulable boolean     NOT NULL DEFAULT true,
    updated_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX nodes_pool_idx ON nodes (pool);

CREATE TABLE gpus (
    uuid          text COLLATE "C" PRIMARY KEY,
    node          text COLLATE "C"    NOT NULL REFERENCES nodes (name),
    device_index  integer NOT NULL DEFAULT 0,
    model         text    NOT NULL,
    memory_mib    bigint  NOT NULL CHECK (memory_mib >= 0),
    nvlink_domain text    NOT NULL DEFAULT '',
    healthy       boolean NOT NULL DEFAULT true
);
CREATE INDEX gpus_node_idx ON gpus (node);

-- inventory_version changes whenever a pool, node or GPU row really changes
-- (triggers below), so LoadSnapshot can reuse the inventory it read before.
CREATE TABLE inventory_version (
    id      integer PRIMARY KEY DEFAULT 1 CHECK (id = 1),
    version bigint NOT NULL
);
INSERT INTO inventory_version (version) VALUES (1);

-- +goose StatementBegin
CREATE FUNCTION bump_inventory_version() RETURNS trigger
    LANGUAGE plpgsql AS
$$
BEGIN
    UPDATE inventory_version SET version = version + 1;
    RETURN NULL;
END
$$;
-- +goose StatementEnd

CREATE TRIGGER pools_version AFTER INSERT OR DELETE ON pools FOR EACH ROW EXECUTE FUNCTION bump_inventory_version();
CREATE TRIGGER pools_version_update AFTER UPDATE ON pools FOR EACH ROW
    WHEN ((OLD.name, OLD.available, OLD.stage) IS DISTINCT FROM (NEW.name, NEW.available, NEW.stage))
    EXECUTE FUNCTION bump_inventory_version();
CREATE TRIGGER nodes_version AFTER INSERT OR DELETE ON nodes FOR EACH ROW EXECUTE FUNCTION bump_inventory_version();
CREATE TRIGGER nodes_version_update AFTER UPDATE ON nodes FOR EACH ROW
    WHEN ((OLD.name, OLD.pool, OLD.cpu_milli, OLD.memory_mib, OLD.schedulable)
        IS DISTINCT FROM (NEW.name, NEW.pool, NEW.cpu_milli, NEW.memory_mib, NEW.schedulable))
    EXECUTE FUNCTION bump_inventory_version();
CREATE TRIGGER gpus_version AFTER INSERT OR DELETE ON gpus FOR EACH ROW EXECUTE FUNCTION bump_inventory_version();
CREATE TRIGGER gpus_version_update AFTER UPDATE ON gpus FOR EACH ROW
    WHEN ((OLD.uuid, OLD.node, OLD.device_index, OLD.model, OLD.memory_mib, OLD.nvlink_domain, OLD.healthy)
        IS DISTINCT FROM (NEW.uuid, NEW.node, NEW.device_index, NEW.model, NEW.memory_mib, NEW.nvlink_domain, NEW.healthy))
    EXECUTE FUNCTION bump_inventory_version();

CREATE TABLE queues (
    name          text COLLATE "C" PRIMARY KEY,
    tier          text             NOT NULL CHECK (tier IN ('production', 'key-project', 'standard', 'experiment')),
    service_share double precision NOT NULL DEFAULT 1 CHECK (service_share >= 0),
    max_wait_s    double precision NOT NULL DEFAULT 0 CHECK (max_wait_s >= 0),
    low_risk      boolean          NOT NULL DEFAULT false,
    protected     boolean          NOT NULL DEFAULT false,
    updated_at    timestamptz      NOT NULL DEFAULT now()
);

CREATE TABLE quotas (
    project               text COLLATE "C"   NOT NULL,
    pool                  text COLLATE "C"   NOT NULL,
    nominal_milli         bigint NOT NULL CHECK (nominal_milli >= 0),
    borrowing_limit_milli bigint NOT NULL DEFAULT 0 CHECK (borrowing_limit_milli >= 0),
    updated_at            timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (project, pool)
);

-- Policy versions are immutable; at most one is active.
CREATE TABLE policy_versions (
    hash       text COLLATE "C" PRIMARY KEY,
    body       jsonb       NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    active     boolean     NOT NULL DEFAULT false
);
CREATE UNIQUE INDEX policy_versions_one_active ON policy_versions (active) WHERE active;

-- Projections of the jobs' jsonb documents into arrays, used by the job_queue
-- trigger so that the scheduling snapshot reads typed columns instead of
-- decoding JSON.
-- +goose StatementBegin
CREATE FUNCTION gpugov_text_array(doc jsonb) RETURNS text[]
    LANGUAGE sql IMMUTABLE PARALLEL SAFE AS
$$ SELECT array_agg(x ORDER BY n) FROM jsonb_array_elements_text(CASE jsonb_typeof(doc) WHEN 'array' THEN doc END) WITH ORDINALITY AS e(x, n) $$;
-- +goose StatementEnd
-- +goose StatementBegin
CREATE FUNCTION gpugov_label_pairs(doc jsonb) RETURNS text[]
    LANGUAGE sql IMMUTABLE PARALLEL SAFE AS
$$ SELECT array_agg(x ORDER BY key, n)
   FROM jsonb_each_text(CASE jsonb_typeof(doc) WHEN 'object' THEN doc END),
        unnest(ARRAY[key, value]) WITH ORDINALITY AS u(x, n) $$;
-- +goose StatementEnd
-- +goose StatementBegin
CREATE FUNCTION gpugov_prerequisite_triples(doc jsonb) RETURNS text[]
    LANGUAGE sql IMMUTABLE PARALLEL SAFE AS
$$ SELECT array_agg(x ORDER BY i, n)
   FROM jsonb_array_elements(CASE jsonb_typeof(doc) WHEN 'array' THEN doc END) WITH ORDINALITY AS e(p, i),
        unnest(ARRAY[coalesce(p->>'name', ''), coalesce(p->>'ready', 'false'), coalesce(p->>'message', '')])
            WITH ORDINALITY AS u(x, n) $$;
-- +goose StatementEnd

CREATE TABLE jobs (
    id               text COLLATE "C" PRIMARY KEY,
    project          text COLLATE "C"             NOT NULL,
    queue            text COLLATE "C"             NOT NULL,
    tier             text             NOT NULL CHECK (tier IN ('production', 'key-project', 'standard', 'experiment')),
    request          jsonb            NOT NULL,
    state            text             NOT NULL CHECK (state IN ('submitted', 'waiting', 'placed', 'running', 'succeeded', 'failed', 'cancelled')),
    submit_time      timestamptz      NOT NULL,
    waiting_since    timestamptz      NOT NULL,
    accrued_aging_s  double precision NOT NULL DEFAULT 0 CHECK (accrued_aging_s >= 0),
    held             boolean          NOT NULL DEFAULT false,
    prerequisites    jsonb            NOT NULL DEFAULT '[]',
    recovery         jsonb            NOT NULL DEFAULT '{}',
    protected        boolean          NOT NULL DEFAULT false,
    idempotency_key  text COLLATE "C",
    spec             jsonb            NOT NULL DEFAULT '{}',
    reason           text,
    explanation      jsonb,
    cancel_requested boolean          NOT NULL DEFAULT false,
    created_at       timestamptz      NOT NULL DEFAULT now(),
    updated_at       timestamptz      NOT NULL DEFAULT now()
) WITH (fillfactor = 70); -- room for HOT updates of the per-cycle reason and explanation
-- NULL keys are distinct, so jobs submitted without a key never collide.
CREATE UNIQUE INDEX jobs_idempotency_idx ON jobs (project, idempotency_key);
-- ListJobs filters by project, queue, state or reason and pages by ID.
CREATE INDEX jobs_state_idx ON jobs (state, id);
CREATE INDEX jobs_project_idx ON jobs (project, id);
CREATE INDEX jobs_queue_idx ON jobs (queue, id);
CREATE INDEX jobs_reason_idx ON jobs (reason, id) WHERE reason IS NOT NULL;

-- job_queue is the live part of jobs (submitted, waiting, placed, running)
-- holding only what the scheduling snapshot reads every cycle, kept by the
-- trigger below in the same transaction as the jobs row. The snapshot scans
-- this small, narrow table instead of the jobs table, whose history of
-- finished jobs and per-cycle explanation updates only grow.
-- prereq_triples is [name1, ready1 ("true"/"false"), message1, name2, …].
CREATE TABLE job_queue (
    job_id               text COLLATE "C" PRIMARY KEY REFERENCES jobs (id),
    -- seq is a compact key for the job while it is live (the snapshot's cache
    -- of immutable job data is keyed by it); assigned once, on insert.
    seq                  bigint GENERATED ALWAYS AS IDENTITY UNIQUE,
    state                text             NOT NULL,
    protected            boolean          NOT NULL,
    held                 boolean          NOT NULL,
    submit_time          timestamptz      NOT NULL,
    waiting_since        timestamptz      NOT NULL,
    accrued_aging_s      double precision NOT NULL,
    prereq_triples       text[],
    rec_checkpointable   boolean          NOT NULL,
    rec_interval_s       bigint           NOT NULL,
    rec_verified_resumes integer          NOT NULL,
    last_checkpoint      jsonb,
    -- The request's fields, typed, so that the snapshot decodes no JSON;
    -- labels as [key1, value1, key2, value2, …] ordered by key.
    project              text COLLATE "C" NOT NULL,
    queue                text COLLATE "C" NOT NULL,
    tier                 text             NOT NULL,
    req_gpus             integer          NOT NULL,
    req_gpu_milli        integer          NOT NULL,
    req_gpu_memory_mib   bigint           NOT NULL,
    req_gpu_models       text[],
    req_pool             text             NOT NULL,
    req_topology         text             NOT NULL,
    req_cpu_milli        bigint           NOT NULL,
    req_memory_mib       bigint           NOT NULL,
    req_labels           text[]
);

-- The snapshot reads pending jobs in submit order straight off this index.
CREATE INDEX job_queue_pending_order ON job_queue (submit_time, job_id) WHERE state IN ('submitted', 'waiting');

-- +goose StatementBegin
CREATE FUNCTION jobs_sync_queue() RETURNS trigger
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

CREATE TRIGGER jobs_queue_insert AFTER INSERT ON jobs FOR EACH ROW EXECUTE FUNCTION jobs_sync_queue();
-- Only real changes of the mirrored columns fire it, so the per-cycle
-- rewrite of reasons and explanations costs job_queue nothing.
CREATE TRIGGER jobs_queue_update AFTER UPDATE ON jobs FOR EACH ROW
    WHEN ((OLD.state, OLD.protected, OLD.held, OLD.submit_time, OLD.waiting_since, OLD.accrued_aging_s,
           OLD.prerequisites, OLD.recovery, OLD.project, OLD.queue, OLD.tier, OLD.request)
        IS DISTINCT FROM (NEW.state, NEW.protected, NEW.held, NEW.submit_time, NEW.waiting_since, NEW.accrued_aging_s,
           NEW.prerequisites, NEW.recovery, NEW.project, NEW.queue, NEW.tier, NEW.request))
    EXECUTE FUNCTION jobs_sync_queue();

CREATE TABLE allocations (
    id          text COLLATE "C" PRIMARY KEY,
    job_id      text COLLATE "C"        NOT NULL REFERENCES jobs (id),
    run_id      text COLLATE "C",
    cycle_id    text COLLATE "C",
    pool        text COLLATE "C"        NOT NULL,
    node        text COLLATE "C"        NOT NULL,
    cpu_milli   bigint      NOT NULL DEFAULT 0 CHECK (cpu_milli >= 0),
    memory_mib  bigint      NOT NULL DEFAULT 0 CHECK (memory_mib >= 0),
    borrowed    boolean     NOT NULL DEFAULT false,
    granted_at  timestamptz NOT NULL,
    released_at timestamptz,
    -- The granted shares in grant order (the first GPU is on node), a copy of
    -- this allocation's allocation_gpus rows made at grant time so that the
    -- snapshot reads one row per allocation. allocation_gpus stays the record
    -- that capacity is enforced on.
    gpu_uuids   text[]      NOT NULL DEFAULT '{}',
    gpu_milli   integer[]   NOT NULL DEFAULT '{}',
    CHECK (cardinality(gpu_uuids) = cardinality(gpu_milli))
);
-- A job holds at most one allocation at a time.
CREATE UNIQUE INDEX allocations_one_active_per_job ON allocations (job_id) WHERE released_at IS NULL;

-- gpu_uuid has no foreign key to gpus: history must survive inventory changes.
-- Active rows are covered by gpu_usage, which does reference gpus.
CREATE TABLE allocation_gpus (
    allocation_id text COLLATE "C"     NOT NULL REFERENCES allocations (id),
    gpu_uuid      text COLLATE "C"     NOT NULL,
    ord           smallint NOT NULL DEFAULT 0,
    milli         integer  NOT NULL CHECK (milli BETWEEN 1 AND 1000),
    active        boolean  NOT NULL DEFAULT true,
    PRIMARY KEY (allocation_id, gpu_uuid)
);
CREATE INDEX allocation_gpus_active_gpu_idx ON allocation_gpus (gpu_uuid) WHERE active;

-- gpu_usage is the database-level backstop of invariant 1: the trigger below
-- keeps used_milli equal to the sum of active allocation_gpus.milli of each GPU,
-- and the CHECK refuses any transaction that would take a GPU past 1000
-- milli-GPU, whoever the writer is. A whole-GPU grant is 1000 milli, so it is
-- exclusive by the same check.
CREATE TABLE gpu_usage (
    gpu_uuid   text COLLATE "C" PRIMARY KEY REFERENCES gpus (uuid) ON DELETE RESTRICT,
    used_milli integer NOT NULL CHECK (used_milli BETWEEN 0 AND 1000)
);

-- +goose StatementBegin
CREATE FUNCTION allocation_gpus_track_usage() RETURNS trigger
    LANGUAGE plpgsql AS
$$
BEGIN
    IF TG_OP IN ('UPDATE', 'DELETE') AND OLD.active THEN
        UPDATE gpu_usage SET used_milli = used_milli - OLD.milli WHERE gpu_uuid = OLD.gpu_uuid;
    END IF;
    IF TG_OP IN ('INSERT', 'UPDATE') AND NEW.active THEN
        INSERT INTO gpu_usage (gpu_uuid, used_milli) VALUES (NEW.gpu_uuid, NEW.milli)
        ON CONFLICT (gpu_uuid) DO UPDATE SET used_milli = gpu_usage.used_milli + EXCLUDED.used_milli;
    END IF;
    RETURN NULL;
END
$$;
-- +goose StatementEnd

CREATE TRIGGER allocation_gpus_usage
    AFTER INSERT OR UPDATE OF active, milli, gpu_uuid OR DELETE ON allocation_gpus
    FOR EACH ROW EXECUTE FUNCTION allocation_gpus_track_usage();

CREATE TABLE runs (
    id              text COLLATE "C" PRIMARY KEY,
    job_id          text COLLATE "C"        NOT NULL REFERENCES jobs (id),
    run_number      integer     NOT NULL CHECK (run_number >= 1),
    allocation_id   text COLLATE "C"        NOT NULL REFERENCES allocations (id),
    started_at      timestamptz NOT NULL,
    ended_at        timestamptz,
    outcome         text CHECK (outcome IN ('succeeded', 'failed', 'cancelled', 'preempted')),
    detail          text        NOT NULL DEFAULT '',
    start_step      bigint      NOT NULL DEFAULT 0,
    last_checkpoint jsonb,
    resume_verified boolean     NOT NULL DEFAULT false,
    UNIQUE (job_id, run_number),
    UNIQUE (allocation_id)
);
CREATE INDEX runs_preempted_idx ON runs (job_id, ended_at) WHERE outcome = 'preempted';
CREATE INDEX runs_current_idx ON runs (job_id) WHERE ended_at IS NULL;

CREATE TABLE wait_events (
    id              bigserial PRIMARY KEY,
    job_id          text COLLATE "C"        NOT NULL REFERENCES jobs (id),
    reason          text        NOT NULL CHECK (reason IN ('environment_not_ready', 'quota_exhausted',
        'no_matching_capacity', 'fragmented', 'capacity_busy', 'reserved_for_higher_priority',
        'preemption_in_progress', 'held', 'pool_unavailable')),
    detail          text        NOT NULL DEFAULT '',
    next_action     text        NOT NULL DEFAULT '',
    reevaluate      text        NOT NULL DEFAULT '',
    blocking_job_id text COLLATE "C",
    started_at      timestamptz NOT NULL,
    ended_at        timestamptz,
    CHECK (ended_at IS NULL OR ended_at >= started_at)
);
-- Every waiting job has exactly one current reason: at most one open event.
CREATE UNIQUE INDEX wait_events_one_open_per_job ON wait_events (job_id) WHERE ended_at IS NULL;
CREATE INDEX wait_events_job_idx ON wait_events (job_id, started_at);

CREATE TABLE scheduling_cycles (
    id             text COLLATE "C" PRIMARY KEY,
    at             timestamptz NOT NULL,
    policy_version text        NOT NULL DEFAULT '',
    stats          jsonb       NOT NULL DEFAULT '{}',
    outcome        jsonb
);

CREATE TABLE decisions (
    id       bigserial PRIMARY KEY,
    cycle_id text COLLATE "C"        NOT NULL REFERENCES scheduling_cycles (id),
    job_id   text COLLATE "C"        NOT NULL,
    kind     text        NOT NULL,
    body     jsonb       NOT NULL,
    at       timestamptz NOT NULL
);
CREATE INDEX decisions_job_idx ON decisions (job_id, at);
CREATE INDEX decisions_cycle_idx ON decisions (cycle_id);

CREATE TABLE preemptions (
    id                       text COLLATE "C" PRIMARY KEY,
    cycle_id                 text COLLATE "C"             NOT NULL REFERENCES scheduling_cycles (id),
    for_job_id               text COLLATE "C"             NOT NULL REFERENCES jobs (id),
    victim_job_id            text COLLATE "C"             NOT NULL REFERENCES jobs (id),
    allocation_id            text COLLATE "C"             NOT NULL REFERENCES allocations (id),
    estimated_loss_gpu_s     double precision NOT NULL DEFAULT 0,
    reason                   text             NOT NULL DEFAULT '',
    state                    text             NOT NULL DEFAULT 'in_progress' CHECK (state IN ('in_progress', 'released', 'aborted')),
    detail                   text             NOT NULL DEFAULT '',
    effective_loss_gpu_s     double precision,
    started_at               timestamptz      NOT NULL,
    ended_at                 timestamptz
);
-- A victim allocation is preempted by at most one workflow at a time.
CREATE UNIQUE INDEX preemptions_one_open_per_allocation ON preemptions (allocation_id) WHERE ended_at IS NULL;
CREATE INDEX preemptions_open_for_job_idx ON preemptions (for_job_id) WHERE ended_at IS NULL;

CREATE TABLE audit_log (
    id       bigserial PRIMARY KEY,
    at       timestamptz NOT NULL,
    actor    text        NOT NULL,
    action   text        NOT NULL,
    subject  text COLLATE "C"        NOT NULL,
    reason   text        NOT NULL DEFAULT '',
    evidence jsonb       NOT NULL DEFAULT '{}'
);
CREATE INDEX audit_log_subject_idx ON audit_log (subject, id);

CREATE TABLE project_usage (
    project             text COLLATE "C" PRIMARY KEY,
    decayed_gpu_seconds double precision NOT NULL CHECK (decayed_gpu_seconds >= 0),
    as_of               timestamptz      NOT NULL
);

-- +goose Down
DROP TABLE project_usage;
DROP TABLE audit_log;
DROP TABLE preemptions;
DROP TABLE decisions;
DROP TABLE scheduling_cycles;
DROP TABLE wait_events;
DROP TABLE runs;
DROP TRIGGER allocation_gpus_usage ON allocation_gpus;
DROP FUNCTION allocation_gpus_track_usage();
DROP TABLE gpu_usage;
DROP TABLE allocation_gpus;
DROP TABLE allocations;
DROP TABLE job_queue;
DROP TABLE jobs;
DROP FUNCTION jobs_sync_queue();
DROP FUNCTION gpugov_prerequisite_triples(jsonb);
DROP FUNCTION gpugov_label_pairs(jsonb);
DROP FUNCTION gpugov_text_array(jsonb);
DROP TABLE policy_versions;
DROP TABLE quotas;
DROP TABLE queues;
DROP TABLE gpus;
DROP TABLE nodes;
DROP TABLE pools;
DROP TABLE inventory_version;
DROP FUNCTION bump_inventory_version();
