-- Whether the dashboard's index %(index)s (pgqueue.runs_args_idx, runs_live_task_idx,
-- runs_live_group_idx..., made on request: `pgqueue runs search-index`) exists and
-- is usable (a build that failed or is still going leaves it invalid or not ready).
SELECT coalesce((SELECT i.indisvalid AND i.indisready FROM pg_catalog.pg_index i
                  WHERE i.indexrelid = to_regclass(%(index)s::text)), false)
