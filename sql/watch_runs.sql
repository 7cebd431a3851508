-- The start of many wait_async() at once (pgqueue.runs.waiters, one statement per batch):
-- watch_run.sql for each of these runs, and the ids of those whose waiter must read its
-- run now: ended, gone, or not marked by this update although its snapshot shows it
-- unmarked (it ended, or another waiter marked it, while the update waited for its row
-- lock). A run still queued is announced on pgqueue_queued, once per queue (watch_run.sql
-- says why); the scalar subquery in the select list makes that happen for every batch.
WITH watched AS (
    UPDATE pgqueue.runs SET notify_done = true
    WHERE id = ANY(%(ids)s::bigint[]) AND NOT notify_done
      AND state NOT IN ('succeeded', 'failed', 'canceled')
    RETURNING id, queue, state
), announced AS (
    SELECT pg_catalog.count(pg_notify('pgqueue_queued', q.queue)) AS n
    FROM (SELECT DISTINCT queue FROM watched WHERE state = 'queued') AS q
)
SELECT (SELECT n FROM announced) AS announced,
       ARRAY(SELECT a.id
             FROM unnest(%(ids)s::bigint[]) AS a(id)
             LEFT JOIN pgqueue.runs r ON r.id = a.id
             WHERE NOT EXISTS (SELECT 1 FROM watched w WHERE w.id = a.id)
               AND (r.id IS NULL OR NOT r.notify_done
                    OR r.state IN ('succeeded', 'failed', 'canceled'))) AS look
