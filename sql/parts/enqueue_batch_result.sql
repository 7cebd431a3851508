-- The result row of a batch statement (enqueue_runs.sql, enqueue_runs_keyed.sql), from
-- its `inserted` CTE: the ids and keys as two arrays in id order (a row per run cost the
-- client more than building the document), and how many queues were notified.
-- pg_catalog.array_agg: on a caller's connection (conn=) names resolve with the caller's
-- search_path, where an array_agg(bigint) in another schema would match better than the
-- polymorphic builtin (docs/security.md, "search_path").
SELECT pg_catalog.array_agg(id ORDER BY id) AS ids,
       pg_catalog.array_agg(idempotency_key ORDER BY id) AS keys,
       (SELECT count(pg_notify('pgqueue_queued', q.queue))
          FROM (SELECT DISTINCT queue FROM inserted
                 WHERE state = 'queued' AND %(notify)s::boolean) q) AS notified
FROM inserted
