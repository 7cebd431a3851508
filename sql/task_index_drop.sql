-- Drop the dashboard's task index (task_index_create.sql); CONCURRENTLY, outside a
-- transaction, so enqueues and claims go on.
DROP INDEX CONCURRENTLY IF EXISTS pgqueue.runs_live_task_idx
