-- Waiting runs of one queue whose deadline passed (wait_for_event timeout): back to
-- `queued`, so the workflow replays and sees the timeout.
WITH due AS (
    SELECT id
    FROM pgqueue.runs
    WHERE state = 'waiting' AND queue = %(queue)s AND run_at <= now()
    ORDER BY run_at
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
),
woken AS (
    UPDATE pgqueue.runs r SET state = 'queued', run_at = now()
      FROM due WHERE r.id = due.id
    RETURNING r.id
)
SELECT (SELECT count(*) FROM woken) AS woken,
       (SELECT count(pg_notify('pgqueue_queued', %(queue)s))
          FROM (SELECT 1 FROM woken LIMIT 1) w) AS notified,
       -- in seconds, and capped: a timestamp Python cannot hold (year 10000 in the
       -- session's time zone) must not fail the stager's pass (docs/security.md)
       (SELECT extract(epoch FROM CASE WHEN m > timestamptz '9999-12-31 00:00:00+00'
                                       THEN timestamptz '9999-12-31 00:00:00+00' ELSE m END
                                  - now())::double precision
          FROM (SELECT min(run_at) AS m FROM pgqueue.runs
                 WHERE state = 'waiting' AND queue = %(queue)s AND run_at > now()) n)
           AS next_due_seconds
