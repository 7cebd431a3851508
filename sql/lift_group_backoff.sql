-- Lift the backoff of one group of a queue (`pgqueue queues resume QUEUE --group KEY`):
-- its runs may start again at once. Returns 1 if one was in force, else 0. The queue's
-- group_backoff_until stays (the latest end of its group backoffs, an upper bound: the
-- claim probes the groups it meets until then, and finds none for this one).
WITH gone AS (
    DELETE FROM pgqueue.group_backoffs
     WHERE queue = %(queue)s AND group_key = %(group)s AND until > now()
    RETURNING queue
)
SELECT count(*)
FROM (SELECT pg_notify('pgqueue_config', queue), pg_notify('pgqueue_queued', queue)
        FROM gone) n
