-- Per queue: live runs by state (each count reads the partial index of its state: the
-- backlog's size, never the history's), what finished in the last hour
-- (pgqueue.finished_buckets), the oldest queued run's age, limits (rate limits with
-- their starts in the last period) and pause flag.
WITH live AS (
    SELECT queue, 'scheduled' AS state, count(*) AS n, NULL::timestamptz AS oldest
      FROM pgqueue.runs WHERE state = 'scheduled' GROUP BY queue
    UNION ALL
    SELECT queue, 'queued', count(*), min(run_at)
      FROM pgqueue.runs WHERE state = 'queued' GROUP BY queue
    UNION ALL
    SELECT queue, 'running', count(*), NULL
      FROM pgqueue.runs WHERE state = 'running' GROUP BY queue
    UNION ALL
    SELECT queue, 'waiting', count(*), NULL
      FROM pgqueue.runs WHERE state = 'waiting' GROUP BY queue
),
finished AS (
    SELECT queue, state, sum(n) AS n
    FROM pgqueue.finished_buckets WHERE bucket >= now() - interval '1 hour'
    GROUP BY queue, state
),
counts AS (
    SELECT queue,
           sum(n) FILTER (WHERE state = 'scheduled') AS scheduled,
           sum(n) FILTER (WHERE state = 'queued') AS queued,
           sum(n) FILTER (WHERE state = 'running') AS running,
           sum(n) FILTER (WHERE state = 'waiting') AS waiting,
           sum(n) FILTER (WHERE state = 'succeeded') AS succeeded_last_hour,
           sum(n) FILTER (WHERE state = 'failed') AS failed_last_hour,
           sum(n) FILTER (WHERE state = 'canceled') AS canceled_last_hour,
           extract(epoch FROM now() - min(oldest) FILTER (WHERE state = 'queued'))
               ::double precision AS oldest_queued_seconds
    FROM (SELECT * FROM live UNION ALL SELECT queue, state, n, NULL FROM finished) c
    GROUP BY queue
)
SELECT coalesce(c.queue, q.name) AS queue,
       coalesce(c.scheduled, 0)::bigint AS scheduled, coalesce(c.queued, 0)::bigint AS queued,
       coalesce(c.running, 0)::bigint AS running, coalesce(c.waiting, 0)::bigint AS waiting,
       coalesce(c.succeeded_last_hour, 0)::bigint AS succeeded_last_hour,
       coalesce(c.failed_last_hour, 0)::bigint AS failed_last_hour,
       coalesce(c.canceled_last_hour, 0)::bigint AS canceled_last_hour,
       c.oldest_queued_seconds,
       q.concurrency, q.group_concurrency, coalesce(q.paused, false) AS paused,
       {{queue_rate_columns}}
FROM counts c
FULL JOIN pgqueue.queues q ON q.name = c.queue
ORDER BY 1
