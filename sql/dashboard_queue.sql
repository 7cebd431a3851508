-- One queue's settings (rate limits with their current use) and recent figures for its dashboard page (its live counts come
-- with its groups: dashboard_groups.sql): what finished in the last minute and hour
-- (pgqueue.finished_buckets, 5-second buckets) and the live workers that serve it; its
-- backoffs in force (RetryAfter(scope="queue" | "group"): the 20 that end last).
SELECT %(queue)s::text AS queue,
       coalesce(q.paused, false) AS paused, q.concurrency, q.group_concurrency,
       q.group_weights, coalesce(q.default_group_weight, 1) AS default_group_weight,
       q.name IS NOT NULL AS configured,
       q.name IS NOT NULL AS configured, q.priority_aging,
       CASE WHEN q.backoff_until > now() THEN q.backoff_until END AS backoff_until,
       ARRAY(SELECT b.group_key FROM pgqueue.group_backoffs b
              WHERE b.queue = %(queue)s AND b.until > now()
              ORDER BY b.until DESC, b.group_key LIMIT 20) AS backoff_groups,
       ARRAY(SELECT b.until FROM pgqueue.group_backoffs b
              WHERE b.queue = %(queue)s AND b.until > now()
              ORDER BY b.until DESC, b.group_key LIMIT 20) AS backoff_group_untils,
       {{queue_rate_columns}},
       f.finished_last_minute, f.finished_last_hour, f.failed_last_hour,
       (SELECT count(*) FROM pgqueue.workers w
         WHERE %(queue)s = ANY (w.queues) AND w.heartbeat_at > now() - interval '60 seconds')
           AS live_workers
FROM (SELECT 1) one
LEFT JOIN pgqueue.queues q ON q.name = %(queue)s
CROSS JOIN LATERAL (
    SELECT coalesce(sum(n) FILTER (WHERE bucket >= now() - interval '1 minute'), 0)::bigint
               AS finished_last_minute,
           coalesce(sum(n), 0)::bigint AS finished_last_hour,
           coalesce(sum(n) FILTER (WHERE state = 'failed'), 0)::bigint AS failed_last_hour
    FROM pgqueue.finished_buckets
    WHERE bucket >= now() - interval '1 hour' AND queue = %(queue)s
) f
