-- Move scheduled runs of one queue whose time has come to `queued` and wake workers.
-- Also returns when the next scheduled run of the queue is due, so the caller can
-- sleep until then.
WITH due AS (
    SELECT id
    FROM pgqueue.runs
    WHERE state = 'scheduled' AND queue = %(queue)s AND run_at <= now()
    ORDER BY run_at
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
),
staged AS (
    UPDATE pgqueue.runs r SET state = 'queued' FROM due WHERE r.id = due.id RETURNING r.id
)
SELECT (SELECT count(*) FROM staged) AS staged,
       (SELECT count(pg_notify('pgqueue_queued', %(queue)s))
          FROM (SELECT 1 FROM staged LIMIT 1) s) AS notified,
       (SELECT min(run_at) FROM pgqueue.runs
         WHERE state = 'scheduled' AND queue = %(queue)s AND run_at > now()) AS next_due
