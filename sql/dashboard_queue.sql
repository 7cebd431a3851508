-- One queue's figures for its dashboard page, as pgqueue.queue_stats defines them but
-- for this queue alone: each count reads the partial index of its state from the
-- queue's first entry, so the other queues' runs are never read.
SELECT %(queue)s::text AS queue,
       coalesce(q.paused, false) AS paused, q.concurrency, q.group_concurrency,
       q.name IS NOT NULL AS configured,
       (SELECT count(*) FROM pgqueue.runs
         WHERE state = 'scheduled' AND queue = %(queue)s) AS scheduled,
       (SELECT count(*) FROM pgqueue.runs
         WHERE state = 'queued' AND queue = %(queue)s) AS queued,
       (SELECT count(*) FROM pgqueue.runs
         WHERE state = 'running' AND queue = %(queue)s) AS running,
       (SELECT count(*) FROM pgqueue.runs
         WHERE state = 'waiting' AND queue = %(queue)s) AS waiting,
       (SELECT extract(epoch FROM now() - min(run_at))::double precision FROM pgqueue.runs
         WHERE state = 'queued' AND queue = %(queue)s) AS oldest_queued_seconds,
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
