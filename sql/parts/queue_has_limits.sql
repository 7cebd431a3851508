-- Whether queue `q` (a row of pgqueue.queues) has limits (concurrency, group_concurrency,
-- rate limits, ordered): its runs are then flagged
-- `limited` at insert (runs_group_claim_idx holds only those, and claim_limited() claims
-- them); a worker claims its queue through claim_limited(). The trigger function
-- pgqueue.queue_limits_changed() and pgqueue.enqueue() apply the same rule in the database.
q.concurrency IS NOT NULL OR q.group_concurrency IS NOT NULL OR q.rate_limit IS NOT NULL
OR q.group_rate_limit IS NOT NULL OR q.ordered
