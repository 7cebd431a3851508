-- Whether the runs of queue `q` (a row of pgqueue.queues) are flagged `limited` at insert:
-- the queue is claimed by claim_limited() (a concurrency, a group concurrency, a group
-- rate limit, or ordered groups). runs_group_claim_idx and runs_group_order_idx hold only
-- flagged runs. A queue-level rate limit alone does not flag: claim_rated.sql claims such
-- a queue from runs_claim_idx and never reads the flag, and the flag would cost every
-- claim of its runs an entry in runs_group_order_idx (bench/RESULTS.md, "Rate limits").
-- Which claim a worker uses is queue_has_limits' rule (sql/queue_limits.sql). The
-- trigger function pgqueue.queue_limits_changed(), pgqueue.enqueue() and
-- pgqueue.enqueue_unique() apply the same rule in the database.
q.concurrency IS NOT NULL OR q.group_concurrency IS NOT NULL
OR q.group_rate_limit IS NOT NULL OR q.ordered
