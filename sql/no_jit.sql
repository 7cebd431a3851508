-- Inside the transaction of a statement that reads what the history or a backlog holds
-- (queue_stats, the dashboard's overview and queue page, `pgqueue queues`, a worker's
-- queue depth gauges, the tally of finished runs, pruning, bulk actions and their
-- counts): no JIT compilation. Over a large pgqueue.runs the planner prices these above
-- jit_above_cost, and compiling costs 0.1 to 1 s, more than the statement itself (a
-- prune that found nothing to delete: 69 ms to run, 985 ms to compile).
SET LOCAL jit = off
