-- Insert one run with any of the options (enqueue with options, enqueue_by_name; the plain
-- case is enqueue_run_plain.sql): enqueue_runs_keyed.sql's insert of a one-run document,
-- with a row per run inserted instead of the batch statements' aggregated row. Due now:
-- `queued`, and a NOTIFY of its queue (delivered at commit); later: `scheduled`.
-- A row (id, idempotency_key, _) for the run inserted; none when its idempotency key was
-- taken: the caller looks the holder up (runs_by_idempotency_key.sql). Aggregating a
-- single row cost the server about 17 us a call (bench/RESULTS.md, "Single enqueue").
{{enqueue_batch_input}}
inserted AS (
    {{enqueue_insert}}
    ON CONFLICT (idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING
    RETURNING id, queue, state, idempotency_key
)
SELECT id, idempotency_key,
       CASE WHEN state = 'queued' AND %(notify)s::boolean
            THEN pg_notify('pgqueue_queued', queue) END
FROM inserted
