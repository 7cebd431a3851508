-- One queue's settings (rate limits with their current use) and recent figures for its dashboard page (its live counts come
-- with its groups: dashboard_groups.sql): what finished in the last hour
-- (runs_finished_idx by time) and the live workers that serve it.
SELECT %(queue)s::text AS queue,
       coalesce(q.paused, false) AS paused, q.concurrency, q.group_concurrency,
       q.name IS NOT NULL AS configured,
       {{queue_rate_columns}},
       f.finished_last_minute, f.finished_last_hour, f.failed_last_hour,
       (SELECT count(*) FROM pgqueue.workers w
         WHERE %(queue)s = ANY (w.queues) AND w.heartbeat_at > now() - interval '60 seconds')
           AS live_workers
FROM (SELECT 1) one
LEFT JOIN pgqueue.queues q ON q.name = %(queue)s
CROSS JOIN LATERAL (
    SELECT count(*) FILTER (WHERE finished_at > now() - interval '1 minute')
               AS finished_last_minute,
           count(*) AS finished_last_hour,
           count(*) FILTER (WHERE state = 'failed') AS failed_last_hour
    FROM pgqueue.runs
    WHERE state IN ('succeeded', 'failed', 'canceled')
      AND finished_at > now() - interval '1 hour' AND queue = %(queue)s
) f
