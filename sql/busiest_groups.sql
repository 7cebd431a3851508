SELECT queue, group_key, running, queued, deferred, last_started_at, rate_used
FROM pgqueue.groups
WHERE %(queue)s::text IS NULL OR queue = %(queue)s::text
ORDER BY running DESC, queued DESC, queue, group_key
LIMIT %(limit)s
