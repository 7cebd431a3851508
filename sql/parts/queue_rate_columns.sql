-- The rate-limit columns of a row `q` of pgqueue.queues, for people: the limits as
-- declared ('100/m') and the queue's starts in the last period (pgqueue.rate_used over
-- its log). dashboard_queue.sql includes it; the view pgqueue.queue_stats
-- (sql/views/queue_stats.sql) writes the same columns out.
q.rate_limit || '/' || CASE q.rate_period WHEN 1 THEN 's' WHEN 60 THEN 'm' ELSE 'h' END
    AS rate_limit,
CASE WHEN q.rate_limit IS NOT NULL
     THEN pgqueue.rate_used(q.rate_slots, q.rate_counts,
                            now() - q.rate_period * interval '1 second') END
    AS rate_used,
q.group_rate_limit || '/'
    || CASE q.group_rate_period WHEN 1 THEN 's' WHEN 60 THEN 'm' ELSE 'h' END
    AS group_rate_limit,
coalesce(q.ordered, false) AS ordered
