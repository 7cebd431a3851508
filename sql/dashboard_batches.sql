-- The dashboard's batches page: the newest batches before a cursor (batches_pkey read
-- backwards), their counts (the view sums each one's slots through batch_counts_pkey)
-- and the state of each callback's run (runs_pkey).
SELECT b.id, b.on_complete, b.queue, b.total, b.succeeded, b.failed, b.canceled,
       b.callback_run_id, cb.state AS callback_state, b.created_at, b.sealed_at,
       b.completed_at
FROM pgqueue.batches b
LEFT JOIN pgqueue.runs cb ON cb.id = b.callback_run_id
WHERE b.id < %(before_id)s::bigint
ORDER BY b.id DESC
LIMIT %(limit)s::integer
