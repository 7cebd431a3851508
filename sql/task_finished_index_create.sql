-- The index behind the dashboard's lists of one task's finished runs
-- (sql/dashboard_runs_by_finish_task.sql, sql/dashboard_count.sql): made on request with
-- runs_live_task_idx (`pgqueue runs search-index --by task`), not by a migration: every
-- run that finishes writes an entry in it, a WAL record and about 1.7 us of the server's
-- time more per run (bench/RESULTS.md). CONCURRENTLY, outside a transaction, as
-- task_index_create.sql.
CREATE INDEX CONCURRENTLY IF NOT EXISTS runs_finished_task_idx
ON pgqueue.runs (task, finished_at, id)
WHERE state IN ('succeeded', 'failed', 'canceled')
