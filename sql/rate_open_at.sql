-- Seconds until a rate limit lets queue %(queue)s start a run again (NULL: it does not
-- hold the queue back), as the queue's last claim wrote it.
SELECT extract(epoch FROM q.rate_open_at - clock_timestamp())::double precision
FROM pgqueue.queues q
WHERE q.name = %(queue)s
