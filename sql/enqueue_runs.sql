-- Insert several runs sent as one JSON document (enqueue_many; App.insert_runs of more
-- than one row). Parameter `runs` holds one array per run:
--     [args, kwargs, group_key, idempotency_key, task, queue, priority, max_attempts,
--      timeout_seconds, run_at, delay, parent_id]
-- An array may stop early: a missing or null value is the batch's, from the parameter of
-- the same name. enqueue_many sends [args, kwargs] per run (and group_key when the task's
-- group is a function of its arguments) and the values its runs share once.
-- Runs due now are `queued` and wake idle workers with one NOTIFY per queue (Postgres
-- folds repeats within a transaction and delivers them at commit); later ones are
-- `scheduled`. Ids follow the document's order (the caller maps them back by it).
-- No ON CONFLICT here: a batch with idempotency keys goes to enqueue_runs_keyed.sql, this
-- statement plus that clause (which makes every row a speculative insertion).
{{enqueue_batch_input}}
inserted AS (
    INSERT INTO pgqueue.runs (task, queue, state, priority, args, kwargs, max_attempts,
                              timeout_seconds, group_key, idempotency_key, run_at, parent_id,
                              limited, headers, batch_id)
    SELECT task, queue, {{run_state_from_due}},
           priority, args, kwargs, max_attempts, timeout_seconds, group_key, idempotency_key,
           due, parent_id, queue IN (SELECT name FROM limits), %(headers)s::jsonb,
           %(batch_id)s::bigint
    FROM input
    ORDER BY n
    RETURNING id, queue, state, idempotency_key
)
{{enqueue_batch_result}}
