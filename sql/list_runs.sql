-- Newest runs first, optionally filtered (for `pgqueue runs list`; not a hot path).
SELECT id, task, queue, state, priority, args, kwargs, result, error, attempt, max_attempts,
       timeout_seconds, group_key, idempotency_key, parent_id, run_at, created_at, started_at,
       finished_at, worker_id, lease_expires_at, progress, cancel_reason
FROM pgqueue.runs
WHERE (%(state)s::text IS NULL OR state = %(state)s::text)
  AND (%(queue)s::text IS NULL OR queue = %(queue)s::text)
  AND (%(task)s::text IS NULL OR task = %(task)s::text)
ORDER BY id DESC
LIMIT %(limit)s
