-- Drop the dashboard's index of a group's finished runs (group_finished_index_create.sql);
-- CONCURRENTLY, outside a transaction, so work goes on.
DROP INDEX CONCURRENTLY IF EXISTS pgqueue.runs_finished_group_idx
