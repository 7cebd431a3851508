-- The index behind the dashboard's lists of one group's unfinished runs, in any queue
-- (sql/dashboard_runs_live_group_any.sql, sql/dashboard_runs_unfinished_group.sql,
-- sql/dashboard_count.sql): made on request (`pgqueue runs search-index --by group`), not
-- by a migration, because every enqueue and claim of a run with a group writes an entry in
-- it, as runs_live_task_idx's (task_index_create.sql). Partial on the unfinished runs that
-- have a group (group_key '', the default, is none): the history and the runs without a
-- group have no entry. CONCURRENTLY, outside a transaction, as args_index_create.sql.
CREATE INDEX CONCURRENTLY IF NOT EXISTS runs_live_group_idx
ON pgqueue.runs (group_key, state, id)
WHERE state IN ('scheduled', 'queued', 'running', 'waiting') AND group_key <> ''
