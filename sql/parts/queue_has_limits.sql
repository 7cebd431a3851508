-- Whether queue `q` (a row of pgqueue.queues) has limits (concurrency, group_concurrency,
-- rate limits, ordered): the plain claim (claim.sql) leaves it alone, and a worker claims
-- it through claim_rated.sql (a queue-level rate limit and nothing else) or
-- claim_limited() (sql/queue_limits.sql). Which of its runs are flagged `limited` is
-- queue_flags_runs' rule. A group backoff in force (RetryAfter(scope="group")) counts as
-- a limit while it lasts: claim_limited() skips the groups backed off (their runs are
-- flagged by it as it goes, see there), and the plain claim stays as it is.
q.concurrency IS NOT NULL OR q.group_concurrency IS NOT NULL OR q.rate_limit IS NOT NULL
OR q.group_rate_limit IS NOT NULL OR q.ordered OR q.group_backoff_until > now()
