-- One run for the dashboard's run page: the row, what it waits for (an event, a child run,
-- or the dependencies not finished yet: waiting_for), and the worker that
-- holds its lease (by primary key); the batch it belongs to, if any.
SELECT r.id, r.task, r.queue, r.state, r.priority, r.args, r.kwargs, r.result, r.error,
       r.attempt, r.max_attempts, r.timeout_seconds, r.group_key, r.idempotency_key,
       r.parent_id, r.run_at, r.created_at, r.started_at, r.finished_at, r.worker_id,
       r.lease_expires_at, r.progress, r.cancel_reason, r.batch_id,
       extract(epoch FROM r.lease_expires_at - now())::double precision AS lease_left_seconds,
       r.wait_event, r.wait_key, r.wait_since, r.wait_run_id, r.after, r.on_dependency_failure,
       CASE WHEN r.state = 'waiting' AND r.after IS NOT NULL THEN
           ARRAY(SELECT d.id FROM pgqueue.runs d
                  WHERE d.id = ANY (r.after) AND d.state NOT IN ('succeeded', 'failed', 'canceled')
                  ORDER BY d.id) END AS waiting_for,
       w.host AS worker_host, w.pid AS worker_pid, now() AS now
FROM pgqueue.runs r
LEFT JOIN pgqueue.workers w ON w.id = r.worker_id
WHERE r.id = %(id)s
