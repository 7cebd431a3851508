-- enqueue_many's common batch (App.insert_runs of a RunBatch whose runs carry no group of
-- their own): the document holds [args, kwargs] per run and everything else is the
-- batch's, passed once. enqueue_runs.sql takes ten more fields from each element, absent
-- here: that cost 12 percent of a batch's time (bench/RESULTS.md). Same rows, same
-- result row (ids in id order, keys all NULL, notified) as enqueue_runs.sql.
WITH inserted AS (
    INSERT INTO pgqueue.runs (task, queue, state, priority, args, kwargs, max_attempts,
                              timeout_seconds, group_key, run_at, parent_id, limited,
                              headers, batch_id)
    SELECT %(task)s::text, %(queue)s::text,
           {{run_state_from_due}},
           %(priority)s::smallint, i.e -> 0, i.e -> 1, %(max_attempts)s::integer,
           %(timeout_seconds)s::double precision, coalesce(%(group_key)s::text, ''), b.due,
           %(parent_id)s::bigint, b.limited, %(headers)s::jsonb, %(batch_id)s::bigint
    FROM jsonb_array_elements(%(runs)s::jsonb) WITH ORDINALITY AS i (e, n),
         (SELECT coalesce(%(run_at)s::timestamptz,
                          now() + coalesce(%(delay)s::double precision, 0)
                                  * interval '1 second') AS due,
                 -- flagged if the queue is claimed by claim_limited()
                 EXISTS (SELECT 1 FROM pgqueue.queues q
                          WHERE q.name = %(queue)s::text
                            AND ({{queue_flags_runs}})) AS limited) b
    ORDER BY i.n
    RETURNING id, state
)
SELECT pg_catalog.array_agg(id ORDER BY id) AS ids,  -- see parts/enqueue_batch_result.sql
       pg_catalog.array_agg(NULL::text) AS keys,
       (SELECT pg_catalog.count(pg_notify('pgqueue_queued', %(queue)s::text))
         WHERE %(notify)s::boolean
           AND EXISTS (SELECT 1 FROM inserted WHERE state = 'queued')) AS notified
FROM inserted
