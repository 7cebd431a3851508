-- The planner's estimate of how many runs in {states} match a list's filter (the top
-- node's "Plan Rows"; extended statistics of state, queue and task, migration 0024, keep
-- it close): what the dashboard shows, labelled as an estimate, when an exact count
-- would read too much. Planning only: nothing is read. Run unprepared, so that the plan
-- is made for the values given.
EXPLAIN (FORMAT JSON)
SELECT 1
FROM pgqueue.runs r
WHERE r.state IN ({states})
  AND (%(queue)s::text IS NULL OR r.queue = %(queue)s::text)
  AND (%(task)s::text IS NULL OR r.task = %(task)s::text)
  AND (%(group)s::text IS NULL OR r.group_key = %(group)s::text)
