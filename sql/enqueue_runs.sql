-- Insert runs sent as one JSON document (App.insert_runs of more than one row): parameter
-- `runs` holds one array per run, pgqueue.enqueue.encoding's, read by
-- parts/enqueue_run_fields.sql.
-- Runs due now are `queued` and wake idle workers with one NOTIFY per queue (Postgres
-- folds repeats within a transaction and delivers them at commit); later ones are
-- `scheduled`. Ids follow the document's order (the caller maps them back by it).
-- No ON CONFLICT here: a batch with idempotency keys goes to enqueue_runs_keyed.sql, this
-- statement plus that clause (which makes every row a speculative insertion).
{{enqueue_batch_input}}
inserted AS (
    {{enqueue_insert}}
    RETURNING id, queue, state, idempotency_key
)
{{enqueue_batch_result}}
