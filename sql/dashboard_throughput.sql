-- Finished runs per queue and minute over the last hour, with the mean pickup latency
-- (started_at - run_at) of each minute. Reads runs_finished_idx by time: the history
-- older than an hour is never touched.
SELECT queue,
       date_trunc('minute', finished_at) AS minute,
       count(*) FILTER (WHERE state = 'succeeded') AS succeeded,
       count(*) FILTER (WHERE state = 'failed') AS failed,
       count(*) FILTER (WHERE state = 'canceled') AS canceled,
       avg(extract(epoch FROM started_at - run_at))::double precision AS pickup_seconds
FROM pgqueue.runs
WHERE state IN ('succeeded', 'failed', 'canceled')
  AND finished_at >= date_trunc('minute', now()) - interval '59 minutes'
GROUP BY queue, date_trunc('minute', finished_at)
ORDER BY queue, minute
