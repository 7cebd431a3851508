-- Retry every run in {states} (finished states only) matching the filter, through
-- pgqueue.retry() one by one, so that each retry is recorded as `pgqueue runs retry` does.
SELECT count(*) FILTER (WHERE pgqueue.retry(r.id))
FROM pgqueue.runs r
WHERE r.state IN ({states})
  AND (%(queue)s::text IS NULL OR r.queue = %(queue)s::text)
  AND (%(task)s::text IS NULL OR r.task = %(task)s::text)
  AND (%(group)s::text IS NULL OR r.group_key = %(group)s::text)
