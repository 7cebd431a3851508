-- pgqueue 0001: runs, their error history, queues and the worker registry.

CREATE TABLE pgqueue.queues (
    name              text PRIMARY KEY,
    concurrency       integer CHECK (concurrency > 0),
    group_concurrency integer CHECK (group_concurrency > 0),
    paused            boolean NOT NULL DEFAULT false,
    updated_at        timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE pgqueue.runs (
    id               bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    task             text NOT NULL,
    queue            text NOT NULL DEFAULT 'default',
    state            text NOT NULL DEFAULT 'queued' CONSTRAINT runs_state_check CHECK (
                         state IN ('scheduled', 'queued', 'running', 'waiting',
                                   'succeeded', 'failed', 'canceled')),
    priority         smallint NOT NULL DEFAULT 0,
    args             jsonb NOT NULL DEFAULT '[]' CHECK (jsonb_typeof(args) = 'array'),
    kwargs           jsonb NOT NULL DEFAULT '{}' CHECK (jsonb_typeof(kwargs) = 'object'),
    result           jsonb,
    error            text,
    attempt          integer NOT NULL DEFAULT 0 CHECK (attempt >= 0),
    max_attempts     integer NOT NULL DEFAULT 3 CHECK (max_attempts >= 1),
    timeout_seconds  double precision CHECK (timeout_seconds > 0),
    group_key        text,
    idempotency_key  text,
    parent_id        bigint,
    run_at           timestamptz NOT NULL DEFAULT now(),
    created_at       timestamptz NOT NULL DEFAULT now(),
    started_at       timestamptz,
    finished_at      timestamptz,
    worker_id        uuid,
    lease_token      uuid,
    lease_expires_at timestamptz,
    notify_done      boolean NOT NULL DEFAULT false,
    CONSTRAINT runs_lease_check CHECK ((state = 'running') = (lease_token IS NOT NULL))
) WITH (
    -- runs is an update-heavy queue table: vacuum it early and often so dead
    -- tuples from claims and completions do not pile up between autovacuum runs.
    autovacuum_vacuum_scale_factor = 0.01,
    autovacuum_vacuum_threshold = 1000,
    autovacuum_analyze_scale_factor = 0.02,
    autovacuum_vacuum_cost_delay = 0
);

-- The claim reads only this index: queued runs of one queue in priority, FIFO order.
-- Finished history, future runs and other queues never enter it.
CREATE INDEX runs_claim_idx ON pgqueue.runs (queue, priority, id) WHERE state = 'queued';
-- The stager promotes scheduled runs whose time has come.
CREATE INDEX runs_scheduled_idx ON pgqueue.runs (queue, run_at) WHERE state = 'scheduled';
-- The rescuer finds running runs whose lease expired.
CREATE INDEX runs_lease_idx ON pgqueue.runs (queue, lease_expires_at) WHERE state = 'running';
-- Idempotency: at most one retained run per key.
CREATE UNIQUE INDEX runs_idempotency_key_idx ON pgqueue.runs (idempotency_key)
    WHERE idempotency_key IS NOT NULL;
-- Pruning and "what finished recently" read finished runs by time.
CREATE INDEX runs_finished_idx ON pgqueue.runs (finished_at)
    WHERE state IN ('succeeded', 'failed', 'canceled');
CREATE INDEX runs_parent_idx ON pgqueue.runs (parent_id) WHERE parent_id IS NOT NULL;

-- One row per failed attempt (and per operator action), newest last.
CREATE TABLE pgqueue.run_errors (
    id         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    run_id     bigint NOT NULL REFERENCES pgqueue.runs (id) ON DELETE CASCADE,
    attempt    integer NOT NULL,
    kind       text NOT NULL,
    message    text NOT NULL,
    traceback  text,
    worker_id  uuid,
    created_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX run_errors_run_idx ON pgqueue.run_errors (run_id, id);

CREATE TABLE pgqueue.workers (
    id           uuid PRIMARY KEY,
    host         text NOT NULL,
    pid          integer NOT NULL,
    queues       text[] NOT NULL,
    tasks        text[] NOT NULL DEFAULT '{}',
    concurrency  integer NOT NULL,
    version      text NOT NULL,
    started_at   timestamptz NOT NULL DEFAULT now(),
    heartbeat_at timestamptz NOT NULL DEFAULT now()
);

-- Enqueue from SQL (psql, triggers). Same row shape and wake-up as the Python API.
CREATE FUNCTION pgqueue.enqueue(
    task            text,
    args            jsonb DEFAULT '[]',
    kwargs          jsonb DEFAULT '{}',
    queue           text DEFAULT 'default',
    priority        integer DEFAULT 0,
    run_at          timestamptz DEFAULT NULL,
    max_attempts    integer DEFAULT 3,
    idempotency_key text DEFAULT NULL,
    group_key       text DEFAULT NULL,
    timeout_seconds double precision DEFAULT NULL
) RETURNS bigint
LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
    new_id bigint;
    new_state text := CASE WHEN run_at IS NOT NULL AND run_at > now()
                           THEN 'scheduled' ELSE 'queued' END;
BEGIN
    INSERT INTO pgqueue.runs AS r (task, queue, state, priority, args, kwargs, max_attempts,
                                   timeout_seconds, group_key, idempotency_key, run_at)
    VALUES (enqueue.task, enqueue.queue, new_state, enqueue.priority, enqueue.args,
            enqueue.kwargs, enqueue.max_attempts, enqueue.timeout_seconds, enqueue.group_key,
            enqueue.idempotency_key, coalesce(enqueue.run_at, now()))
    ON CONFLICT (idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING
    RETURNING r.id INTO new_id;
    IF new_id IS NULL THEN
        SELECT r.id INTO new_id FROM pgqueue.runs r
        WHERE r.idempotency_key = enqueue.idempotency_key;
        RETURN new_id;
    END IF;
    IF new_state = 'queued' THEN
        PERFORM pg_notify('pgqueue_queued', enqueue.queue);
    END IF;
    RETURN new_id;
END
$$;

-- Cancel a run that has not finished. Returns true if it was canceled.
CREATE FUNCTION pgqueue.cancel(run_id bigint) RETURNS boolean
LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
    was_waited boolean;
BEGIN
    UPDATE pgqueue.runs
       SET state = 'canceled', finished_at = now(), worker_id = NULL,
           lease_token = NULL, lease_expires_at = NULL
     WHERE id = run_id AND state IN ('scheduled', 'queued', 'running', 'waiting')
    RETURNING notify_done INTO was_waited;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    PERFORM pg_notify('pgqueue_cancel', run_id::text);
    IF was_waited THEN
        PERFORM pg_notify('pgqueue_done', run_id::text);
    END IF;
    RETURN true;
END
$$;

-- Put a finished run back in its queue for one more attempt; the retry is recorded.
CREATE FUNCTION pgqueue.retry(run_id bigint) RETURNS boolean
LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
    q text;
BEGIN
    UPDATE pgqueue.runs
       SET state = 'queued', run_at = now(), finished_at = NULL, result = NULL,
           max_attempts = greatest(max_attempts, attempt + 1)
     WHERE id = run_id AND state IN ('succeeded', 'failed', 'canceled')
    RETURNING queue INTO q;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    INSERT INTO pgqueue.run_errors (run_id, attempt, kind, message)
    SELECT id, attempt, 'retried', 'retried by an operator' FROM pgqueue.runs WHERE id = run_id;
    PERFORM pg_notify('pgqueue_queued', q);
    RETURN true;
END
$$;
