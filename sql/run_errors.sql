SELECT attempt, kind, message, traceback, worker_id, created_at
FROM pgqueue.run_errors
WHERE run_id = %(id)s
ORDER BY id
