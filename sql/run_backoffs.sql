-- The backoffs in force that hold runs %(ids)s back (RetryAfter(scope="queue" | "group")),
-- for `pgqueue runs show` and the dashboard's "why": their queue's, their group's. None
-- for a run that is running or finished. The runs are read once, by primary key
-- (MATERIALIZED): read in each arm, the planner priced a page of 500 high enough for a
-- parallel plan, whose workers' start took most of its 7 to 12 ms.
WITH r AS MATERIALIZED (
    SELECT id, queue, group_key
    FROM pgqueue.runs
    WHERE id = ANY (%(ids)s::bigint[]) AND state IN ('scheduled', 'queued', 'waiting')
)
SELECT r.id, 'queue' AS scope, r.queue, r.group_key, q.backoff_until AS until
FROM r
JOIN pgqueue.queues q ON q.name = r.queue
WHERE q.backoff_until > now()
UNION ALL
SELECT r.id, 'group', r.queue, r.group_key, b.until
FROM r
JOIN pgqueue.group_backoffs b ON b.queue = r.queue AND b.group_key = r.group_key
WHERE b.until > now()
ORDER BY 1, 2 DESC
