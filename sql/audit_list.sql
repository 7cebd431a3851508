-- The dashboard's audit page: operator actions newest first, before a cursor (audit_pkey
-- read backwards).
SELECT id, at, actor, action, run_id, target, count, reason
FROM pgqueue.audit
WHERE id < %(before_id)s::bigint
ORDER BY id DESC
LIMIT %(limit)s::integer
