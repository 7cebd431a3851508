-- Seconds until a rate limit lets queue %(queue)s start a run again, as the queue's last
-- claim wrote it; NULL when it does not hold the queue back, or when that time passed
-- more than 0.1 s ago (a claim that found the queue paused, or empty, leaves it as it
-- was: the worker must not keep claiming on its account).
SELECT extract(epoch FROM q.rate_open_at - clock_timestamp())::double precision
FROM pgqueue.queues q
WHERE q.name = %(queue)s AND q.rate_open_at > clock_timestamp() - interval '100 ms'
