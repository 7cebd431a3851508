-- The index behind the dashboard's lists of one task's unfinished runs
-- (sql/dashboard_runs_live_task.sql, sql/dashboard_count.sql): made on request (`pgqueue
-- runs search-index --by task`), not by a migration, because every enqueue and claim
-- writes an entry in it (bulk enqueues 0.78x, bench/RESULTS.md). Partial on the
-- unfinished runs: the history has no entry. CONCURRENTLY, outside a transaction, as
-- args_index_create.sql.
CREATE INDEX CONCURRENTLY IF NOT EXISTS runs_live_task_idx ON pgqueue.runs (task, state, id)
WHERE state IN ('scheduled', 'queued', 'running', 'waiting')
