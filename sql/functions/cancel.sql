-- Cancel a run that has not finished; with `children`, its unfinished child runs too. A
-- waiting parent of a canceled run is woken. False if the run had already finished.
CREATE OR REPLACE FUNCTION pgqueue.cancel(run_id bigint, children boolean DEFAULT false) RETURNS boolean
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
