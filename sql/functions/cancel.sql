-- Cancel a run that has not finished; with `children`, its unfinished child runs too. A
-- waiting parent of a canceled run is woken. `reason` (at most 1,000 bytes) is stored in
-- cancel_reason of every run it cancels. False if the run had already finished.
--
-- A canceled run of a limited queue whose attempt is running keeps that attempt's permit
-- (pgqueue.zombie_permits) until its worker sees the attempt's code end: a sync task's
-- thread cannot be stopped, and without this row the queue would start another body
-- while it runs on. The worker deletes the row when the code returns (the lease keeper
-- sweeps any it no longer runs); the row counts only while that worker beats, as a lease.
CREATE OR REPLACE FUNCTION pgqueue.cancel(run_id bigint, children boolean DEFAULT false, reason text DEFAULT NULL) RETURNS boolean
LANGUAGE plpgsql
SET search_path = pg_catalog, pgqueue, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    r record;
    found_any boolean := false;
BEGIN
    PERFORM pgqueue.check_length('cancel reason', cancel.reason, 1000);
    FOR r IN
        WITH RECURSIVE tree AS (
            SELECT cancel.run_id AS id
            UNION
            SELECT c.id FROM pgqueue.runs c JOIN tree t ON c.parent_id = t.id
            WHERE cancel.children
        ),
        was AS (
            SELECT x.id, x.state, x.limited, x.worker_id, x.lease_token, x.lease_expires_at
              FROM pgqueue.runs x JOIN tree ON x.id = tree.id
             WHERE x.state IN ('scheduled', 'queued', 'running', 'waiting')
               FOR UPDATE OF x
        )
        UPDATE pgqueue.runs x
           SET state = 'canceled', finished_at = now(), worker_id = NULL,
               lease_token = NULL, lease_expires_at = NULL, cancel_reason = cancel.reason
          FROM was
         WHERE x.id = was.id
        RETURNING x.id, x.notify_done, x.parent_id, x.queue, x.group_key,
                  was.limited AND was.state = 'running' AND was.lease_expires_at > now()
                      AS leased,
                  was.worker_id, was.lease_token, was.lease_expires_at
    LOOP
        IF r.id = cancel.run_id THEN
            found_any := true;
        END IF;
        IF r.leased THEN
            INSERT INTO pgqueue.zombie_permits
                   (lease_token, run_id, worker_id, queue, group_key, lease_seconds)
            SELECT r.lease_token, r.id, w.id, r.queue, r.group_key,
                   extract(epoch FROM least(r.lease_expires_at, now() + interval '1 day') - now())
              FROM pgqueue.workers w
             WHERE w.id = r.worker_id
            ON CONFLICT (lease_token) DO NOTHING;
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
