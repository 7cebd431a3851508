-- pgqueue 0009: what the Python enqueue refuses, SQL refuses too.
--
-- JSON nested deeper than 256 levels costs a decoder a stack frame a level (Python's json
-- module gives up near 1,000), so one such run could fail a worker's whole claim; a key
-- over 2,704 bytes does not fit a btree entry, and fails with a raw server error wherever
-- an index first takes it in. Keys are limited to 512 bytes, names to 200 characters.

-- Whether `doc` nests arrays and objects deeper than `max_depth`: whether a container sits
-- at level max_depth (the document itself is level 0).
CREATE FUNCTION pgqueue.json_too_deep(doc jsonb, max_depth integer) RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT jsonb_path_exists(
        doc,
        format('strict $.**{%s} ? (@.type() == "array" || @.type() == "object")',
               max_depth)::jsonpath)
$$;

-- Group keys longer than the limit, stored before it: a run whose group key was too long
-- for runs_group_claim_idx could sit in a queue without limits, and then made any change
-- that gave its queue limits fail (`pgqueue queues set Q --group-concurrency 1`, and the
-- start of every worker declaring them), and its own return to `queued` in a limited
-- queue. Such a key becomes its first 100 characters and its md5: runs that shared it
-- still share one, within 512 bytes. The constraint keeps new ones out, from any client.
UPDATE pgqueue.runs
   SET group_key = left(group_key, 100) || '~' || md5(group_key)
 WHERE octet_length(group_key) > 512;
UPDATE pgqueue.queues
   SET rr_cursor = CASE WHEN octet_length(rr_cursor) > 512
                        THEN left(rr_cursor, 100) || '~' || md5(rr_cursor) ELSE rr_cursor END,
       hint_group = CASE WHEN octet_length(hint_group) > 512
                         THEN left(hint_group, 100) || '~' || md5(hint_group) ELSE hint_group END
 WHERE octet_length(rr_cursor) > 512 OR octet_length(hint_group) > 512;
ALTER TABLE pgqueue.runs
    ADD CONSTRAINT runs_group_key_length CHECK (octet_length(group_key) <= 512);

-- Raise invalid_parameter_value (22023) if a text argument is over its limit.
CREATE FUNCTION pgqueue.check_length(what text, value text, max_bytes integer) RETURNS void
LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
    IF octet_length(value) > max_bytes THEN
        RAISE EXCEPTION 'pgqueue: % is % bytes, over the %-byte limit', what,
                        octet_length(value), max_bytes
              USING ERRCODE = 'invalid_parameter_value',
                    HINT = 'use a shorter value (a hash of a long key, for example)';
    END IF;
END
$$;

-- Raise invalid_parameter_value (22023) if `doc` nests deeper than 256 levels.
CREATE FUNCTION pgqueue.check_depth(what text, doc jsonb) RETURNS void
LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
    IF pgqueue.json_too_deep(doc, 256) THEN
        RAISE EXCEPTION 'pgqueue: %: nested deeper than 256 levels of arrays and objects', what
              USING ERRCODE = 'invalid_parameter_value', HINT = 'flatten them';
    END IF;
END
$$;

-- pgqueue.enqueue: the run as 0006 inserts it, once its values are checked.
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
LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
    new_id bigint;
    new_state text := CASE WHEN run_at IS NOT NULL AND run_at > now()
                           THEN 'scheduled' ELSE 'queued' END;
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
    PERFORM pgqueue.check_length('group_key', enqueue.group_key, 512),
            pgqueue.check_length('idempotency_key', enqueue.idempotency_key, 512),
            pgqueue.check_depth('args', enqueue.args),
            pgqueue.check_depth('kwargs', enqueue.kwargs);
    INSERT INTO pgqueue.runs AS r (task, queue, state, priority, args, kwargs, max_attempts,
                                   timeout_seconds, group_key, idempotency_key, run_at,
                                   limited)
    VALUES (enqueue.task, enqueue.queue, new_state, enqueue.priority, enqueue.args,
            enqueue.kwargs, enqueue.max_attempts, enqueue.timeout_seconds,
            coalesce(enqueue.group_key, ''), enqueue.idempotency_key,
            coalesce(enqueue.run_at, now()),
            EXISTS (SELECT 1 FROM pgqueue.queues q
                     WHERE q.name = enqueue.queue
                       AND (q.concurrency IS NOT NULL OR q.group_concurrency IS NOT NULL)))
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

-- pgqueue.emit_event: as 0002 emits it, once its key and payload are checked.
CREATE OR REPLACE FUNCTION pgqueue.emit_event(
    event   text,
    key     text DEFAULT NULL,
    payload jsonb DEFAULT NULL,
    delay   double precision DEFAULT NULL
) RETURNS bigint
LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
    new_id bigint;
    due timestamptz;
    q text;
BEGIN
    IF coalesce(length(emit_event.event), 0) NOT BETWEEN 1 AND 200 THEN
        RAISE EXCEPTION 'pgqueue.emit_event: event names must be 1 to 200 characters'
              USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF emit_event.delay < 0 OR emit_event.delay > 3153600000 THEN
        RAISE EXCEPTION 'pgqueue.emit_event: delay must be 0 or more and at most 3153600000 '
                        '(100 years), not %', emit_event.delay
              USING ERRCODE = 'numeric_value_out_of_range';
    END IF;
    PERFORM pgqueue.check_length('event key', emit_event.key, 512),
            pgqueue.check_depth('the payload', emit_event.payload);
    due := clock_timestamp() + coalesce(emit_event.delay, 0) * interval '1 second';
    INSERT INTO pgqueue.events (event, key, payload, deliver_at)
    VALUES (emit_event.event, coalesce(emit_event.key, ''), emit_event.payload, due)
    RETURNING id INTO new_id;
    IF coalesce(emit_event.delay, 0) <= 0 THEN
        FOR q IN
            UPDATE pgqueue.runs r
               SET state = 'queued', run_at = now()
             WHERE r.state = 'waiting'
               AND r.wait_event = emit_event.event
               AND r.wait_key = coalesce(emit_event.key, '')
               AND r.wait_since <= due
            RETURNING r.queue
        LOOP
            PERFORM pg_notify('pgqueue_queued', q);
        END LOOP;
    END IF;
    RETURN new_id;
END
$$;
