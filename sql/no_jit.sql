-- Inside the transaction of a read that sums what the history or a backlog holds
-- (queue_stats, the dashboard's overview and queue page, `pgqueue queues`, a worker's
-- queue depth gauges): no JIT compilation. Over a large pgqueue.runs the planner prices
-- the backlog's counts above jit_above_cost, and compiling costs 0.1 to 1 s, more than
-- the query itself (tens of ms).
SET LOCAL jit = off
