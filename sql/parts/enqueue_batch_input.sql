-- The runs of an enqueue statement (enqueue_run.sql, enqueue_runs.sql,
-- enqueue_runs_keyed.sql, enqueue_unique.sql), one row per element of the JSON document
-- `runs` (pgqueue.enqueue.encoding.document), in its order (n), read by
-- parts/enqueue_run_fields.sql; and the queues with limits.
-- Ends with a comma: the including statement's next CTE follows.
WITH input AS (
    SELECT {{enqueue_run_fields}},
           n
    FROM jsonb_array_elements(%(runs)s::jsonb) WITH ORDINALITY AS i (e, n)
),
-- Queues claimed by claim_limited(): their runs are flagged `limited`
-- (runs_group_claim_idx holds only those; the trigger pgqueue.queue_limits_changed()
-- re-flags a queue's runs when its limits change).
limits AS (
    SELECT q.name FROM pgqueue.queues q
    WHERE {{queue_flags_runs}}
),
