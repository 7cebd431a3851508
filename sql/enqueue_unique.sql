-- Insert runs with unique keys (pgqueue.enqueue_unique(), sql/functions/): `runs` is the
-- runs' document (pgqueue.enqueue.encoding), which the function reads at the positions
-- parts/enqueue_run_fields.sql reads. The ids in the document's order and whether each
-- was created (false: an earlier run in the key's scope holds it, replaced or not).
-- pg_catalog.array_agg: see parts/enqueue_batch_result.sql.
SELECT pg_catalog.array_agg(run_id ORDER BY run_n) AS ids,
       pg_catalog.array_agg(run_created ORDER BY run_n) AS created
FROM pgqueue.enqueue_unique(%(runs)s::jsonb, %(batch_id)s::bigint, %(headers)s::jsonb,
                            %(notify)s::boolean)
