-- Per queue: runs by state, the oldest queued run's age, limits (rate limits with their
-- starts in the last period) and pause flag.
WITH counts AS (
    SELECT queue,
           count(*) FILTER (WHERE state = 'scheduled') AS scheduled,
           count(*) FILTER (WHERE state = 'queued') AS queued,
           count(*) FILTER (WHERE state = 'running') AS running,
           count(*) FILTER (WHERE state = 'waiting') AS waiting,
           count(*) FILTER (WHERE state = 'succeeded') AS succeeded,
           count(*) FILTER (WHERE state = 'failed') AS failed,
           count(*) FILTER (WHERE state = 'canceled') AS canceled,
           extract(epoch FROM now() - min(run_at) FILTER (WHERE state = 'queued'))::double precision
               AS oldest_queued_seconds
    FROM pgqueue.runs
    GROUP BY queue
)
SELECT coalesce(c.queue, q.name) AS queue,
       coalesce(c.scheduled, 0) AS scheduled, coalesce(c.queued, 0) AS queued,
       coalesce(c.running, 0) AS running, coalesce(c.waiting, 0) AS waiting,
       coalesce(c.succeeded, 0) AS succeeded, coalesce(c.failed, 0) AS failed,
       coalesce(c.canceled, 0) AS canceled, c.oldest_queued_seconds,
       q.concurrency, q.group_concurrency, coalesce(q.paused, false) AS paused,
       {{queue_rate_columns}}
FROM counts c
FULL JOIN pgqueue.queues q ON q.name = c.queue
ORDER BY 1
