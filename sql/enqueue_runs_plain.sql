-- enqueue_many's batch (App.insert_runs of a RunBatch): one task, one set of options.
-- `shared` is the encoding of what its runs share (pgqueue.enqueue.encoding.encode of the
-- batch's shared row), read once by parts/enqueue_run_fields.sql; `runs` holds per run
-- the start of its encoding that varies: [args, kwargs], or, when `grouped` (the task's
-- group is a function of the arguments), [args, kwargs, group_key]. Reading every field
-- from each element cost 12 percent of a batch's time (bench/RESULTS.md), hence this
-- statement; each shared value is a scalar subquery of `s`, computed once (a join with
-- `s` cost 0.2 to 0.3 us a run). Same result row (ids in id order, keys all NULL,
-- notified) as enqueue_runs.sql.
WITH s AS MATERIALIZED (
    SELECT {{enqueue_run_fields}},
           -- flagged if the queue is claimed by claim_limited()
           EXISTS (SELECT 1 FROM pgqueue.queues q
                    WHERE q.name = e ->> 5
                      AND ({{queue_flags_runs}})) AS limited
    FROM (SELECT %(shared)s::jsonb AS e) b
),
inserted AS (
    INSERT INTO pgqueue.runs (task, queue, state, priority, args, kwargs, max_attempts,
                              timeout_seconds, group_key, run_at, parent_id, limited,
                              headers, batch_id, after, on_dependency_failure)
    SELECT (SELECT task FROM s), (SELECT queue FROM s),
           (SELECT {{run_state_from_due}} FROM s), (SELECT priority FROM s),
           i.e -> 0, i.e -> 1, (SELECT max_attempts FROM s), (SELECT timeout_seconds FROM s),
           CASE WHEN %(grouped)s::boolean
                THEN coalesce(i.e ->> 2, (SELECT group_key FROM s))
                ELSE (SELECT group_key FROM s) END,
           (SELECT due FROM s), (SELECT parent_id FROM s), (SELECT limited FROM s),
           %(headers)s::jsonb, %(batch_id)s::bigint,
           (SELECT after FROM s), (SELECT on_dependency_failure FROM s)
    FROM jsonb_array_elements(%(runs)s::jsonb) WITH ORDINALITY AS i (e, n)
    ORDER BY i.n
    RETURNING id, state
)
SELECT pg_catalog.array_agg(id ORDER BY id) AS ids,  -- see parts/enqueue_batch_result.sql
       pg_catalog.array_agg(NULL::text) AS keys,
       (SELECT pg_catalog.count(pg_notify('pgqueue_queued', s.queue))
          FROM s
         WHERE %(notify)s::boolean
           AND EXISTS (SELECT 1 FROM inserted WHERE state = 'queued')) AS notified
FROM inserted
