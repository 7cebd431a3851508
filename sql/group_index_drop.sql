-- Drop the dashboard's index of a group's unfinished runs (group_index_create.sql);
-- CONCURRENTLY, outside a transaction, so enqueues and claims go on.
DROP INDEX CONCURRENTLY IF EXISTS pgqueue.runs_live_group_idx
