-- Insert runs with unique keys (pgqueue.enqueue_unique(), sql/functions/): the ids in the
-- document's order and whether each was created (false: an earlier run in the key's
-- scope holds it, replaced or not). The runs are read as every enqueue statement reads
-- them (parts/enqueue_batch_input.sql) and handed to the function as one JSON object per
-- run, keyed by the part's column names, its due time as `run_at`.
-- pg_catalog.array_agg: see parts/enqueue_batch_result.sql.
{{enqueue_batch_input}}
document AS (
    SELECT pg_catalog.jsonb_agg(pg_catalog.to_jsonb(input)
                                || pg_catalog.jsonb_build_object('run_at', input.due)
                                ORDER BY n) AS runs
    FROM input
)
SELECT pg_catalog.array_agg(run_id ORDER BY run_n) AS ids,
       pg_catalog.array_agg(run_created ORDER BY run_n) AS created
FROM document,
     pgqueue.enqueue_unique(document.runs, %(batch_id)s::bigint, %(headers)s::jsonb,
                            %(notify)s::boolean)
