-- `pgqueue health`: registered workers whose heartbeat is recent (within %(max_age)s
-- seconds), on host %(host)s or on any host when it is null.
SELECT count(*) AS beating
FROM pgqueue.workers w
WHERE w.heartbeat_at > now() - %(max_age)s * interval '1 second'
  AND (%(host)s::text IS NULL OR w.host = %(host)s::text)
