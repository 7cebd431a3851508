-- Drop the dashboard's argument index (args_index_create.sql); CONCURRENTLY, outside a
-- transaction, so enqueues and claims go on.
DROP INDEX CONCURRENTLY IF EXISTS pgqueue.runs_args_idx
