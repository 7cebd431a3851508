-- One run by id (RunHandle.get, app.get_run, `pgqueue runs show`). `waiting_for`: while
-- it waits for dependencies, those not finished yet (by primary key), else NULL.
SELECT r.id, r.task, r.queue, r.state, r.priority, r.args, r.kwargs, r.result, r.error,
       r.attempt, r.max_attempts, r.timeout_seconds, r.group_key, r.idempotency_key,
       r.parent_id, r.run_at, r.created_at, r.started_at, r.finished_at, r.worker_id,
       r.lease_expires_at, r.progress, r.cancel_reason, r.after, r.on_dependency_failure,
       CASE WHEN r.state = 'waiting' AND r.after IS NOT NULL
            THEN ARRAY(SELECT d.id FROM pgqueue.runs d
                        WHERE d.id = ANY(r.after)
                          AND d.state NOT IN ('succeeded', 'failed', 'canceled')
                        ORDER BY d.id) END AS waiting_for
FROM pgqueue.runs r
WHERE r.id = %(id)s
