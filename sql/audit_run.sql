-- The operator actions on one run, newest first (audit_run_idx).
SELECT id, at, actor, action, run_id, target, count, reason
FROM pgqueue.audit
WHERE run_id = %(id)s::bigint
ORDER BY id DESC
LIMIT 100
