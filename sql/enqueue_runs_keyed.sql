-- enqueue_runs.sql for a batch in which some runs have an idempotency key: the same
-- statement plus ON CONFLICT (the parts in sql/parts/ are shared; tests/enqueue/test_enqueue.py
-- checks that the clause is all that differs).
-- A run whose key is taken, by an earlier run or by an earlier run of this batch, is
-- skipped: the caller looks the holder up (runs_by_idempotency_key.sql).
{{enqueue_batch_input}}
inserted AS (
    {{enqueue_insert}}
    ON CONFLICT (idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING
    RETURNING id, queue, state, idempotency_key
)
{{enqueue_batch_result}}
