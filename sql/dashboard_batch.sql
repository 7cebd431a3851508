-- One batch for the dashboard's batch page: its callback, its counts and the state of
-- the callback's run (by primary keys).
SELECT b.id, b.on_complete, b.queue, b.priority, b.max_attempts, b.kwargs, b.total,
       b.succeeded, b.failed, b.canceled, b.callback_run_id, cb.state AS callback_state,
       b.created_at, b.sealed_at, b.completed_at
FROM pgqueue.batches b
LEFT JOIN pgqueue.runs cb ON cb.id = b.callback_run_id
WHERE b.id = %(id)s::bigint
