-- How many runs in {states} match a bulk action's filter (each state on its partial
-- index, or runs_finished_idx for finished runs).
SELECT count(*)
FROM pgqueue.runs r
WHERE r.state IN ({states})
  AND (%(queue)s::text IS NULL OR r.queue = %(queue)s::text)
  AND (%(task)s::text IS NULL OR r.task = %(task)s::text)
  AND (%(group)s::text IS NULL OR r.group_key = %(group)s::text)
