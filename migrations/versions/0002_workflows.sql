-- pgqueue 0002: workflow steps, events, and what a waiting run waits for.

ALTER TABLE pgqueue.runs
    ADD COLUMN wait_event text,        -- waiting for an event of this name ...
    ADD COLUMN wait_key text,          -- ... and this key ('' for none)
    ADD COLUMN wait_since timestamptz, -- events delivered at or after this count
    ADD COLUMN wait_run_id bigint;     -- waiting for this child run to finish

-- Emitting an event finds its waiters through this index; waits with a deadline are
-- woken by the stager through the second one.
CREATE INDEX runs_wait_event_idx ON pgqueue.runs (wait_event, wait_key)
    WHERE state = 'waiting';
CREATE INDEX runs_wait_deadline_idx ON pgqueue.runs (queue, run_at) WHERE state = 'waiting';

-- One row per named step of a workflow run. A succeeded step is never executed again.
CREATE TABLE pgqueue.steps (
    run_id      bigint NOT NULL REFERENCES pgqueue.runs (id) ON DELETE CASCADE,
    name        text NOT NULL,
    state       text NOT NULL CHECK (state IN ('waiting', 'succeeded', 'failed')),
    output      jsonb,
    error       text,
    attempt     integer NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    started_at  timestamptz,
    finished_at timestamptz,
    PRIMARY KEY (run_id, name)
);

CREATE TABLE pgqueue.events (
    id         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    event      text NOT NULL,
    key        text NOT NULL DEFAULT '',
    payload    jsonb,
    created_at timestamptz NOT NULL DEFAULT now(),
    deliver_at timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE INDEX events_lookup_idx ON pgqueue.events (event, key, deliver_at);
CREATE INDEX events_created_idx ON pgqueue.events (created_at);

-- Emit an event: stored (for waiters that replay later) and, unless delayed, wakes
-- every run waiting for it at once. Returns the event id.
CREATE FUNCTION pgqueue.emit_event(
    event   text,
    key     text DEFAULT NULL,
    payload jsonb DEFAULT NULL,
    delay   double precision DEFAULT NULL
) RETURNS bigint
LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
    new_id bigint;
    due timestamptz := clock_timestamp() + coalesce(delay, 0) * interval '1 second';
    q text;
BEGIN
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

-- Cancel: now also cascades to child runs when asked, and wakes a waiting parent.
DROP FUNCTION pgqueue.cancel(bigint);
CREATE FUNCTION pgqueue.cancel(run_id bigint, children boolean DEFAULT false) RETURNS boolean
LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
    r record;
    found_any boolean := false;
BEGIN
    FOR r IN
        WITH RECURSIVE tree AS (
            SELECT cancel.run_id AS id
            UNION
            SELECT c.id FROM pgqueue.runs c JOIN tree t ON c.parent_id = t.id
            WHERE cancel.children
        )
        UPDATE pgqueue.runs x
           SET state = 'canceled', finished_at = now(), worker_id = NULL,
               lease_token = NULL, lease_expires_at = NULL
          FROM tree
         WHERE x.id = tree.id AND x.state IN ('scheduled', 'queued', 'running', 'waiting')
        RETURNING x.id, x.notify_done, x.parent_id
    LOOP
        IF r.id = cancel.run_id THEN
            found_any := true;
        END IF;
        PERFORM pg_notify('pgqueue_cancel', r.id::text);
        IF r.notify_done THEN
            PERFORM pg_notify('pgqueue_done', r.id::text);
        END IF;
        IF r.parent_id IS NOT NULL THEN
            PERFORM pg_notify('pgqueue_queued', p.queue)
              FROM pgqueue.runs p
             WHERE p.id = r.parent_id AND p.state = 'waiting' AND p.wait_run_id = r.id;
            UPDATE pgqueue.runs p SET state = 'queued', run_at = now()
             WHERE p.id = r.parent_id AND p.state = 'waiting' AND p.wait_run_id = r.id;
        END IF;
    END LOOP;
    RETURN found_any;
END
$$;
