-- Move scheduled runs of one queue whose time has come to `queued` and wake workers.
-- Also returns in how many seconds the next scheduled run of the queue is due, so the
-- caller can sleep until then.
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
       -- in seconds, and capped: a timestamp Python cannot hold (year 10000 in the
       -- session's time zone) must not fail the stager's pass (docs/security.md)
       (SELECT extract(epoch FROM CASE WHEN m > timestamptz '9999-12-31 00:00:00+00'
                                       THEN timestamptz '9999-12-31 00:00:00+00' ELSE m END
                                  - now())::double precision
          FROM (SELECT min(run_at) AS m FROM pgqueue.runs
                 WHERE state = 'scheduled' AND queue = %(queue)s AND run_at > now()) n)
           AS next_due_seconds
