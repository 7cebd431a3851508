-- Failed runs with the last recorded error (kind, message, traceback) of each.
CREATE OR REPLACE VIEW pgqueue.failed AS
SELECT r.id, r.task, r.queue, r.group_key, r.attempt, r.max_attempts, r.args, r.kwargs,
       r.error, e.kind AS error_kind, e.traceback, r.created_at, r.finished_at, r.parent_id
FROM pgqueue.runs r
LEFT JOIN LATERAL (
    SELECT x.kind, x.traceback
    FROM pgqueue.run_errors x
    WHERE x.run_id = r.id
    ORDER BY x.id DESC
    LIMIT 1
) e ON true
WHERE r.state = 'failed';
