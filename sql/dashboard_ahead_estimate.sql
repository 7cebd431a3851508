-- The planner's estimate of how many queued runs of a queue come before a run that has
-- more than 1,000 ahead of it (priority, then id, as the claim takes them): planning
-- only, nothing is read. Written as an OR, not a row comparison, whose estimate the
-- planner takes from the first column alone. Run unprepared, so that the plan is made
-- for the values given.
EXPLAIN (FORMAT JSON)
SELECT 1
FROM pgqueue.runs
WHERE state = 'queued' AND queue = %(queue)s::text
  AND (priority < %(priority)s::smallint
       OR (priority = %(priority)s::smallint AND id < %(id)s::bigint))
