-- Drop the dashboard's index of a task's finished runs (task_finished_index_create.sql);
-- CONCURRENTLY, outside a transaction, so work goes on.
DROP INDEX CONCURRENTLY IF EXISTS pgqueue.runs_finished_task_idx
