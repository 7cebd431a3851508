-- Cancel every run in {states} (unfinished states only) matching the filter, through
-- pgqueue.cancel() one by one, so that each is canceled as `pgqueue runs cancel` would.
SELECT count(*) FILTER (WHERE pgqueue.cancel(r.id, false))
FROM pgqueue.runs r
WHERE r.state IN ({states})
  AND (%(queue)s::text IS NULL OR r.queue = %(queue)s::text)
  AND (%(task)s::text IS NULL OR r.task = %(task)s::text)
  AND (%(group)s::text IS NULL OR r.group_key = %(group)s::text)
