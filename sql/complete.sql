-- Record the outcome of a batch of attempts this worker held. Every row is fenced by
-- its lease token and a lease that is still valid: a worker whose lease expired (and
-- whose run may have been rescued by another) changes nothing. `refund` gives the
-- attempt back (RetryAfter, release at shutdown). Returns the runs that were written.
WITH outcome AS (
    SELECT *
    FROM unnest(
        %(id)s::bigint[], %(lease_token)s::uuid[], %(state)s::text[], %(result)s::text[]::jsonb[],
        %(error)s::text[], %(error_kind)s::text[], %(traceback)s::text[],
        %(delay)s::double precision[], %(refund)s::boolean[]
    ) AS o (id, lease_token, state, result, error, error_kind, traceback, delay, refund)
),
written AS (
    UPDATE pgqueue.runs r
       SET state = o.state,
           result = o.result,
           error = o.error,
           attempt = r.attempt - o.refund::integer,
           run_at = CASE WHEN o.state = 'scheduled'
                         THEN now() + o.delay * interval '1 second' ELSE r.run_at END,
           finished_at = CASE WHEN o.state IN ('succeeded', 'failed', 'canceled')
                              THEN now() END,
           worker_id = NULL,
           lease_token = NULL,
           lease_expires_at = NULL
      FROM outcome o
     WHERE r.id = o.id
       AND r.lease_token = o.lease_token
       AND r.state = 'running'
       AND r.lease_expires_at > now()
    RETURNING r.id, r.queue, r.state, r.notify_done, o.error, o.error_kind, o.traceback,
              r.attempt + o.refund::integer AS attempt
),
logged AS (
    INSERT INTO pgqueue.run_errors (run_id, attempt, kind, message, traceback, worker_id)
    SELECT id, attempt, error_kind, error, traceback, %(worker_id)s::uuid
    FROM written
    WHERE error_kind IS NOT NULL
)
SELECT id,
       (SELECT count(pg_notify('pgqueue_done', w.id::text))
          FROM written w WHERE w.notify_done
                           AND w.state IN ('succeeded', 'failed', 'canceled'))
     + (SELECT count(pg_notify('pgqueue_queued', q.queue))
          FROM (SELECT DISTINCT queue FROM written WHERE state = 'queued') q) AS notified
FROM written
