-- Finished runs per queue and minute over the last hour, with the mean pickup latency
-- (started_at - run_at) of each minute, from pgqueue.finished_buckets: the workers'
-- tally and the runs of the last few seconds, never an hour of runs.
SELECT queue,
       date_trunc('minute', bucket) AS minute,
       coalesce(sum(n) FILTER (WHERE state = 'succeeded'), 0)::bigint AS succeeded,
       coalesce(sum(n) FILTER (WHERE state = 'failed'), 0)::bigint AS failed,
       coalesce(sum(n) FILTER (WHERE state = 'canceled'), 0)::bigint AS canceled,
       (sum(pickup_sum) / nullif(sum(picked), 0))::double precision AS pickup_seconds
FROM pgqueue.finished_buckets
WHERE bucket >= date_trunc('minute', now()) - interval '59 minutes'
GROUP BY queue, date_trunc('minute', bucket)
ORDER BY queue, minute
