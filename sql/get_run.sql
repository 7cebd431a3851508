SELECT id, task, queue, state, priority, args, kwargs, result, error, attempt, max_attempts,
       timeout_seconds, group_key, idempotency_key, parent_id, run_at, created_at, started_at,
       finished_at, worker_id, lease_expires_at, progress, cancel_reason
FROM pgqueue.runs
WHERE id = %(id)s
