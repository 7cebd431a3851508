-- The backoffs in force that hold runs %(ids)s back (RetryAfter(scope="queue" | "group")),
-- for `pgqueue runs show` and the dashboard's "why": their queue's, their group's (by
-- primary keys). None for a run that is running or finished.
SELECT r.id, 'queue' AS scope, r.queue, r.group_key, q.backoff_until AS until
FROM pgqueue.runs r
JOIN pgqueue.queues q ON q.name = r.queue
WHERE r.id = ANY (%(ids)s::bigint[]) AND r.state IN ('scheduled', 'queued', 'waiting')
  AND q.backoff_until > now()
UNION ALL
SELECT r.id, 'group', r.queue, r.group_key, b.until
FROM pgqueue.runs r
JOIN pgqueue.group_backoffs b ON b.queue = r.queue AND b.group_key = r.group_key
WHERE r.id = ANY (%(ids)s::bigint[]) AND r.state IN ('scheduled', 'queued', 'waiting')
  AND b.until > now()
ORDER BY 1, 2 DESC
