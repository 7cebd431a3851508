-- Safety net for waiting runs of one queue (the fast path wakes them directly): wake
-- those whose child finished or whose (possibly delayed) event is now due. Reads every
-- waiting run of the queue, so it runs seldom; deadlines are wake_expired_waits' job.
WITH ready AS (
    SELECT r.id
    FROM pgqueue.runs r
    WHERE r.state = 'waiting' AND r.queue = %(queue)s
      AND (EXISTS (SELECT 1 FROM pgqueue.runs c
                       WHERE c.id = r.wait_run_id
                         AND c.state IN ('succeeded', 'failed', 'canceled'))
           OR EXISTS (SELECT 1 FROM pgqueue.events e
                       WHERE e.event = r.wait_event AND e.key = r.wait_key
                         AND e.deliver_at >= r.wait_since AND e.deliver_at <= now()))
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
),
woken AS (
    UPDATE pgqueue.runs r SET state = 'queued', run_at = now()
      FROM ready WHERE r.id = ready.id
    RETURNING r.id
)
SELECT (SELECT count(*) FROM woken) AS woken,
       (SELECT count(pg_notify('pgqueue_queued', %(queue)s))
          FROM (SELECT 1 FROM woken LIMIT 1) w) AS notified
