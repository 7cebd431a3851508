-- Take back runs of one queue whose lease expired (worker killed, hung or cut off).
-- The lost attempt counts: a run that kills its worker every time ends `failed`
-- after max_attempts instead of looping forever.
WITH expired AS (
    SELECT id, worker_id
    FROM pgqueue.runs
    WHERE state = 'running' AND queue = %(queue)s AND lease_expires_at <= now()
    ORDER BY lease_expires_at
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
),
rescued AS (
    UPDATE pgqueue.runs r
       SET state = CASE WHEN r.attempt >= r.max_attempts THEN 'failed' ELSE 'queued' END,
           error = 'lease expired: the worker running attempt ' || r.attempt
                   || ' stopped renewing it (killed, hung or cut off from the database)',
           finished_at = CASE WHEN r.attempt >= r.max_attempts THEN now() END,
           worker_id = NULL,
           lease_token = NULL,
           lease_expires_at = NULL
      FROM expired e
     WHERE r.id = e.id
    RETURNING r.id, r.queue, r.state, r.attempt, r.error, r.notify_done, r.parent_id,
              e.worker_id
),
parents AS (
    UPDATE pgqueue.runs p
       SET state = 'queued', run_at = now()
      FROM rescued w
     WHERE w.state = 'failed' AND w.parent_id IS NOT NULL AND p.id = w.parent_id
       AND p.state = 'waiting' AND p.wait_run_id = w.id
    RETURNING p.queue
),
logged AS (
    INSERT INTO pgqueue.run_errors (run_id, attempt, kind, message, worker_id)
    SELECT id, attempt, 'lease_expired', error, worker_id FROM rescued
)
SELECT id, state,
       (SELECT count(pg_notify('pgqueue_done', r.id::text))
          FROM rescued r WHERE r.notify_done AND r.state = 'failed')
     + (SELECT count(pg_notify('pgqueue_queued', q.queue))
          FROM (SELECT queue FROM rescued WHERE state = 'queued'
                UNION SELECT queue FROM parents) q) AS notified
FROM rescued
