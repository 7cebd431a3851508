-- Seconds until queue %(queue)s may start a run again: the earliest of when a rate limit
-- lets it (as the queue's last claim wrote it; ignored once that time passed more than
-- 0.1 s ago: a claim that found the queue paused, or empty, leaves it as it was, and the
-- worker must not keep claiming on its account), when its backoff ends and when the
-- first of its group backoffs ends. No row when none of them holds the queue back.
SELECT extract(epoch FROM o.at - clock_timestamp())::double precision
FROM pgqueue.queues q
CROSS JOIN LATERAL (
    SELECT least(
        CASE WHEN q.rate_open_at > clock_timestamp() - interval '100 ms'
             THEN q.rate_open_at END,
        CASE WHEN q.backoff_until > clock_timestamp() THEN q.backoff_until END,
        CASE WHEN q.group_backoff_until > clock_timestamp() THEN
            (SELECT min(b.until) FROM pgqueue.group_backoffs b
              WHERE b.queue = q.name AND b.until > clock_timestamp()) END) AS at
) o
WHERE q.name = %(queue)s AND o.at IS NOT NULL
