-- Queues that have a limit (their claims go through claim_limited), and whether a rate
-- limit is among them (a claim it cut short asks when to try again: rate_open_at.sql).
SELECT q.name, q.rate_limit IS NOT NULL OR q.group_rate_limit IS NOT NULL AS rated
FROM pgqueue.queues q
WHERE {{queue_has_limits}}
