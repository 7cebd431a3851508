-- The SET of an upsert into pgqueue.queues that writes the limits a queue has at run time
-- and in code alike (`pgqueue queues set`: set_queue_limits.sql; a worker's start:
-- configure_queue.sql) from its EXCLUDED row.
concurrency = EXCLUDED.concurrency,
group_concurrency = EXCLUDED.group_concurrency,
rate_limit = EXCLUDED.rate_limit,
rate_period = EXCLUDED.rate_period,
group_rate_limit = EXCLUDED.group_rate_limit,
group_rate_period = EXCLUDED.group_rate_period,
ordered = EXCLUDED.ordered
