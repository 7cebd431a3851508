-- Queues that have a limit (their claims go through claim_limited).
SELECT name FROM pgqueue.queues
WHERE concurrency IS NOT NULL OR group_concurrency IS NOT NULL
