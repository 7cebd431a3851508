-- enqueue_runs.sql for a batch in which some runs have an idempotency key: the same
-- statement plus ON CONFLICT (the parts in sql/parts/ are shared; tests/enqueue/test_enqueue.py
-- checks that the clause is all that differs).
-- A run whose key is taken, by an earlier run or by an earlier run of this batch, is
-- skipped: the caller looks the holder up (runs_by_idempotency_key.sql).
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
    ON CONFLICT (idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING
    RETURNING id, queue, state, idempotency_key
)
{{enqueue_batch_result}}
