-- Queues that have a limit (their claims go through claim_limited), whether a rate
-- limit is among them (a claim it cut short asks when to try again: rate_open_at.sql),
-- and whether a queue-level rate limit is all they have (claim_rated.sql claims them).
SELECT q.name, q.rate_limit IS NOT NULL OR q.group_rate_limit IS NOT NULL AS rated,
       q.rate_limit IS NOT NULL AND q.concurrency IS NULL AND q.group_concurrency IS NULL
       AND q.group_rate_limit IS NULL AND NOT q.ordered AS rate_only
FROM pgqueue.queues q
WHERE {{queue_has_limits}}
