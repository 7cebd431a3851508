-- Per queue, for `pgqueue queues`: pgqueue.queue_stats's live counts, oldest queued age,
-- limits (group weights from pgqueue.queues) and pause flag, and what finished in the last hour by outcome (the view's
-- succeeded and failed, and the canceled ones from pgqueue.finished_buckets).
SELECT s.queue,
       s.scheduled, s.queued, s.running, s.waiting,
       s.succeeded_last_hour, s.failed_last_hour,
       coalesce(c.n, 0)::bigint AS canceled_last_hour,
       s.oldest_queued_seconds,
       s.concurrency, s.group_concurrency, s.paused,
       s.rate_limit, s.rate_used, s.group_rate_limit, s.ordered,
       w.group_weights, coalesce(w.default_group_weight, 1) AS default_group_weight
FROM pgqueue.queue_stats s
LEFT JOIN pgqueue.queues w ON w.name = s.queue
LEFT JOIN (
    SELECT queue, sum(n) AS n
    FROM pgqueue.finished_buckets
    WHERE state = 'canceled' AND bucket >= now() - interval '1 hour'
    GROUP BY queue
) c ON c.queue = s.queue
ORDER BY 1
