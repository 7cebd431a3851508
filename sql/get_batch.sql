-- One batch's counts and callback (Batch.wait, app.get_batch).
SELECT id, on_complete, total, succeeded, failed, canceled, callback_run_id, created_at,
       sealed_at, completed_at
FROM pgqueue.batches
WHERE id = %(id)s::bigint
