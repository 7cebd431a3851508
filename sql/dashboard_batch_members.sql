-- A page of a batch's members in id order, after a cursor (runs_batch_idx).
SELECT r.id, r.task, r.queue, r.state, r.attempt, r.max_attempts, r.created_at,
       r.finished_at, r.error
FROM pgqueue.runs r
WHERE r.batch_id = %(id)s::bigint AND r.id > %(after_id)s::bigint
ORDER BY r.id
LIMIT %(limit)s::integer
