-- Whether the dashboard's argument index exists and is usable (a build that failed or is
-- still going leaves it invalid or not ready).
SELECT coalesce((SELECT i.indisvalid AND i.indisready FROM pg_catalog.pg_index i
                  WHERE i.indexrelid = to_regclass('pgqueue.runs_args_idx')), false)
