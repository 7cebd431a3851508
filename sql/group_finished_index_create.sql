-- The index behind the dashboard's lists of one group's finished runs, in any queue
-- (sql/dashboard_runs_by_finish_group.sql, sql/dashboard_count.sql): made on request with
-- runs_live_group_idx (`pgqueue runs search-index --by group`), not by a migration: every
-- run with a group that finishes writes an entry in it, as runs_finished_task_idx's
-- (task_finished_index_create.sql); the runs without a group (group_key '') have none.
-- CONCURRENTLY, outside a transaction, as
-- group_index_create.sql.
CREATE INDEX CONCURRENTLY IF NOT EXISTS runs_finished_group_idx
ON pgqueue.runs (group_key, finished_at, id)
WHERE state IN ('succeeded', 'failed', 'canceled') AND group_key <> ''
