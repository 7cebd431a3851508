-- Insert one run (enqueue, enqueue_by_name): what enqueue_runs.sql does for a batch, with
-- the values as parameters and no JSON document to take apart (a little faster per call).
-- Due now: `queued`, and a NOTIFY of its queue (delivered at commit); later: `scheduled`.
-- A taken idempotency key inserts nothing and returns no id: the caller looks the
-- holder up (runs_by_idempotency_key.sql).
WITH inserted AS (
    INSERT INTO pgqueue.runs (task, queue, state, priority, args, kwargs, max_attempts,
                              timeout_seconds, group_key, idempotency_key, run_at, parent_id,
                              limited, headers, batch_id)
    SELECT %(task)s::text, %(queue)s::text,
           {{run_state_from_due}},
           %(priority)s::smallint, %(args)s::jsonb, %(kwargs)s::jsonb, %(max_attempts)s::integer,
           %(timeout_seconds)s::double precision, coalesce(%(group_key)s::text, ''),
           %(idempotency_key)s::text, due, %(parent_id)s::bigint,
           -- flagged if its queue is claimed by claim_limited()
           EXISTS (SELECT 1 FROM pgqueue.queues q
                    WHERE q.name = %(queue)s::text
                      AND ({{queue_flags_runs}})),
           %(headers)s::jsonb, %(batch_id)s::bigint
    FROM (SELECT coalesce(%(run_at)s::timestamptz,
                          now() + coalesce(%(delay)s::double precision, 0) * interval '1 second')
                 AS due) d
    ON CONFLICT (idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING
    RETURNING id, queue, state, idempotency_key
)
-- The batch statements' shape: one row of (ids, keys, notified).
SELECT array_agg(id) AS ids, array_agg(idempotency_key) AS keys,
       (SELECT count(pg_notify('pgqueue_queued', queue))
          FROM inserted WHERE state = 'queued' AND %(notify)s::boolean) AS notified
FROM inserted
