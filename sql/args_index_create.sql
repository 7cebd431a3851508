-- The index behind the dashboard's argument filter (sql/dashboard_runs_by_arg.sql): made
-- on request (`pgqueue runs search-index`), not by a migration, because every enqueue,
-- claim and finish writes its entries (about 11-14% of processing, bench/RESULTS.md).
-- CONCURRENTLY: enqueues and claims go on while it is built; run it outside a
-- transaction. A build that failed leaves an invalid index, which index_ready.sql
-- does not count and args_index_drop.sql removes.
CREATE INDEX CONCURRENTLY IF NOT EXISTS runs_args_idx ON pgqueue.runs
USING gin ((args || kwargs) jsonb_path_ops)
