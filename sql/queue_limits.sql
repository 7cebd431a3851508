-- Queues whose claims go through claim_limited (`limited`: a limit, or a group backoff in
-- force), whose claim cut short asks when to try again (`wakes`: a rate limit or a
-- backoff holds it back; rate_open_at.sql), and whether a queue-level rate limit is all
-- they have (`rate_only`: claim_rated.sql claims them). A queue backed off as a whole
-- (backoff_until) keeps its claim: each of them yields nothing until the backoff ends.
SELECT q.name, {{queue_has_limits}} AS limited,
       q.rate_limit IS NOT NULL OR q.group_rate_limit IS NOT NULL
       OR q.backoff_until > now() OR q.group_backoff_until > now() AS wakes,
       q.rate_limit IS NOT NULL AND q.concurrency IS NULL AND q.group_concurrency IS NULL
       AND q.group_rate_limit IS NULL AND NOT q.ordered
       AND NOT coalesce(q.group_backoff_until > now(), false) AS rate_only
FROM pgqueue.queues q
WHERE {{queue_has_limits}} OR q.backoff_until > now()
