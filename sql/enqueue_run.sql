-- Insert one run with any of the options (enqueue with options, enqueue_by_name; the plain
-- case is enqueue_run_plain.sql): what enqueue_runs.sql does for a batch, with the values
-- as parameters and no JSON document to take apart. Due now: `queued`, and a NOTIFY of its
-- queue (delivered at commit); later: `scheduled`.
-- A row (id, idempotency_key, _) for the run inserted; none when its idempotency key was
-- taken: the caller looks the holder up (runs_by_idempotency_key.sql). Not the batch
-- statements' one aggregated row: aggregating a single row cost the server about 17 us
-- a call (bench/RESULTS.md, "Single enqueue").
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
SELECT id, idempotency_key,
       CASE WHEN state = 'queued' AND %(notify)s::boolean
            THEN pg_notify('pgqueue_queued', queue) END
FROM inserted
