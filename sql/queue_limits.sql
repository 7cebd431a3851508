-- Queues that have a limit (their claims go through claim_limited).
SELECT q.name FROM pgqueue.queues q
WHERE {{queue_has_limits}}
