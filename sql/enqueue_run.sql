-- Insert one run with any of the options (enqueue with options, enqueue_by_name; the plain
-- case is enqueue_run_plain.sql): enqueue_runs_keyed.sql's insert (parts/enqueue_insert.sql)
-- of the run's encoding (`run`, one array, read by parts/enqueue_run_fields.sql), with a
-- row per run inserted instead of the batch statements' aggregated row. Due now:
-- `queued`, and a NOTIFY of its queue (delivered at commit); later: `scheduled`.
-- A row (id, idempotency_key, _) for the run inserted; none when its idempotency key was
-- taken: the caller looks the holder up (runs_by_idempotency_key.sql). Aggregating a
-- single row cost the server about 17 us a call (bench/RESULTS.md, "Single enqueue").
WITH input AS (
    SELECT {{enqueue_run_fields}},
           1 AS n
    FROM (SELECT %(run)s::jsonb AS e) i
),
-- the queues claimed by claim_limited(), as in parts/enqueue_batch_input.sql
limits AS (
    SELECT q.name FROM pgqueue.queues q
    WHERE {{queue_flags_runs}}
),
inserted AS (
    {{enqueue_insert}}
    ON CONFLICT (idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING
    RETURNING id, queue, state, idempotency_key
)
SELECT id, idempotency_key,
       CASE WHEN state = 'queued' AND %(notify)s::boolean
            THEN pg_notify('pgqueue_queued', queue) END
FROM inserted
