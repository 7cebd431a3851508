-- Emit an event: stored (for waiters that replay later) and, unless delayed, wakes
-- every run waiting for it at once. A delayed event brings its waiters' deadline
-- forward to its delivery time instead, and tells the workers of their queues
-- (pgqueue_due), whose stagers wake them when it comes. Its key (in NFC, pgqueue.nfc())
-- and payload (at most 1 MiB of JSON) are checked against the input limits first.
-- Returns the event id.
CREATE OR REPLACE FUNCTION pgqueue.emit_event(
    event   text,
    key     text DEFAULT NULL,
    payload jsonb DEFAULT NULL,
    delay   double precision DEFAULT NULL
) RETURNS bigint
LANGUAGE plpgsql
SET search_path = pg_catalog, pgqueue, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    new_id bigint;
    due timestamptz;
    q text;
    k text := coalesce(pgqueue.nfc(emit_event.key), '');
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
    PERFORM pgqueue.check_length('event key', k, 512),
            pgqueue.check_size('the payload', emit_event.payload, 1048576),
            pgqueue.check_depth('the payload', emit_event.payload);
    due := clock_timestamp() + coalesce(emit_event.delay, 0) * interval '1 second';
    INSERT INTO pgqueue.events (event, key, payload, deliver_at)
    VALUES (emit_event.event, k, emit_event.payload, due)
    RETURNING id INTO new_id;
    IF coalesce(emit_event.delay, 0) <= 0 THEN
        FOR q IN
            UPDATE pgqueue.runs r
               SET state = 'queued', run_at = now()
             WHERE r.state = 'waiting'
               AND r.wait_event = emit_event.event
               AND r.wait_key = k
               AND r.wait_since <= due
            RETURNING r.queue
        LOOP
            PERFORM pg_notify('pgqueue_queued', q);
        END LOOP;
    ELSE
        FOR q IN
            UPDATE pgqueue.runs r
               SET run_at = due
             WHERE r.state = 'waiting'
               AND r.wait_event = emit_event.event
               AND r.wait_key = k
               AND r.wait_since <= due
               AND r.run_at > due
            RETURNING r.queue
        LOOP
            PERFORM pg_notify('pgqueue_due', q);
        END LOOP;
    END IF;
    RETURN new_id;
END
$$;
