-- The result row of a batch statement (enqueue_runs.sql, enqueue_runs_keyed.sql), from
-- its `inserted` CTE: the ids and keys as two arrays in id order (a row per run cost the
-- client more than building the document), and how many queues were notified.
SELECT array_agg(id ORDER BY id) AS ids,
       array_agg(idempotency_key ORDER BY id) AS keys,
       (SELECT count(pg_notify('pgqueue_queued', q.queue))
          FROM (SELECT DISTINCT queue FROM inserted
                 WHERE state = 'queued' AND %(notify)s::boolean) q) AS notified
FROM inserted
