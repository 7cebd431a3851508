-- Enqueue from SQL (psql, triggers). Same row shape, input limits and wake-up as the
-- Python API: the run is `scheduled` if run_at is in the future, else `queued`, and is
-- flagged `limited` when its queue is claimed by claim_limited()
-- (sql/parts/queue_flags_runs.sql). Keys are stored in NFC (pgqueue.nfc()), args and
-- kwargs are at most 1 MiB each (App's default max_payload_bytes), and run_at is within
-- pgqueue.check_due()'s range (docs/security.md, Input limits).
CREATE OR REPLACE FUNCTION pgqueue.enqueue(
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
LANGUAGE plpgsql
SET search_path = pg_catalog, pgqueue, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    new_id bigint;
    new_state text := CASE WHEN run_at IS NOT NULL AND run_at > now()
                           THEN 'scheduled' ELSE 'queued' END;
    idem text := pgqueue.nfc(enqueue.idempotency_key);
    grp text := pgqueue.nfc(enqueue.group_key);
BEGIN
    IF coalesce(length(enqueue.task), 0) NOT BETWEEN 1 AND 200
       OR coalesce(length(enqueue.queue), 0) NOT BETWEEN 1 AND 200 THEN
        RAISE EXCEPTION 'pgqueue.enqueue: task and queue names must be 1 to 200 characters'
              USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF enqueue.priority NOT BETWEEN -32768 AND 32767 THEN
        RAISE EXCEPTION 'pgqueue.enqueue: priority must be between -32768 and 32767, not %',
                        enqueue.priority
              USING ERRCODE = 'numeric_value_out_of_range';
    END IF;
    IF enqueue.max_attempts IS NULL OR enqueue.max_attempts < 1 THEN
        RAISE EXCEPTION 'pgqueue.enqueue: max_attempts must be 1 or more, not %',
                        coalesce(enqueue.max_attempts::text, 'NULL')
              USING ERRCODE = 'numeric_value_out_of_range';
    END IF;
    -- (NaN is larger than every number in PostgreSQL: the upper bound refuses it)
    IF enqueue.timeout_seconds <= 0 OR enqueue.timeout_seconds > 3153600000 THEN
        RAISE EXCEPTION 'pgqueue.enqueue: timeout_seconds must be more than 0 and at most '
                        '3153600000 (100 years), not %', enqueue.timeout_seconds
              USING ERRCODE = 'numeric_value_out_of_range';
    END IF;
    PERFORM pgqueue.check_due('run_at', enqueue.run_at),
            pgqueue.check_length('group_key', grp, 512),
            pgqueue.check_length('idempotency_key', idem, 512),
            pgqueue.check_size('args', enqueue.args, 1048576),
            pgqueue.check_size('kwargs', enqueue.kwargs, 1048576),
            pgqueue.check_depth('args', enqueue.args),
            pgqueue.check_depth('kwargs', enqueue.kwargs);
    INSERT INTO pgqueue.runs AS r (task, queue, state, priority, args, kwargs, max_attempts,
                                   timeout_seconds, group_key, idempotency_key, run_at,
                                   limited)
    VALUES (enqueue.task, enqueue.queue, new_state, enqueue.priority, enqueue.args,
            enqueue.kwargs, enqueue.max_attempts, enqueue.timeout_seconds,
            coalesce(grp, ''), idem,
            coalesce(enqueue.run_at, now()),
            EXISTS (SELECT 1 FROM pgqueue.queues q
                     WHERE q.name = enqueue.queue
                       AND (q.concurrency IS NOT NULL OR q.group_concurrency IS NOT NULL
                            OR q.group_rate_limit IS NOT NULL OR q.ordered)))
    ON CONFLICT (idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING
    RETURNING r.id INTO new_id;
    IF new_id IS NULL THEN
        SELECT r.id INTO new_id FROM pgqueue.runs r
        WHERE r.idempotency_key = idem;
        RETURN new_id;
    END IF;
    IF new_state = 'queued' THEN
        PERFORM pg_notify('pgqueue_queued', enqueue.queue);
    END IF;
    RETURN new_id;
END
$$;
