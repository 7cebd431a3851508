-- "Run now" for a scheduled run (a delay, a backoff, a durable sleep): queued at once,
-- with its due time now, and the queue's workers woken, as the stager does when its time
-- comes (stage_due.sql). By primary key; a run in any other state is left alone.
WITH moved AS (
    UPDATE pgqueue.runs
    SET state = 'queued', run_at = now()
    WHERE id = %(id)s::bigint AND state = 'scheduled'
    RETURNING queue
)
SELECT count(pg_notify('pgqueue_queued', queue)) AS moved FROM moved
