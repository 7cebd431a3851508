-- The dashboard's overview: pgqueue.queue_stats per queue (each live count reads the
-- partial index of its state; "finished recently" reads runs_finished_queue_idx), the
-- live workers that serve each queue, its group weights, its running runs whose lease
-- expired, and the database's clock.
SELECT s.*,
       (SELECT count(*) FROM pgqueue.workers w
         WHERE s.queue = ANY (w.queues) AND w.heartbeat_at > now() - interval '60 seconds')
           AS live_workers,
       -- running runs whose lease expired: their worker stopped renewing it (runs_lease_idx)
       (SELECT count(*) FROM pgqueue.runs r
         WHERE r.state = 'running' AND r.queue = s.queue AND r.lease_expires_at < now())
           AS lease_expired,
       w.group_weights, coalesce(w.default_group_weight, 1) AS default_group_weight,
       now() AS now
FROM pgqueue.queue_stats s
LEFT JOIN pgqueue.queues w ON w.name = s.queue
ORDER BY s.queue
